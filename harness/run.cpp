#include "harness/run.h"

#include <iostream>

#include "harness/errors.h"
#include "harness/launcher.h"
#include "harness/validate.h"
#include "reference/trainer.h"

namespace parity::harness {

void run_trainer(const std::string& trainer, const RunOptions& o, kernels::StepObserver& obs,
                 const RunReport& report, std::shared_ptr<const datasets::TokenRows> rows) {
  if (!rows) rows = validate_run(trainer, o);
  auto cfg = train_config(o);
  if (trainer == "reference") {
    auto init = initial_params(o, cfg.model);
    reference::ReferenceTrainer(cfg, init, *rows).run(obs);
    if (report) report({});
    return;
  }
  if (o.nproc > 0) return launch_local(o, obs, report, rows);
  if (rank_from_environment(o)) return run_rank(o, comm_from_environment(o), obs, report, rows);
  auto pc = pipeline_config(o);
  auto init = initial_params(o, cfg.model);
  pipelined::PipelinedTrainer t(cfg, pc, init, *rows);
  t.run(obs);
  warn_unfired_faults(pc.faults, t.fault_hits());
  if (report) report(t.last_stats());
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
