#include "compare/truth.h"

#include <algorithm>
#include <cmath>

#include "compare/float_formats.h"
#include "compare/tensor_compare.h"

namespace parity::compare {

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
  if (!is_float(run.dtype)) {
    e.problem = std::string("cannot measure a ") + h5::dtype_name(run.dtype) + " tensor in ulps";
    return e;
  }
  double total = 0;
  for (int64_t i = 0; i < e.numel; ++i) {
    const double t = load_as<h5::DType::F64>(truth.bytes.data(), i);
    const double r = load_value(run.dtype, run.bytes.data(), i);
    if (!std::isfinite(t) || !std::isfinite(r)) {
      e.problem = "non-finite values";
      e.max_ulp = kInfiniteUlp;
      return e;
    }
    // The truth rounded to the run's dtype is the value the run would ideally hold.
    const __int128 d = static_cast<__int128>(stored_ordinal(run.dtype, run.bytes.data(), i)) -
                       ordinal_in(run.dtype, t);
    const uint64_t u = static_cast<uint64_t>(d < 0 ? -d : d);
    e.max_ulp = std::max(e.max_ulp, u);
    total += static_cast<double>(u);
  }
  e.mean_ulp = e.numel ? total / static_cast<double>(e.numel) : 0;
  return e;
}

}  // namespace parity::compare
