#include "compare/truth.h"

#include <cmath>
#include <cstring>

#include "compare/tensor_compare.h"

namespace parity::compare {

namespace {

// Round-to-nearest-even of an fp32 value to bf16 bits (what a cast to bf16 does).
uint16_t float_to_bf16_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace

TruthError error_vs_truth(const std::string& name, const h5::Array& run, const h5::Array& truth) {
  TruthError e;
  e.name = name;
  e.numel = run.numel();
  if (truth.dtype != h5::DType::F64) {
    e.problem = "the truth run is not float64";
    return e;
  }
  if (run.shape != truth.shape) {
    e.problem = "shapes differ";
    return e;
  }
  double total = 0;
  for (int64_t i = 0; i < e.numel; ++i) {
    double t;
    std::memcpy(&t, truth.bytes.data() + 8 * i, 8);
    uint64_t u = 0;
    bool finite = std::isfinite(t);
    switch (run.dtype) {
      case h5::DType::F32: {
        float r;
        std::memcpy(&r, run.bytes.data() + 4 * i, 4);
        finite = finite && std::isfinite(r);
        if (finite) u = ulp_distance_f32(r, static_cast<float>(t));
        break;
      }
      case h5::DType::BF16: {
        uint16_t r;
        std::memcpy(&r, run.bytes.data() + 2 * i, 2);
        if (finite) u = ulp_distance_bf16(r, float_to_bf16_bits(static_cast<float>(t)));
        break;
      }
      case h5::DType::F64: {
        double r;
        std::memcpy(&r, run.bytes.data() + 8 * i, 8);
        finite = finite && std::isfinite(r);
        if (finite) u = ulp_distance_f64(r, t);
        break;
      }
      default:
        e.problem = std::string("cannot measure a ") + h5::dtype_name(run.dtype) + " tensor in ulps";
        return e;
    }
    if (!finite) {
      e.problem = "non-finite values";
      e.max_ulp = kInfiniteUlp;
      return e;
    }
    e.max_ulp = std::max(e.max_ulp, u);
    total += static_cast<double>(u);
  }
  e.mean_ulp = e.numel ? total / static_cast<double>(e.numel) : 0;
  return e;
}

}  // namespace parity::compare
