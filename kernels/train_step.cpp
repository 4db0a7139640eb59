#include "kernels/train_step.h"

#include <ATen/ATen.h>

#include "kernels/config.h"
#include "kernels/host_allocator.h"
#include "kernels/memory_ledger.h"
#include "kernels/moe.h"
#include "kernels/op_family.h"
#include "kernels/threads.h"

namespace parity::kernels {

std::string effective_grad_accum(const TrainConfig& c) {
  if (!is_bf16(c.precision)) return "fp32";  // the two modes coincide
  return c.grad_accum == GradAccum::FP32 ? "fp32" : "bf16";
}

RunInfo make_run_info(const TrainConfig& cfg, const std::string& trainer, int64_t seq_len,
                      const std::vector<std::string>& fqns) {
  RunInfo info;
  info.trainer = trainer;
  info.flavor = cfg.model.name;
  info.precision = to_string(cfg.precision);
  info.grad_accum = effective_grad_accum(cfg);
  info.clip_order = to_string(cfg.clip_order);
  info.attn_res_impl = to_string(cfg.model_options.attn_res);
  info.kda_impl = to_string(cfg.model_options.kda);
  info.device = cfg.device;
  info.seed = cfg.seed;
  info.threads = cfg.threads;
  info.steps = cfg.steps;
  info.microbatches = cfg.microbatches;
  info.rows = cfg.rows;
  info.seq_len = seq_len;
  info.dp = cfg.dp;
  info.reverse_microbatches = cfg.reverse_microbatches;
  info.fqns = fqns;
  return info;
}

NamedTensors make_masters(const TrainConfig& cfg, const NamedTensors& init) {
  MemoryTag tag(MemCategory::Params);
  const auto device = at::Device(cfg.device);
  const auto mdt = master_dtype(cfg.precision);
  std::vector<at::Tensor> masters;
  for (const auto& t : init.tensors()) masters.push_back(t.to(device, mdt).clone());
  return init.with(std::move(masters));
}

NamedTensors make_buffers(const TrainConfig& cfg) {
  auto bufs = init_buffers(cfg.model, cfg.initial_buffers);
  std::vector<at::Tensor> out;
  for (const auto& t : bufs.tensors()) out.push_back(t.to(at::Device(cfg.device)));
  return bufs.with(std::move(out));
}

void prepare_run(const TrainConfig& cfg) {
  pin_threads(cfg.threads);
  install_host_allocator();
  if (at::Device(cfg.device).is_cuda()) use_deterministic_cuda();
}

std::vector<at::Tensor> make_compute_copies(const TrainConfig& cfg, const NamedTensors& master) {
  MemoryTag tag(MemCategory::Params);
  const auto cdt = compute_dtype(cfg.precision);
  std::vector<at::Tensor> out;
  out.reserve(master.size());
  for (size_t i = 0; i < master.size(); ++i) {
    const auto& m = master[i];
    const bool trainable = !(cfg.freeze_embedding && master.names()[i] == kEmbeddingFqn);
    out.push_back(m.scalar_type() == cdt ? m.detach().requires_grad_(trainable)
                                         : m.detach().to(cdt).requires_grad_(trainable));
  }
  return out;
}

GradAccumulator::GradAccumulator(const TrainConfig& cfg, const NamedTensors& master,
                                 std::vector<at::Tensor>& compute)
    : in_buffer_(effective_grad_accum(cfg) == "fp32"),
      buffer_dtype_(accum_dtype(compute_dtype(cfg.precision))),
      master_(master),
      compute_(compute),
      acc_(master.size()) {}

void GradAccumulator::after_backward(const std::vector<size_t>& params) {
  if (!in_buffer_) return;
  for (size_t i : params) {
    auto& g = compute_[i].mutable_grad();
    if (!g.defined()) continue;
    auto gb = g.to(buffer_dtype_);
    if (acc_[i].defined())
      acc_[i].add_(gb);
    else
      acc_[i] = g.scalar_type() == buffer_dtype_ ? gb.clone() : gb;
    g.reset();
  }
}

std::vector<at::Tensor> GradAccumulator::finish() {
  std::vector<at::Tensor> out(master_.size());
  for (size_t i = 0; i < out.size(); ++i) {
    auto& g = compute_[i].mutable_grad();
    const auto mdt = master_[i].scalar_type();
    if (acc_[i].defined())
      out[i] = acc_[i].to(mdt);
    else if (g.defined())
      out[i] = g.scalar_type() == mdt ? g.clone() : g.to(mdt);
    else
      out[i] = at::zeros_like(master_[i]);
    g.reset();
  }
  return out;
}

Optimizer make_optimizer(const TrainConfig& cfg, const NamedTensors& master) {
  MemoryTag tag(MemCategory::Optimizer);  // its state (AdamW's moments)
  return Optimizer(cfg.optimizer, cfg.adamw, cfg.sgd_lr, master.tensors());
}

void finish_step(const TrainConfig& cfg, int64_t step, Optimizer& optimizer, NamedTensors& master,
                 NamedTensors& buffers, std::vector<at::Tensor> grads, const at::Tensor& loss,
                 const std::vector<at::Tensor>& mb_losses, int64_t tokens,
                 std::chrono::steady_clock::time_point t0, StepObserver& observer,
                 const Ledger* ledger) {
  FamilyScope family(OpFamily::Optimizer);
  MemoryTag tag(MemCategory::Optimizer);
  const bool keep = observer.wants_tensors(step);
  std::vector<at::Tensor> grads_before_clip;
  if (keep)
    for (const auto& g : grads) grads_before_clip.push_back(g.clone());

  auto norm = total_grad_norm(grads, cfg.clip_order, cfg.param_rank, cfg.grad_norm_dtype);
  clip_grads(grads, norm, cfg.max_norm);
  if (cfg.expert_balance)
    update_expert_biases(cfg.model, buffers);
  else
    clear_expert_counts(cfg.model, buffers);
  std::vector<bool> frozen(master.size(), false);
  if (cfg.freeze_embedding && master.contains(kEmbeddingFqn))
    frozen[master.index_of(kEmbeddingFqn)] = true;
  optimizer.step(master.tensors(), grads, step, frozen);

  StepRecord rec;
  rec.step = step;
  rec.lr = optimizer.lr(step);
  rec.loss = loss;
  rec.grad_norm = norm;
  rec.mb_losses = mb_losses;
  rec.tokens = tokens;
  rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::string> buffer_names;
  std::vector<at::Tensor> persistent;
  if (keep) {
    rec.grads = &grads_before_clip;
    rec.params = &master.tensors();
    rec.ledger = ledger;
    for (const auto& b : buffer_specs(cfg.model))
      if (b.persistent) {
        buffer_names.push_back(b.fqn);
        persistent.push_back(buffers.at(b.fqn));
      }
    rec.buffer_names = &buffer_names;
    rec.buffers = &persistent;
  }
  if (memory_recording()) memory_mark("step " + std::to_string(step) + " end", false);
  observer.on_step(rec);
}

}  // namespace parity::kernels
