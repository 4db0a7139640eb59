#include "harness/train.h"

#include <filesystem>
#include <iostream>
#include <memory>
#include <set>

#include "dumps/dump.h"
#include "dumps/temp_files.h"
#include "harness/errors.h"
#include "harness/launcher.h"
#include "harness/observers.h"
#include "harness/run.h"
#include "harness/validate.h"
#include "harness/version.h"

namespace parity::harness {

namespace {

// Every check of the job, before any output is opened: the run's own (validate_run), the dump
// steps against the steps, the output paths. Returns the prepared run and the old dump files
// the run replaces (--overwrite).
PreparedRun check_job(const TrainJob& o, std::vector<std::string>& replaced) {
  for (int64_t s : o.dump_steps)
    if (s > o.run.steps)
      throw UsageError("--dump-steps " + std::to_string(s) + " is past the last step (--steps " +
                       std::to_string(o.run.steps) + "); dump steps from 1 to " +
                       std::to_string(o.run.steps));
  if (o.overwrite && o.dump_dir.empty())
    throw UsageError("--overwrite replaces the files of a --dump directory; give --dump DIR");
  if (o.run.ledger && o.dump_dir.empty())
    throw UsageError("--ledger is stored in the dump: give --dump DIR (and --dump-steps)");
  auto prepared = validate_run(o.run);
  if (!o.metrics.empty()) check_output_file("--metrics", o.metrics);
  if (!o.summary.empty()) check_output_file("--summary", o.summary);
  if (!o.dump_dir.empty()) {
    // A rank started on its own shares the directory with its run's other ranks: only its own
    // file can be another run's.
    const bool alone = o.run.nproc == 0 && rank_from_environment(o.run);
    const int own = alone ? comm_from_environment(o.run).rank : -1;
    replaced = check_dump_dir(o.dump_dir, o.overwrite, own);
  }
  return prepared;
}

}  // namespace

void run_train(const TrainJob& o) {
  std::vector<std::string> replaced;
  const auto prepared = check_job(o, replaced);
  for (const auto& f : replaced) std::filesystem::remove(f);
  // The dump directory is made here, before any worker starts, so that a stop removes it
  // again when the run made it and wrote nothing into it yet (dumps/temp_files.h).
  std::string made_dir;
  if (!o.dump_dir.empty()) {
    std::error_code ec;
    made_dir = dumps::make_temp_dir(o.dump_dir, ec);
    if (ec) throw UsageError("--dump '" + o.dump_dir + "' cannot be created: " + ec.message());
  }

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
  const bool multi = run.nproc > 0 || rank_from_environment(run);
  if (!o.dump_dir.empty() && multi) {
    // Each rank of dp replica 0 writes rank<R>.h5 with the parameters it owns.
    const std::string dir = o.dump_dir;
    const int files = run.pp;
    run.rank_observer = [dir, steps, files](int rank, std::set<std::string> fqns,
                                            const std::string& id) {
      return std::unique_ptr<kernels::StepObserver>(
          new dumps::DumpWriter(dir, steps, git_sha(), rank, std::move(fqns), id, files));
    };
  } else if (!o.dump_dir.empty()) {
    dump = std::make_unique<dumps::DumpWriter>(o.dump_dir, steps, git_sha());
    observers.add(dump.get());
  }
  RunReport report;
  if (summary)
    report = [&summary, &o](const pipelined::PipelineStats& st) {
      const bool pipe = o.run.pipelined();
      summary->write(st.bytes_forward, st.bytes_backward, pipe ? &st.bytes_forward_per_mb : nullptr,
                     pipe ? &st.bytes_backward_per_mb : nullptr);
    };
  try {
    run_prepared(run, prepared, observers, report);
    if (!made_dir.empty()) dumps::unregister_temp_dir(made_dir);
  } catch (...) {
    // What the failed run leaves, so that nobody takes it for a finished one.
    std::string left;
    if (!o.metrics.empty()) left += " " + o.metrics + " (the steps it logged)";
    if (!o.summary.empty()) left += "; no " + o.summary;
    if (!o.dump_dir.empty()) left += "; " + o.dump_dir + " (marked incomplete)";
    if (!left.empty()) std::cerr << "parity: the run did not finish; it leaves" << left << "\n";
    throw;
  }
}

}  // namespace parity::harness
