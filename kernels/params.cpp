#include "kernels/params.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <stdexcept>

#include "kernels/exact.h"

namespace parity::kernels {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int64_t total_numel(const std::vector<ParamSpec>& specs) {
  int64_t n = 0;
  for (const auto& s : specs) n += s.numel();
  return n;
}

namespace {

struct SpecList {
  std::vector<ParamSpec>& out;
  int unit;
  void add(std::string fqn, std::vector<int64_t> shape, Init init, double std = 0.0) {
    out.push_back(ParamSpec{std::move(fqn), std::move(shape), init, std, unit});
  }
};

void mla_specs(const ModelConfig& c, const std::string& p, SpecList& s) {
  const int64_t D = c.dim, H = c.n_heads;
  s.add(p + "attention.wq_a.weight", {c.q_lora, D}, Init::Normal, 0.02);
  s.add(p + "attention.q_norm.weight", {c.q_lora}, Init::Ones);
  s.add(p + "attention.wq_b.weight", {H * (c.qk_nope + c.qk_rope), c.q_lora}, Init::Normal, 0.02);
  s.add(p + "attention.wkv_a.weight", {c.kv_lora + c.qk_rope, D}, Init::Normal, 0.02);
  s.add(p + "attention.kv_norm.weight", {c.kv_lora}, Init::Ones);
  s.add(p + "attention.wkv_b.weight", {H * (c.qk_nope + c.v_head), c.kv_lora}, Init::Normal, 0.02);
  s.add(p + "attention.gate.weight", {H * c.v_head, D}, Init::Normal, 0.02);
  s.add(p + "attention.wo.weight", {D, H * c.v_head}, Init::Normal, 0.02);
}

void kda_specs(const ModelConfig& c, const std::string& p, SpecList& s) {
  const int64_t D = c.dim, H = c.n_heads, K = c.kda_head;
  s.add(p + "attention.q_proj.weight", {H * K, D}, Init::Normal, 0.02);
  s.add(p + "attention.k_proj.weight", {H * K, D}, Init::Normal, 0.02);
  s.add(p + "attention.v_proj.weight", {H * K, D}, Init::Normal, 0.02);
  const double conv_bound = 1.0 / std::sqrt(static_cast<double>(c.kda_conv));
  s.add(p + "attention.q_conv.weight", {H * K, c.kda_conv}, Init::Uniform, conv_bound);
  s.add(p + "attention.k_conv.weight", {H * K, c.kda_conv}, Init::Uniform, conv_bound);
  s.add(p + "attention.v_conv.weight", {H * K, c.kda_conv}, Init::Uniform, conv_bound);
  s.add(p + "attention.b_proj.weight", {H, D}, Init::Normal, 0.02);
  s.add(p + "attention.f_a.weight", {K, D}, Init::Normal, 0.02);
  s.add(p + "attention.f_b.weight", {H * K, K}, Init::Normal, 0.02);
  s.add(p + "attention.A_log", {H}, Init::ALogRange);
  s.add(p + "attention.dt_bias", {H * K}, Init::Zeros);
  s.add(p + "attention.o_norm.weight", {K}, Init::Ones);
  s.add(p + "attention.out_gate.weight", {H * K, D}, Init::Normal, 0.02);
  s.add(p + "attention.o_proj.weight", {D, H * K}, Init::Normal, 0.02);
}

void ffn_specs(const ModelConfig& c, int l, const std::string& p, SpecList& s) {
  const int64_t D = c.dim;
  if (c.ffn(l) == FfnKind::Dense) {
    s.add(p + "feed_forward.w1.weight", {c.dense_hidden, D}, Init::Normal, 0.02);
    s.add(p + "feed_forward.w3.weight", {c.dense_hidden, D}, Init::Normal, 0.02);
    s.add(p + "feed_forward.w2.weight", {D, c.dense_hidden}, Init::Normal, 0.02);
    return;
  }
  const int64_t E = c.n_experts, He = c.expert_hidden, Hs = c.n_shared * c.expert_hidden;
  s.add(p + "moe.router.weight", {E, D}, Init::Normal, 0.02);
  s.add(p + "moe.experts.w1", {E, He, D}, Init::Normal, 0.02);
  s.add(p + "moe.experts.w3", {E, He, D}, Init::Normal, 0.02);
  s.add(p + "moe.experts.w2", {E, D, He}, Init::Normal, 0.02);
  if (Hs > 0) {
    s.add(p + "moe.shared.w1.weight", {Hs, D}, Init::Normal, 0.02);
    s.add(p + "moe.shared.w3.weight", {Hs, D}, Init::Normal, 0.02);
    s.add(p + "moe.shared.w2.weight", {D, Hs}, Init::Normal, 0.02);
  }
}

uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

std::vector<ParamSpec> param_specs(const ModelConfig& c) {
  if (c.kind == ModelKind::Exact) return exact_param_specs(c);
  std::vector<ParamSpec> out;
  const int64_t D = c.dim;
  SpecList s{out, -1};
  s.add("tok_embeddings.weight", {c.vocab, D}, Init::Normal, 1.0);
  for (int l = 0; l < c.n_layers; ++l) {
    s.unit = l;
    const std::string p = "layers." + std::to_string(l) + ".";
    if (l > 0) {  // layer 0 reads no stack before its mixer (the stack is still empty)
      s.add(p + "attn_res_proj.weight", {D}, Init::Zeros);
      s.add(p + "attn_res_norm.weight", {D}, Init::Ones);
    }
    s.add(p + "attention_norm.weight", {D}, Init::Ones);
    if (c.mixer(l) == MixerKind::MLA)
      mla_specs(c, p, s);
    else
      kda_specs(c, p, s);
    s.add(p + "ffn_res_proj.weight", {D}, Init::Zeros);
    s.add(p + "ffn_res_norm.weight", {D}, Init::Ones);
    s.add(p + "ffn_norm.weight", {D}, Init::Ones);
    ffn_specs(c, l, p, s);
  }
  s.unit = c.n_layers;
  s.add("output_res_proj.weight", {D}, Init::Zeros);
  s.add("output_res_norm.weight", {D}, Init::Ones);
  s.add("norm.weight", {D}, Init::Ones);
  s.add("output.weight", {c.vocab, D}, Init::Normal, 1.0 / std::sqrt(static_cast<double>(D)));
  return out;
}

std::vector<ParamSpec> buffer_specs(const ModelConfig& c) {
  std::vector<ParamSpec> out;
  if (c.kind == ModelKind::Exact) return out;
  for (int l = 0; l < c.n_layers; ++l)
    if (c.ffn(l) == FfnKind::MoE)
      out.push_back(ParamSpec{"layers." + std::to_string(l) + ".moe.selection_bias",
                              {c.n_experts}, Init::Zeros, 0.0, l});
  return out;
}

NamedTensors::NamedTensors(std::vector<std::string> names, std::vector<at::Tensor> tensors)
    : names_(std::move(names)), tensors_(std::move(tensors)) {
  if (names_.size() != tensors_.size())
    throw std::invalid_argument("NamedTensors: names and tensors differ in length");
  for (size_t i = 0; i < names_.size(); ++i) index_.emplace(names_[i], i);
}

size_t NamedTensors::index_of(const std::string& fqn) const {
  auto it = index_.find(fqn);
  if (it == index_.end()) throw std::out_of_range("no tensor named '" + fqn + "'");
  return it->second;
}

const at::Tensor& NamedTensors::at(const std::string& fqn) const { return tensors_[index_of(fqn)]; }

static at::Tensor init_one(const ParamSpec& s, uint64_t seed) {
  auto opts = at::TensorOptions().dtype(at::kFloat);
  auto gen = at::detail::createCPUGenerator(fnv1a(s.fqn, 1469598103934665603ULL ^ seed));
  switch (s.init) {
    case Init::Ones: return at::ones(s.shape, opts);
    case Init::Zeros: return at::zeros(s.shape, opts);
    case Init::Normal: return at::empty(s.shape, opts).normal_(0.0, s.std, gen);
    case Init::Uniform: return at::empty(s.shape, opts).uniform_(-s.std, s.std, gen);
    case Init::ALogRange: return at::empty(s.shape, opts).uniform_(1.0, 16.0, gen).log_();
    case Init::Exact: break;  // init_params fills these from exact_init
  }
  return {};
}

NamedTensors init_params(const ModelConfig& cfg, uint64_t seed) {
  if (cfg.shape_only)
    throw ConfigError("flavor '" + cfg.name +
                      "' is shape-only (routing tables and volume); it has no weights. "
                      "Use debugmodel or tiny to train");
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
  for (const auto& s : param_specs(cfg)) {
    names.push_back(s.fqn);
    tensors.push_back(s.init == Init::Exact ? exact_init(cfg, s) : init_one(s, seed));
  }
  return NamedTensors(std::move(names), std::move(tensors));
}

NamedTensors init_buffers(const ModelConfig& cfg) {
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
  for (const auto& s : buffer_specs(cfg)) {
    names.push_back(s.fqn);
    tensors.push_back(init_one(s, 0));
  }
  return NamedTensors(std::move(names), std::move(tensors));
}

}  // namespace parity::kernels
