// Step observers of the CLI: a console line per step (with progress and an ETA) and the JSONL
// metrics file.
//
// JSONL, one object per step:
//   {"step", "loss", "grad_norm", "lr", "mb_losses", "loss_hex", "grad_norm_hex"}
// The _hex fields are C99 hex floats ("%a") of the exact values, so bitwise checks are string
// compares.
//
// Both files are written to "<path>.tmp.<pid>" and renamed onto their path when the run ends
// (dumps/temp_files.h): a stopped run leaves the old file as it was and no temporary behind; a
// run that fails part-way keeps the steps it logged (the JSONL is renamed with them, and the
// run says so).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dumps/temp_files.h"
#include "kernels/observer.h"

namespace parity::harness {

std::string hex_float(double v);

class ConsoleObserver : public kernels::StepObserver {
 public:
  explicit ConsoleObserver(bool quiet = false) : quiet_(quiet) {}
  void on_start(const kernels::RunInfo& info) override;
  void on_step(const kernels::StepRecord& r) override;
  void on_end() override;

 private:
  bool quiet_;
  int64_t steps_ = 0;
  double total_seconds_ = 0;
};

class JsonlObserver : public kernels::StepObserver {
 public:
  explicit JsonlObserver(const std::string& path);  // throws UsageError if it cannot write
  ~JsonlObserver() override;  // a run that failed: keeps the steps it logged
  void on_step(const kernels::StepRecord& r) override;
  void on_end() override;
  void on_abort() override;
  int64_t steps_logged() const { return steps_; }
  const std::string& path() const { return file_.path(); }

 private:
  dumps::AtomicTextFile file_;
  int64_t steps_ = 0;
};

// The run in one JSON file (--summary), written once the run is over:
//   {"steps", "tokens_per_step", "seconds": [per step], "seconds_per_step": median,
//    "bytes_forward_per_mb", "bytes_backward_per_mb" (pipelined; -1 otherwise),
//    "bytes_forward", "bytes_backward" (the last step's, whole)}
class SummaryObserver : public kernels::StepObserver {
 public:
  explicit SummaryObserver(std::string path) : path_(std::move(path)) {}
  void on_step(const kernels::StepRecord& r) override;
  // After the run: the transport's figures (bytes per micro-batch are the mean over the
  // step's micro-batches); pass null for the reference. Throws UsageError when the file cannot
  // be written.
  void write(int64_t bytes_forward, int64_t bytes_backward, const std::vector<int64_t>* fwd_per_mb,
             const std::vector<int64_t>* bwd_per_mb);

 private:
  std::string path_;
  std::vector<double> seconds_;
  int64_t tokens_ = 0;
};

// Fans every call out to several observers, in order.
class ObserverList : public kernels::StepObserver {
 public:
  void add(kernels::StepObserver* o) { observers_.push_back(o); }
  void on_start(const kernels::RunInfo& info) override;
  bool wants_tensors(int64_t step) const override;
  void on_step(const kernels::StepRecord& r) override;
  void on_end() override;
  void on_abort() override;

 private:
  std::vector<kernels::StepObserver*> observers_;
};

}  // namespace parity::harness
