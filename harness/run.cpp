#include "harness/run.h"

#include <iostream>

#include "harness/errors.h"
#include "harness/launcher.h"
#include "reference/trainer.h"

namespace parity::harness {

void run_trainer(const std::string& trainer, const RunOptions& o, kernels::StepObserver& obs,
                 const RunReport& report) {
  if (!o.inject.empty() && trainer != "pipelined")
    throw UsageError("--inject needs --trainer pipelined");
  const bool from_env = rank_from_environment(o);
  if ((o.nproc > 0 || from_env) && trainer != "pipelined")
    throw UsageError("--nproc and --backend need --trainer pipelined (the reference is one "
                     "process; its --dp replicas run in it)");
  auto cfg = train_config(o);
  if (trainer == "reference") {
    auto rows = load_rows(o);
    auto init = initial_params(o, cfg.model);
    reference::ReferenceTrainer(cfg, init, *rows).run(obs);
    if (report) report({});
    return;
  }
  if (trainer != "pipelined")
    throw UsageError("unknown --trainer '" + trainer + "'; use reference or pipelined");

  if (o.nproc > 0) return launch_local(o, obs, report);
  if (from_env) return run_rank(o, comm_from_environment(o), obs, report);
  auto pc = pipeline_config(o);
  auto rows = load_rows(o);
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
