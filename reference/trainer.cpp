#include "reference/trainer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "kernels/config.h"
#include "kernels/memory_ledger.h"
#include "kernels/op_family.h"
#include "kernels/threads.h"

namespace parity::reference {

namespace {

// The end of a side's handle on a compute copy: it keeps each gradient the engine delivers,
// in delivery order, where a leaf would have accumulated them (and so copied the first).
class KeepDeliveries final : public torch::autograd::Node {
 public:
  explicit KeepDeliveries(std::shared_ptr<std::vector<at::Tensor>> list)
      : list_(std::move(list)) {}
  std::string name() const override { return "KeepDeliveries"; }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (grads.at(0).defined()) list_->push_back(std::move(grads[0]));
    return {};
  }

 private:
  std::shared_ptr<std::vector<at::Tensor>> list_;
};

}  // namespace

using kernels::NamedTensors;
using kernels::Precision;

ReferenceTrainer::ReferenceTrainer(TrainConfig cfg, const NamedTensors& init,
                                   const datasets::TokenRows& data)
    : cfg_(std::move(cfg)),
      model_(cfg_.model, cfg_.model_options),
      data_(data),
      master_(kernels::make_masters(cfg_, init)),
      buffers_(kernels::make_buffers(cfg_)),
      optimizer_(kernels::make_optimizer(cfg_, master_)) {}

kernels::RunInfo ReferenceTrainer::run_info() const {
  return kernels::make_run_info(cfg_, "reference", data_.seq_len(), master_.names());
}

void ReferenceTrainer::run(kernels::StepObserver& observer) {
  kernels::prepare_run(cfg_);
  observer.on_start(run_info());
  for (int64_t s = 1; s <= cfg_.steps; ++s) step(s, observer);
  observer.on_end();
}

void ReferenceTrainer::apply_grad_faults(std::vector<at::Tensor>& grads) const {
  const auto& names = master_.names();
  auto index = [&](const std::string& fqn) {
    const auto it = std::find(names.begin(), names.end(), fqn);
    if (it == names.end()) throw std::invalid_argument("no parameter " + fqn);
    return static_cast<size_t>(it - names.begin());
  };
  if (faults_.scale != 1)
    for (auto& g : grads) g.mul_(faults_.scale);
  for (const auto& fqn : faults_.zero) grads[index(fqn)].zero_();
  for (const auto& [a, b] : faults_.swap) {
    auto t = grads[index(a)].clone();
    grads[index(a)].copy_(grads[index(b)]);
    grads[index(b)].copy_(t);
  }
}

ReferenceTrainer::MicroBatch ReferenceTrainer::microbatch(int64_t s, int r, int m) const {
  const int64_t T = data_.seq_len();
  const datasets::BatchShape shape{cfg_.dp, cfg_.microbatches, cfg_.rows};
  std::vector<int64_t> inputs, labels, positions;
  auto rows =
      datasets::microbatch_rows(shape, data_.num_rows(), s, r, m, cfg_.reverse_microbatches);
  datasets::fill_microbatch(data_, rows, inputs, labels, &positions);
  const auto opts = torch::TensorOptions().dtype(torch::kLong);
  const auto device = torch::Device(cfg_.device);
  return {torch::from_blob(inputs.data(), {cfg_.rows, T}, opts).to(device, false, true),
          torch::from_blob(labels.data(), {cfg_.rows, T}, opts).to(device, false, true),
          model_.documents(inputs.data(), positions.empty() ? nullptr : positions.data(),
                           cfg_.rows, T)};
}

std::vector<at::Tensor> ReferenceTrainer::forward_only(int64_t s) {
  torch::NoGradGuard no_grad;
  auto compute = kernels::make_compute_copies(cfg_, master_);
  const NamedTensors weights = master_.with(compute);
  const int64_t n_global =
      static_cast<int64_t>(cfg_.dp) * cfg_.microbatches * cfg_.rows * data_.seq_len();
  std::vector<at::Tensor> losses;
  for (int r = 0; r < cfg_.dp; ++r)
    for (int m = 0; m < cfg_.microbatches; ++m) {
      const auto mb = microbatch(s, r, m);
      losses.push_back(model_
                           .loss(weights, buffers_, mb.tokens, mb.labels,
                                 static_cast<double>(n_global), false, mb.docs)
                           .loss());
    }
  return losses;
}

int side_by_side_lanes(const TrainConfig& cfg) {
  if (cfg.threads <= 1 || cfg.microbatches <= 1 || !at::Device(cfg.device).is_cpu()) return 1;
  return std::min(cfg.threads, cfg.microbatches);
}

int ReferenceTrainer::lanes_for(int64_t s) const {
  // The ledgers and faults record per micro-batch, and the op-family clock (bench
  // --breakdown) follows one thread.
  const bool per_microbatch_records = cfg_.ledger_on(s) || kernels::memory_recording() ||
                                      !faults_.empty() || kernels::family_clock_running();
  return per_microbatch_records ? 1 : side_by_side_lanes(cfg_);
}

