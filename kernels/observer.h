// What a trainer tells the world, and nothing about file formats (docs/design.md section 2).
//
// Both trainers call a StepObserver; the CLI wires observers that print, write JSONL metrics
// or HDF5 dumps. Tensors handed to an observer are valid only during the call.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace parity::kernels {

class Ledger;

struct RunInfo {
  std::string trainer;  // "reference" | "pipelined"
  std::string flavor;
  std::string precision;
  std::string grad_accum;
  std::string clip_order;
  std::string attn_res_impl;
  std::string kda_impl;
  std::string device;
  uint64_t seed = 0;
  int threads = 1;
  int64_t steps = 0, microbatches = 0, rows = 0, seq_len = 0, dp = 1;
  bool reverse_microbatches = false;
  std::vector<std::string> fqns;  // parameter FQNs in FQN order
  // Trainer-specific facts (the pipelined trainer: pp, vp, schedule, cache, split, grid).
  std::vector<std::pair<std::string, std::string>> extra;
};

struct StepRecord {
  int64_t step = 0;          // 1-based
  double lr = 0;             // the learning rate this step's update used
  at::Tensor loss;           // scalar: the sum of micro-batch losses in one reduction
  at::Tensor grad_norm;      // scalar: total norm before clipping
  std::vector<at::Tensor> mb_losses;  // per micro-batch, in execution order
  int64_t tokens = 0;        // label tokens in the step (N_global)
  double seconds = 0;        // wall time of the step
  // Set only when the observer asked for them (wants_tensors):
  const std::vector<at::Tensor>* grads = nullptr;   // accumulated, before clipping (FQN order)
  const std::vector<at::Tensor>* params = nullptr;  // master parameters after the update
  const Ledger* ledger = nullptr;  // ledger mode only: the step's contributions (ledger.h)
  // The persistent buffers after the step, by name: each MoE layer's expert bias (the one the
  // next step selects with). Empty for a model without MoE.
  const std::vector<std::string>* buffer_names = nullptr;
  const std::vector<at::Tensor>* buffers = nullptr;
};

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void on_start(const RunInfo&) {}
  // Whether this step's record should carry gradients and parameters (they cost a copy).
  virtual bool wants_tensors(int64_t /*step*/) const { return false; }
  virtual void on_step(const StepRecord& record) = 0;
  virtual void on_end() {}
  // The run failed part-way: keep what was recorded, marked incomplete. (Called where
  // destructors will not run, as in a worker process that exits at once.)
  virtual void on_abort() {}
};

}  // namespace parity::kernels
