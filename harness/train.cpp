#include "harness/train.h"

#include <cstdlib>
#include <memory>
#include <set>

#include "dumps/dump.h"
#include "harness/observers.h"
#include "harness/run.h"
#include "harness/version.h"

namespace parity::harness {

void run_train(const TrainJob& o) {
  ConsoleObserver console(o.quiet);
  std::unique_ptr<JsonlObserver> jsonl;
  ObserverList observers;
  observers.add(&console);
  if (!o.metrics.empty()) {
    jsonl = std::make_unique<JsonlObserver>(o.metrics);
    observers.add(jsonl.get());
  }
  std::unique_ptr<SummaryObserver> summary;
  if (!o.summary.empty()) {
    summary = std::make_unique<SummaryObserver>(o.summary);
    observers.add(summary.get());
  }
  std::unique_ptr<dumps::DumpWriter> dump;
  RunOptions run = o.run;
  const std::set<int64_t> steps(o.dump_steps.begin(), o.dump_steps.end());
  // The ledger is only ever read from a dump: record it on the dumped steps alone.
  if (run.ledger && !o.dump_dir.empty()) run.ledger_steps = o.dump_steps;
  const bool multi = run.nproc > 0 || (std::getenv("RANK") && !run.backend.empty());
  if (!o.dump_dir.empty() && multi) {
    // Each rank writes rank<R>.h5 with the parameters it owns.
    const std::string dir = o.dump_dir;
    run.rank_observer = [dir, steps](int rank, std::set<std::string> fqns) {
      return std::unique_ptr<kernels::StepObserver>(
          new dumps::DumpWriter(dir, steps, git_sha(), rank, std::move(fqns)));
    };
  } else if (!o.dump_dir.empty()) {
    dump = std::make_unique<dumps::DumpWriter>(o.dump_dir, steps, git_sha());
    observers.add(dump.get());
  }
  RunReport report;
  if (summary)
    report = [&summary, &o](const pipelined::PipelineStats& st) {
      const bool pipe = o.trainer == "pipelined";
      summary->write(st.bytes_forward, st.bytes_backward, pipe ? &st.bytes_forward_per_mb : nullptr,
                     pipe ? &st.bytes_backward_per_mb : nullptr);
    };
  run_trainer(o.trainer, run, observers, report);
}

}  // namespace parity::harness
