// Running a trainer as a RunOptions asks: the reference, the pipelined trainer in-process, one
// rank of a multi-process run started elsewhere (torchrun-style environment), or a local
// multi-process run (--nproc, harness/launcher.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "datasets/rows.h"
#include "harness/run_options.h"
#include "harness/validate.h"
#include "kernels/observer.h"
#include "pipelined/faults.h"
#include "pipelined/trainer.h"

namespace parity::harness {

// Called once after the run with the last step's pipeline figures, by the process that ran
// rank 0 (with --nproc, a worker: the observer and the report live there).
using RunReport = std::function<void(const pipelined::PipelineStats&)>;

// Runs the trainer o.trainer names with the observer, on what validate_run prepared for `o`
// (harness/validate.h): nothing is built or read again.
void run_prepared(const RunOptions& o, const PreparedRun& run, kernels::StepObserver& obs,
                  const RunReport& report = {});

// validate_run, then run_prepared. Throws UsageError for a bad combination of options.
void run_trainer(const RunOptions& o, kernels::StepObserver& obs, const RunReport& report = {});

// One stderr warning per injected fault that never fired (nothing to break where it pointed).
void warn_unfired_faults(const std::vector<pipelined::Fault>& faults,
                         const std::vector<int64_t>& hits);

}  // namespace parity::harness
