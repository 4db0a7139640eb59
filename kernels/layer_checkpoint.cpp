#include "kernels/layer_checkpoint.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <ATen/ATen.h>

#include "kernels/memory_ledger.h"

namespace parity::kernels {

namespace {

thread_local int t_recomputing = 0;

struct RecomputeScope {
  RecomputeScope() { ++t_recomputing; }
  ~RecomputeScope() { --t_recomputing; }
};

// What mixer_sum() does on this thread: nothing (no checkpointed body runs), keep the sum
// (a first forward) or write the kept one (a rerun). A body runs mixer_sum() exactly once.
struct MixerSumSlot {
  enum class Mode { None, Keep, Write } mode = Mode::None;
  at::Tensor* sum = nullptr;
  bool used = false;
};
thread_local MixerSumSlot t_mixer_sum;

class MixerSumScope {
 public:
  MixerSumScope(MixerSumSlot::Mode mode, at::Tensor* sum, int layer)
      : saved_(t_mixer_sum), layer_(layer) {
    t_mixer_sum = {mode, sum, false};
  }
  // After the body: it ran mixer_sum() once (a layer without a mixer, the exact flavors',
  // keeps nothing and needs nothing).
  void done() const {
    const auto& slot = t_mixer_sum;
    if (slot.mode == MixerSumSlot::Mode::Write && !slot.used && slot.sum->defined())
      throw std::logic_error("layer " + std::to_string(layer_) +
                             ": the rerun did not take the kept mixer sum");
  }
  ~MixerSumScope() { t_mixer_sum = saved_; }
  MixerSumScope(const MixerSumScope&) = delete;
  MixerSumScope& operator=(const MixerSumScope&) = delete;

 private:
  MixerSumSlot saved_;
  int layer_;
};

using torch::autograd::variable_list;

// The backward node of a checkpointed layer. Its next edges are, in order: the running sum,
// the stack, then the layer's weights (own_, by index into the weights). Its outputs: the
// layer's running sum, then (when it carries a gradient) its stack. It holds the running sum
// after the mixer that the first forward kept (mixer_sum()).
class LayerRecompute final : public torch::autograd::Node {
 public:
  LayerRecompute(LayerBody body, NamedTensors w, std::vector<size_t> own, LayerState in,
                 at::Tensor mixer_sum, int layer)
      : body_(std::move(body)), w_(std::move(w)), own_(std::move(own)), in_(std::move(in)),
        mixer_sum_(std::move(mixer_sum)), layer_(layer) {}

  std::string name() const override { return "LayerRecompute"; }

  void release_variables() override {
    body_ = nullptr;
    w_ = NamedTensors();
    in_ = LayerState();
    mixer_sum_ = at::Tensor();
  }

  variable_list apply(variable_list&& grads) override {
    if (!body_)
      throw std::logic_error("layer " + std::to_string(layer_) +
                             ": a checkpointed layer's backward ran twice (retain_graph is not "
                             "supported under --ac layer)");
    at::AutoGradMode grad_on(true);
    RecomputeScope recompute;
    MemoryWhere where({layer_, -1, -1, -1});
    // Fresh leaves over the same storage: the rerun's graph ends at them.
    auto leaf = [](const at::Tensor& t) {
      return t.defined() ? t.detach().requires_grad_(t.requires_grad()) : t;
    };
    LayerState in{leaf(in_.x_BTD), leaf(in_.stack_BTND), in_.docs};
    NamedTensors w = w_;  // handles only: the names are shared
    for (size_t i : own_) w[i] = leaf(w_[i]);
    LayerState out;
    {
      MixerSumScope kept(MixerSumSlot::Mode::Write, &mixer_sum_, layer_);
      out = body_(w, in);
      kept.done();
    }

    std::vector<at::Tensor> outs, gouts;
    if (grads.at(0).defined() && out.x_BTD.requires_grad()) {
      outs.push_back(out.x_BTD);
      gouts.push_back(grads[0]);
    }
    if (grads.size() > 1 && grads[1].defined() && out.stack_BTND.requires_grad()) {
      outs.push_back(out.stack_BTND);
      gouts.push_back(grads[1]);
    }
    // The inputs that take a gradient, and their slots among the next edges.
    std::vector<at::Tensor> inputs;
    std::vector<size_t> slots;
    auto want = [&](const at::Tensor& t, size_t slot) {
      if (t.defined() && t.requires_grad()) {
        inputs.push_back(t);
        slots.push_back(slot);
      }
    };
    want(in.x_BTD, 0);
    want(in.stack_BTND, 1);
    for (size_t k = 0; k < own_.size(); ++k) want(w[own_[k]], 2 + k);

    variable_list result(num_outputs());
    if (!outs.empty() && !inputs.empty()) {
      auto g = torch::autograd::grad(outs, inputs, gouts, /*retain_graph=*/false,
                                     /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t k = 0; k < g.size(); ++k) result[slots[k]] = std::move(g[k]);
    }
    release_variables();
    return result;
  }

