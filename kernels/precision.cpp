#include "kernels/precision.h"

#include "kernels/config.h"

namespace parity::kernels {

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
