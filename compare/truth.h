// Error against a float64 truth run (docs/design.md section 6): the same cell run in fp64 from the
// same seed checkpoint; each fp32/bf16 tensor's distance from it is counted in the run's own
// ulps (the truth rounded to the run's dtype is the value the run would ideally hold), which
// answers "which transport is closer to the truth".
#pragma once

#include <cstdint>
#include <string>

#include "dumps/h5.h"

namespace parity::compare {

struct TruthError {
  std::string name;
  int64_t numel = 0;
  uint64_t max_ulp = 0;   // largest distance from the rounded truth, in the run's dtype
  double mean_ulp = 0;
  std::string problem;    // shape mismatch, truth not float64, non-finite values
};

// run: a float dtype (bf16, fp16, fp32, fp64); truth: F64 of the same shape.
TruthError error_vs_truth(const std::string& name, const h5::Array& run, const h5::Array& truth);

}  // namespace parity::compare
