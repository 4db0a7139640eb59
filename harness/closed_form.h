// `parity closed-form`: the exact flavor through a real trainer, checked against its closed
// form (compare/exact_math.h) value for value (docs/design.md section 3, contract 3).
//
// The run: 16 layers in blocks of 4, 4 micro-batches of one row of 2 tokens (N = 8), SGD at
// lr 4, clipping off, `steps` steps and a forward-only pass on the next step's batch between
// two steps. Checked after every step: each micro-batch loss, the loss, every parameter's
// gradient and every parameter after the update; and the forward-only losses. The expected
// values are exact; each must also fit the dtype that holds it (bf16 compute: 8 significand
// bits), else the model has left its exact range and the check says so. Equality is of
// values: a float zero of either sign equals the exact zero (the exact sum has no sign).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/run_options.h"
#include "kernels/precision.h"
#include "pipelined/trainer.h"

namespace parity::harness {

struct ClosedFormOptions {
  bool pipelined = false;            // false: the single-device reference trainer
  pipelined::PipelineConfig pipeline;  // pp, vp, schedule, cache, split, injected faults
  kernels::Precision precision = kernels::Precision::FP32;
  bool wide = false;  // exact-wide: values beyond 2^24 (fp64 only)
  int64_t steps = 3;
  std::string device = "cpu";
  int threads = 1;
};

// One checked tensor (or scalar) that differs from the closed form.
struct ClosedFormMismatch {
  std::string what;  // e.g. "step 2 grad layers.3.read.weight"
  int64_t numel = 0, n_wrong = 0;
  int64_t first_index = -1;
  std::string got, expected;  // at first_index, exact decimals
};

struct ClosedFormReport {
  std::string cell;  // "pipelined pp4xvp4 interleaved1f1b cache on, bf16"
  int64_t values_checked = 0;
  int64_t tensors_checked = 0;
  std::vector<ClosedFormMismatch> mismatches;
  // Expected values that do not fit their dtype (a flaw of the model, not of the run).
  std::vector<std::string> out_of_range;
  int max_significand_bits = 0;  // over every expected value checked
  std::vector<int64_t> fault_hits;  // per injected fault, how often it fired
  bool pass() const { return mismatches.empty() && out_of_range.empty(); }
};

// Throws kernels::ConfigError on a bad combination (wide outside fp64, a bad split).
// progress, if set, gets one line per step.
ClosedFormReport run_closed_form(const ClosedFormOptions& o,
                                 const std::function<void(const std::string&)>& progress = {});

// `parity closed-form`: the run that `run` describes (pp, vp, schedule, cache, split, dtype,
// steps, inject, device, threads) through `trainer` ("auto": pipelined when a pipeline shape
// is given), its progress, mismatches and verdict printed on stdout. Returns 0 when every
// value is exact, 1 otherwise; throws UsageError for a bad combination.
struct ClosedFormJob {
  RunOptions run;
  std::optional<spec::Trainer> trainer;  // none: pipelined when a pipeline shape is given
  bool wide = false;
};
int closed_form_command(const ClosedFormJob& job);

}  // namespace parity::harness