ReferenceTrainer::Lanes ReferenceTrainer::make_lanes(int n, const std::vector<at::Tensor>& compute) {
  std::vector<bool> counter(buffers_.size(), false);
  for (const auto& spec : kernels::buffer_specs(cfg_.model))
    for (size_t i = 0; i < buffers_.size(); ++i)
      if (buffers_.names()[i] == spec.fqn) counter[i] = !spec.persistent;
  Lanes lanes;
  for (int i = 0; i < n; ++i) {
    std::vector<at::Tensor> leaves;
    Deliveries delivered;
    leaves.reserve(compute.size());
    for (const auto& c : compute) {
      delivered.push_back(std::make_shared<std::vector<at::Tensor>>());
      leaves.push_back(c.detach());
      if (!c.requires_grad()) continue;
      auto node = std::shared_ptr<KeepDeliveries>(new KeepDeliveries(delivered.back()),
                                                  torch::autograd::deleteNode);
      torch::autograd::set_history(leaves.back(), node);
    }
    lanes.weights.push_back(master_.with(std::move(leaves)));
    lanes.delivered.push_back(std::move(delivered));
    std::vector<at::Tensor> bufs;
    for (size_t b = 0; b < buffers_.size(); ++b)
      bufs.push_back(counter[b] ? at::zeros_like(buffers_[b]) : buffers_[b]);
    lanes.buffers.push_back(buffers_.with(std::move(bufs)));
  }
  lanes.counter = std::move(counter);
  return lanes;
}

void ReferenceTrainer::run_side_by_side(Lanes& lanes, int64_t s, int r, int m0, int n,
                                        int64_t n_global, std::vector<at::Tensor>& compute,
                                        const std::vector<size_t>& all,
                                        kernels::GradAccumulator& acc,
                                        std::vector<at::Tensor>& replica_losses) {
  std::vector<MicroBatch> mbs;
  for (int i = 0; i < n; ++i) mbs.push_back(microbatch(s, r, m0 + i));
  std::vector<at::Tensor> losses(static_cast<size_t>(n));
  {
    const kernels::MemoryTagsKept tags;
    kernels::run_lanes(n, [&](int i) {
      const auto& mb = mbs[static_cast<size_t>(i)];
      auto l = model_.loss(lanes.weights[static_cast<size_t>(i)],
                           lanes.buffers[static_cast<size_t>(i)], mb.tokens, mb.labels,
                           static_cast<double>(n_global), true, mb.docs);
      l.backward();
      losses[static_cast<size_t>(i)] = l.loss();
    });
  }
  // What the engine's gradient accumulation would have done with each delivery: the first
  // taken (dense, in the parameter's layout), each later one added in place. The accumulator's
  // fp32 buffer then takes them as always.
  for (int i = 0; i < n; ++i) {
    for (size_t p = 0; p < compute.size(); ++p) {
      auto& list = *lanes.delivered[static_cast<size_t>(i)][p];
      auto& into = compute[p].mutable_grad();
      for (auto& g : list) {
        if (into.defined())
          into.add_(g);
        else if (g.is_contiguous() && g.sizes() == compute[p].sizes())
          into = std::move(g);
        else
          into = g.contiguous().clone();
      }
      list.clear();
    }
    replica_losses.push_back(losses[static_cast<size_t>(i)]);
    acc.after_backward(all);
  }
}

void ReferenceTrainer::add_lane_counts(Lanes& lanes) {
  for (size_t b = 0; b < buffers_.size(); ++b)
    if (lanes.counter[b])
      for (const auto& lane : lanes.buffers) buffers_[b].add_(lane[b]);
}

void ReferenceTrainer::step(int64_t s, kernels::StepObserver& observer) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t P = master_.size();
  std::vector<size_t> all(P);
  for (size_t i = 0; i < P; ++i) all[i] = i;

  if (kernels::memory_recording()) kernels::memory_mark("step " + std::to_string(s) + " start", true);
  auto compute = kernels::make_compute_copies(cfg_, master_);
  const NamedTensors weights = master_.with(compute);

  const int64_t n_global =
      static_cast<int64_t>(cfg_.dp) * cfg_.microbatches * cfg_.rows * data_.seq_len();

  ledger_.clear();
  std::vector<at::Tensor> grads;      // summed over dp replicas, rank order
  std::vector<at::Tensor> mb_losses;  // execution order over all replicas
  at::Tensor loss;
  const int lanes = lanes_for(s);
  std::optional<Lanes> side;
  if (lanes > 1) side.emplace(make_lanes(lanes, compute));
  for (int r = 0; r < cfg_.dp; ++r) {
    kernels::GradAccumulator acc(cfg_, master_, compute);
    std::vector<at::Tensor> replica_losses;
    for (int m = 0; m < cfg_.microbatches; ++m) {
      if (side) {
        const int n = std::min(lanes, cfg_.microbatches - m);
        run_side_by_side(*side, s, r, m, n, n_global, compute, all, acc, replica_losses);
        m += n - 1;
        continue;
      }
      const auto mb = microbatch(s, r, m);
      std::optional<kernels::LedgerScope> scope;
      if (cfg_.ledger_on(s)) scope.emplace(&ledger_, r * cfg_.microbatches + m);
      kernels::MemoryWhere where({-1, r * cfg_.microbatches + m, -1, -1});
      auto l_m = model_.loss(weights, buffers_, mb.tokens, mb.labels,
                             static_cast<double>(n_global), true, mb.docs);
      if (kernels::memory_recording()) kernels::memory_mark("forward mb " + std::to_string(m), true);
      const int data_m = cfg_.reverse_microbatches ? cfg_.microbatches - 1 - m : m;
      {
        kernels::MemoryTag tag(kernels::MemCategory::Grads);
        if (!faults_.drops(r * cfg_.microbatches + data_m)) l_m.backward();
        replica_losses.push_back(l_m.loss());
        acc.after_backward(all);
      }
      if (kernels::memory_recording())
        kernels::memory_mark("backward mb " + std::to_string(m), false);
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
  if (side) add_lane_counts(*side);
  if (!faults_.empty()) apply_grad_faults(grads);
  kernels::memory_mark("gradients ready", false);
  kernels::finish_step(cfg_, s, optimizer_, master_, buffers_, std::move(grads), loss, mb_losses, n_global,
                       t0, observer, cfg_.ledger_on(s) ? &ledger_ : nullptr);
}

}  // namespace parity::reference
