#include "reference/trainer.h"

#include <torch/torch.h>

#include <chrono>

#include "kernels/config.h"
#include "kernels/threads.h"

namespace parity::reference {

using kernels::NamedTensors;
using kernels::Precision;

ReferenceTrainer::ReferenceTrainer(TrainConfig cfg, const NamedTensors& init,
                                   const datasets::TokenRows& data)
    : cfg_(std::move(cfg)),
      model_(cfg_.model, cfg_.model_options),
      data_(data),
      optimizer_(cfg_.adamw, {}) {
  const auto device = torch::Device(cfg_.device);
  const auto mdt = kernels::master_dtype(cfg_.precision);
  std::vector<at::Tensor> masters;
  for (const auto& t : init.tensors()) masters.push_back(t.to(device, mdt).clone());
  master_ = NamedTensors(init.names(), masters);
  auto bufs = kernels::init_buffers(cfg_.model);
  std::vector<at::Tensor> btensors;
  for (const auto& t : bufs.tensors())
    btensors.push_back(t.to(device, kernels::compute_dtype(cfg_.precision)));
  buffers_ = NamedTensors(bufs.names(), btensors);
  optimizer_ = kernels::AdamW(cfg_.adamw, master_.tensors());
}

kernels::RunInfo ReferenceTrainer::run_info() const {
  kernels::RunInfo info;
  info.trainer = "reference";
  info.flavor = cfg_.model.name;
  info.precision = kernels::to_string(cfg_.precision);
  info.grad_accum = effective_grad_accum(cfg_);
  info.clip_order = kernels::to_string(cfg_.clip_order);
  info.attn_res_impl =
      cfg_.model_options.attn_res == kernels::AttnResImpl::Plain ? "plain" : "recompute";
  info.kda_impl = cfg_.model_options.kda == kernels::KdaImpl::Chunked ? "chunked" : "recurrent";
  info.device = cfg_.device;
  info.seed = cfg_.seed;
  info.threads = cfg_.threads;
  info.steps = cfg_.steps;
  info.microbatches = cfg_.microbatches;
  info.rows = cfg_.rows;
  info.seq_len = data_.seq_len();
  info.dp = cfg_.dp;
  info.reverse_microbatches = cfg_.reverse_microbatches;
  info.fqns = master_.names();
  return info;
}

void ReferenceTrainer::run(kernels::StepObserver& observer) {
  kernels::pin_threads(cfg_.threads);
  if (torch::Device(cfg_.device).is_cuda()) kernels::use_deterministic_cuda();
  observer.on_start(run_info());
  for (int64_t s = 1; s <= cfg_.steps; ++s) step(s, observer);
  observer.on_end();
}

void ReferenceTrainer::step(int64_t s, kernels::StepObserver& observer) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto device = torch::Device(cfg_.device);
  const size_t P = master_.size();
  std::vector<size_t> all(P);
  for (size_t i = 0; i < P; ++i) all[i] = i;

  auto compute = kernels::make_compute_copies(cfg_, master_);
  const NamedTensors weights(master_.names(), compute);

  const int64_t T = data_.seq_len();
  const datasets::BatchShape shape{cfg_.dp, cfg_.microbatches, cfg_.rows};
  const int64_t n_global = static_cast<int64_t>(cfg_.dp) * cfg_.microbatches * cfg_.rows * T;

  std::vector<at::Tensor> grads;      // summed over dp replicas, rank order
  std::vector<at::Tensor> mb_losses;  // execution order over all replicas
  at::Tensor loss;
  std::vector<int64_t> inputs, labels;
  for (int r = 0; r < cfg_.dp; ++r) {
    kernels::GradAccumulator acc(cfg_, master_, compute);
    std::vector<at::Tensor> replica_losses;
    for (int m = 0; m < cfg_.microbatches; ++m) {
      auto rows = datasets::microbatch_rows(shape, data_.num_rows(), s, r, m,
                                            cfg_.reverse_microbatches);
      datasets::fill_microbatch(data_, rows, inputs, labels);
      auto opts = torch::TensorOptions().dtype(torch::kLong);
      auto tok = torch::from_blob(inputs.data(), {cfg_.rows, T}, opts).to(device);
      auto lab = torch::from_blob(labels.data(), {cfg_.rows, T}, opts).to(device);
      auto l_m = model_.loss_sum(weights, buffers_, tok, lab) / static_cast<double>(n_global);
      l_m.backward();
      replica_losses.push_back(l_m.detach());
      acc.after_backward(all);
    }
    auto replica_grads = acc.finish();
    auto replica_loss = torch::stack(replica_losses).sum();
    loss = r == 0 ? replica_loss : loss + replica_loss;
    if (r == 0)
      grads = std::move(replica_grads);
    else
      for (size_t i = 0; i < P; ++i) grads[i].add_(replica_grads[i]);
    for (auto& l : replica_losses) mb_losses.push_back(l);
  }
  kernels::finish_step(cfg_, s, optimizer_, master_, std::move(grads), loss, mb_losses, n_global,
                       t0, observer);
}

}  // namespace parity::reference
