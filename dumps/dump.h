// Run dumps (docs/design.md section 6): what a run did, per step, in HDF5, for the comparison
// engine and for anyone with h5py.
//
// Schema version 1, one file per run and rank (rank<R>.h5 in the dump directory):
//   /meta                      attributes: schema = "parity-dump", schema_version, git_sha,
//                              config (JSON: the run's RunInfo and trainer facts), trainer,
//                              flavor, dtype, device, torch_version, threads, vector_kernels
//                              (the fp32 product, BLAS and ATen kernels that ran,
//                              kernels/vector_kernels.h),
//                              seed, split, schedule_grid, rank, complete (0 if the run failed
//                              part-way),
//                              run_id and files (every rank file of one run carries the same
//                              run_id, and files says how many the run wrote)
//   /metrics/loss              float64 [steps]  every step's loss
//   /metrics/grad_norm         float64 [steps]  every step's total norm (before clipping)
//   /step_000001/loss          scalar, the loss's dtype
//   /step_000001/grad_norm     scalar
//   /step_000001/mb_losses     [M]
//   /step_000001/grads/<fqn>   the accumulated gradient before clipping (master dtype)
//   /step_000001/params/<fqn>  the parameter after the step's update (master dtype)
//   /step_000001/buffers/<fqn> the persistent buffers after the step (each MoE layer's expert
//                              bias, fp32); in rank 0's file only (every rank holds them all)
//   /step_000001/ledger/...    with --ledger: the contribution ledger (dumps/ledger_dump.h)
// Written to a temporary name and renamed; a run that fails still leaves the steps it dumped,
// with complete = 0.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dumps/h5.h"
#include "kernels/observer.h"

#include "spec/bad_input.h"

namespace parity::dumps {

constexpr int64_t kDumpSchemaVersion = 1;

// A dump that cannot be used: the CLI maps it to exit 2.
class DumpError : public spec::BadInput {
 public:
  using spec::BadInput::BadInput;
};

std::string step_group(int64_t step);  // "/step_000001"

class DumpWriter : public kernels::StepObserver {
 public:
  // Writes dir/rank<rank>.h5 (dir is created). steps: the steps whose tensors are dumped.
  // only: the FQNs whose tensors this file holds (empty: all). A multi-process run's ranks
  // each write the parameters they own; the reader merges the files by FQN. run_id names the
  // run ("" makes one from the host, the process and the time) and files is how many rank
  // files it writes: the reader refuses a directory that mixes runs or lacks a file.
  DumpWriter(std::string dir, std::set<int64_t> steps, std::string git_sha, int rank = 0,
             std::set<std::string> only = {}, std::string run_id = "", int files = 1);
  ~DumpWriter() override;  // a run that failed part-way: commits what it has, complete = 0

  void on_start(const kernels::RunInfo& info) override;
  bool wants_tensors(int64_t step) const override { return steps_.count(step) != 0; }
  void on_step(const kernels::StepRecord& r) override;
  void on_end() override;
  void on_abort() override;  // commits what it has, complete = 0
  const std::string& path() const { return path_; }

 private:
  void finish(bool complete);

  std::string dir_, path_, git_sha_, run_id_;
  std::string created_dir_;  // the directory this writer created, if it did
  int files_ = 1;
  std::set<int64_t> steps_;
  int rank_;
  std::unique_ptr<h5::File> file_;
  std::vector<double> losses_, norms_;
  std::vector<std::string> fqns_;
  std::set<std::string> only_;
};

// A tensor as stored: dtype, shape, raw bytes.
using StoredTensor = h5::Array;

struct StepDump {
  int64_t step = 0;
  std::map<std::string, StoredTensor> scalars;  // "loss", "grad_norm", "mb_losses"
  std::vector<std::string> fqns;                // FQN order as written
  std::map<std::string, StoredTensor> grads, params;
  std::map<std::string, StoredTensor> buffers;  // absent in dumps of models without MoE
};

struct Dump {
  std::string source;  // the file or directory read
  std::map<std::string, std::string> meta;  // string attributes of /meta (numbers as text)
  std::vector<double> losses, grad_norms;
  std::map<int64_t, StepDump> steps;
};

// The advice a dump error ends with: how to write the dump again.
std::string dump_remedy();

// A name for one run, the same in all its rank files: "<host>-<pid>-<nanoseconds since epoch>".
std::string new_run_id();

// The files of a dump: the file itself, or every rank*.h5 in a directory, sorted. Throws
// DumpError when there are none.
std::vector<std::string> dump_files(const std::string& path);

// Reads a dump file, or every rank*.h5 in a directory merged by FQN (a pipelined run's ranks
// each hold their stages' tensors). Throws DumpError naming the file and the remedy.
Dump read_dump(const std::string& path);

}  // namespace parity::dumps
