// Parameter specifications, FQNs and deterministic initialisation.
//
// FQN order is the order of `param_specs`: the embedding, then layers 0..L-1 in order (each
// layer's own parameters in a fixed order), then the final norm, the LM head and the output
// aggregation's norm and pseudo-query (torchtitan's registration order). It is the "single-device order" of the total gradient norm and the order of
// every per-parameter loop in both trainers.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/config.h"

namespace parity::kernels {

// How a tensor is initialised (torchtitan's kimi_k3 flavors.py param_init, drawn in fp32).
enum class Init {
  Normal,       // N(0, std^2)
  TruncNormal,  // N(0, std^2) truncated to [lo, hi] (torch's trunc_normal_ algorithm)
  Ones,         // norm weights
  Zeros,        // dt_bias; the pseudo-queries with --pseudo-query-init zero
  ALogRange,    // log(U(1, 16)): KDA decay rates
  Exact,        // the exact flavors' fixed small integers (kernels/exact.h), in fp64
};

// The pipeline's units: the embedding, each layer, the head. unit = -1 for the embedding,
// the layer index for a layer, n_layers for the head (output aggregation, norm, LM head).
struct ParamSpec {
  std::string fqn;
  std::vector<int64_t> shape;
  Init init = Init::Normal;
  double std = 0.02;
  int unit = 0;
  double lo = -2.0, hi = 2.0;  // TruncNormal's bounds (absolute, torch's defaults)
  int64_t numel() const;
};

// Parameter FQNs, shapes and order are those of torchtitan's text state dict
// (named_parameters(): a module's own tensors before its children's, children in registration
// order; docs/design.md section 10). The vision tower is not modelled.
std::vector<ParamSpec> param_specs(const ModelConfig& cfg);

// Buffers: per MoE layer the expert bias (fp32, persistent: in the state dict and the dumps),
// and the router's token counts (fp32) and the quantile balancer's histogram (int32
// [E, bins]), both non-persistent. All start at zero.
struct BufferSpec {
  std::string fqn;
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  bool persistent = true;
  int unit = 0;
};
std::vector<BufferSpec> buffer_specs(const ModelConfig& cfg);

// Every tensor of the model in module order, as torchtitan's module tree emits them
// (named_parameters() interleaved with named_buffers()): a MoE layer's expert bias leads its
// moe module, the router's two non-persistent buffers follow router.gate.weight. What
// `parity model` prints.
struct ModuleEntry {
  enum Kind { Parameter, Buffer, NonPersistentBuffer };
  std::string fqn;
  std::vector<int64_t> shape;
  Kind kind = Parameter;
  at::ScalarType dtype = at::kFloat;  // buffers' own dtype (parameters: the run's)
};
std::vector<ModuleEntry> module_entries(const ModelConfig& cfg);

// What the initialisation may vary beyond the seed: the PR era's pseudo-queries draw from
// trunc_normal(0.02); later flavors start them at zero (a uniform mix at step 0).
struct InitOptions {
  bool zero_pseudo_queries = false;
};

// A list of named tensors in FQN order, with lookup by name. The names and their index are
// fixed at construction and shared by every copy, so a copy costs one handle per tensor (the
// model and the checkpointed layers copy the weights' list per layer and micro-batch).
class NamedTensors {
 public:
  NamedTensors() = default;
  NamedTensors(std::vector<std::string> names, std::vector<at::Tensor> tensors);
  // These names (shared, not copied) over other tensors, one per name.
  NamedTensors with(std::vector<at::Tensor> tensors) const;

  size_t size() const { return tensors_.size(); }
  const std::vector<std::string>& names() const;
  const std::vector<at::Tensor>& tensors() const { return tensors_; }
  std::vector<at::Tensor>& tensors() { return tensors_; }
  const at::Tensor& operator[](size_t i) const { return tensors_[i]; }
  at::Tensor& operator[](size_t i) { return tensors_[i]; }
  bool contains(const std::string& fqn) const;
  // Throws std::out_of_range naming the FQN.
  const at::Tensor& at(const std::string& fqn) const;
  size_t index_of(const std::string& fqn) const;

 private:
  struct Names {
    std::vector<std::string> list;
    std::unordered_map<std::string, size_t> index;
  };
  std::shared_ptr<const Names> names_;  // null when empty
  std::vector<at::Tensor> tensors_;
};

// Deterministic fp32 initialisation on the CPU (fp64 for the exact flavors). Each tensor draws
// from its own generator seeded by (seed, fqn), so a tensor's values do not depend on which
// others exist.
NamedTensors init_params(const ModelConfig& cfg, uint64_t seed, const InitOptions& opts = {});
// Every buffer in its own dtype: zero, but for the persistent ones `state` holds (a
// checkpoint's expert biases, by FQN), which are copied in. A name in `state` that is not a
// persistent buffer of cfg, or of another shape, throws std::invalid_argument.
NamedTensors init_buffers(const ModelConfig& cfg, const NamedTensors& state = {});

int64_t total_numel(const std::vector<ParamSpec>& specs);

}  // namespace parity::kernels
