#include "kernels/precision.h"

#include "kernels/config.h"

namespace parity::kernels {

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::FP32;
  if (s == "bf16") return Precision::BF16;
  if (s == "bf16-master") return Precision::BF16Master;
  if (s == "fp64") return Precision::FP64;
  throw ConfigError("unknown dtype '" + s + "'; use fp32, bf16, bf16-master or fp64");
}

const char* to_string(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::BF16: return "bf16";
    case Precision::BF16Master: return "bf16-master";
    case Precision::FP64: return "fp64";
  }
  return "?";
}

at::ScalarType compute_dtype(Precision p) {
  switch (p) {
    case Precision::FP32: return at::kFloat;
    case Precision::BF16:
    case Precision::BF16Master: return at::kBFloat16;
    case Precision::FP64: return at::kDouble;
  }
  return at::kFloat;
}

at::ScalarType master_dtype(Precision p) {
  switch (p) {
    case Precision::BF16: return at::kBFloat16;
    case Precision::FP64: return at::kDouble;
    default: return at::kFloat;
  }
}

bool is_bf16(Precision p) { return p == Precision::BF16 || p == Precision::BF16Master; }

at::ScalarType accum_dtype(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

}  // namespace parity::kernels
