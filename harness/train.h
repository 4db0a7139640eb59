// `parity train`: one run of a trainer with its outputs. The console line per step, the
// metrics JSONL, the summary JSON and the HDF5 dump are observers of the run
// (harness/observers.h, dumps/dump.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/run_options.h"

namespace parity::harness {

struct TrainJob {
  RunOptions run;
  std::string metrics;                // JSONL per step; "" = none
  std::string summary;                // JSON once the run is over; "" = none
  std::string dump_dir;               // rank<R>.h5 files; "" = none
  bool overwrite = false;             // replace an earlier run's rank files in dump_dir
  std::vector<int64_t> dump_steps{1};  // the steps whose tensors (and ledger) are dumped
  bool quiet = false;                  // no console line per step
};

// Runs the job. Every check (harness/validate.h, the dump steps, the output paths) passes
// before an output is opened, so a refused run leaves every file as it was. With --ledger the
// ledger is recorded on the dumped steps alone (it is only ever read from a dump). A
// multi-process run's ranks each write their own dump file with the parameters they own.
// Throws UsageError for bad input; a run that fails part-way says what it leaves.
void run_train(const TrainJob& job);

}  // namespace parity::harness