 private:
  LayerBody body_;
  NamedTensors w_;
  std::vector<size_t> own_;
  LayerState in_;
  at::Tensor mixer_sum_;
  int layer_;
};

}  // namespace

bool recomputing() { return t_recomputing > 0; }

at::Tensor mixer_sum(const at::Tensor& sum) {
  auto& slot = t_mixer_sum;
  if (slot.mode == MixerSumSlot::Mode::None) return sum;
  if (slot.used) throw std::logic_error("mixer_sum: a layer's body passed two sums");
  slot.used = true;
  if (slot.mode == MixerSumSlot::Mode::Keep) {
    *slot.sum = sum;
    return sum;
  }
  const at::Tensor& kept = *slot.sum;
  if (!kept.defined() || kept.sizes() != sum.sizes() || kept.scalar_type() != sum.scalar_type())
    throw std::logic_error("mixer_sum: the rerun's sum is not the shape and dtype of the kept one");
  // Through variable_data() (a handle on sum's storage with its own version counter, as `.data`
  // is): no autograd record and no version bump, which a view made by a custom Function (the
  // projection's output) may not take. Nothing has saved sum yet: its node reads no values.
  sum.variable_data().copy_(kept);
  return sum;
}

LayerState checkpointed_layer(LayerBody body, const NamedTensors& w, const std::string& prefix,
                              const LayerState& in, int layer) {
  std::vector<size_t> own;
  for (size_t i = 0; i < w.size(); ++i)
    if (w.names()[i].compare(0, prefix.size(), prefix) == 0) own.push_back(i);

  LayerState out;
  at::Tensor kept;
  {
    at::NoGradGuard no_grad;
    MixerSumScope keep(MixerSumSlot::Mode::Keep, &kept, layer);
    out = body(w, in);
  }
  bool any = in.x_BTD.requires_grad() || in.stack_BTND.requires_grad();
  for (size_t i : own) any = any || w[i].requires_grad();
  if (!any) return out;

  // The outputs are fresh tensors over the rerun-free forward's storage; a stack the layer
  // passed through unchanged is the input's storage under a new handle.
  at::Tensor x = out.x_BTD.detach();
  at::Tensor stack = out.stack_BTND.detach();
  const bool opened = out.stack_BTND.size(2) > in.stack_BTND.size(2);
  const bool stack_grad = in.stack_BTND.requires_grad() || (opened && in.x_BTD.requires_grad());

  std::vector<at::Tensor> edges{in.x_BTD, in.stack_BTND};
  for (size_t i : own) edges.push_back(w[i]);
  auto node = std::shared_ptr<LayerRecompute>(
      new LayerRecompute(std::move(body), w, own, in, std::move(kept), layer),
      torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(edges));
  torch::autograd::set_history(x, node);
  if (stack_grad) torch::autograd::set_history(stack, node);
  return {x, stack, out.docs};
}

}  // namespace parity::kernels
