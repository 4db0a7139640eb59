// Parameter specifications, FQNs and deterministic initialisation.
//
// FQN order is the order of `param_specs`: the embedding, then layers 0..L-1 in order (each
// layer's own parameters in a fixed order), then the output aggregation, the final norm and
// the LM head. It is the "single-device order" of the total gradient norm and the order of
// every per-parameter loop in both trainers.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/config.h"

namespace parity::kernels {

enum class Init {
  Normal,     // N(0, std^2)
  Ones,       // norm weights
  Zeros,      // AttnRes pseudo-queries (uniform mix at step 0), dt_bias
  Uniform,    // U(-std, std): depthwise conv taps
  ALogRange,  // log(U(1, 16)): KDA decay rates
  Exact,      // the exact flavors' fixed small integers (kernels/exact.h), in fp64
};

// The pipeline's units: the embedding, each layer, the head. unit = -1 for the embedding,
// the layer index for a layer, n_layers for the head (output aggregation, norm, LM head).
struct ParamSpec {
  std::string fqn;
  std::vector<int64_t> shape;
  Init init = Init::Normal;
  double std = 0.02;
  int unit = 0;
  int64_t numel() const;
};

std::vector<ParamSpec> param_specs(const ModelConfig& cfg);

// Non-trainable buffers (the MoE selection bias); initialised to zero.
std::vector<ParamSpec> buffer_specs(const ModelConfig& cfg);

// A list of named tensors in FQN order, with lookup by name.
class NamedTensors {
 public:
  NamedTensors() = default;
  NamedTensors(std::vector<std::string> names, std::vector<at::Tensor> tensors);

  size_t size() const { return names_.size(); }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<at::Tensor>& tensors() const { return tensors_; }
  std::vector<at::Tensor>& tensors() { return tensors_; }
  const at::Tensor& operator[](size_t i) const { return tensors_[i]; }
  at::Tensor& operator[](size_t i) { return tensors_[i]; }
  bool contains(const std::string& fqn) const { return index_.count(fqn) != 0; }
  // Throws std::out_of_range naming the FQN.
  const at::Tensor& at(const std::string& fqn) const;
  size_t index_of(const std::string& fqn) const;

 private:
  std::vector<std::string> names_;
  std::vector<at::Tensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

// Deterministic fp32 initialisation on the CPU (fp64 for the exact flavors). Each tensor draws from its own generator
// seeded by (seed, fqn), so a tensor's values do not depend on which others exist.
NamedTensors init_params(const ModelConfig& cfg, uint64_t seed);
NamedTensors init_buffers(const ModelConfig& cfg);

int64_t total_numel(const std::vector<ParamSpec>& specs);

}  // namespace parity::kernels
