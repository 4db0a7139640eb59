#include "harness/run.h"

#include <iostream>

#include "harness/errors.h"
#include "harness/launcher.h"
#include "harness/validate.h"
#include "reference/trainer.h"

namespace parity::harness {

void run_prepared(const RunOptions& o, const PreparedRun& run, kernels::StepObserver& obs,
                  const RunReport& report) {
  if (!o.pipelined()) {
    reference::ReferenceTrainer trainer(run.cfg, run.init, *run.rows);
    trainer.set_grad_faults(run.grad_faults);
    trainer.run(obs);
    if (report) report({});
    return;
  }
  if (o.nproc > 0) return launch_local(o, run, obs, report);
  if (rank_from_environment(o)) return run_rank(o, comm_from_environment(o), run, obs, report);
  pipelined::PipelinedTrainer t(run.cfg, run.pc, run.init, *run.rows);
  t.run(obs);
  warn_unfired_faults(run.pc.faults, t.fault_hits());
  if (report) report(t.last_stats());
}

void run_trainer(const RunOptions& o, kernels::StepObserver& obs, const RunReport& report) {
  run_prepared(o, validate_run(o), obs, report);
}

void warn_unfired_faults(const std::vector<pipelined::Fault>& faults,
                         const std::vector<int64_t>& hits) {
  for (size_t i = 0; i < faults.size(); ++i)
    if (i >= hits.size() || hits[i] == 0)
      std::cerr << "parity: warning: --inject " << faults[i].str()
                << " never fired: nothing of that kind to break there (no such deposit or "
                   "collection, see `parity layout`; for stale-block, no other micro-batch's "
                   "copy in the store at that moment)\n";
}

}  // namespace parity::harness
