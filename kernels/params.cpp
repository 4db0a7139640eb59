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
  // flavors._LINEAR_INIT: trunc_normal_(std=0.02) with torch's absolute bounds [-2, 2].
  void linear(std::string fqn, std::vector<int64_t> shape) {
    add(std::move(fqn), std::move(shape), Init::TruncNormal, 0.02);
  }
  void norm(std::string fqn, int64_t d) { add(std::move(fqn), {d}, Init::Ones); }
};

// KimiMLAAttention: registration order wq_a, q_norm, wq_b, wkv_a, kv_norm, wkv_b, gate, wo.
void mla_specs(const ModelConfig& c, const std::string& p, SpecList& s) {
  const int64_t D = c.dim, H = c.n_heads;
  s.linear(p + "attention.wq_a.weight", {c.q_lora, D});
  s.norm(p + "attention.q_norm.weight", c.q_lora);
  s.linear(p + "attention.wq_b.weight", {H * (c.qk_nope + c.qk_rope), c.q_lora});
  s.linear(p + "attention.wkv_a.weight", {c.kv_lora + c.qk_rope, D});
  s.norm(p + "attention.kv_norm.weight", c.kv_lora);
  s.linear(p + "attention.wkv_b.weight", {H * (c.qk_nope + c.v_head), c.kv_lora});
  s.linear(p + "attention.gate.weight", {H * c.v_head, D});
  s.linear(p + "attention.wo.weight", {D, H * c.v_head});
}

// KDA: its own A_log and dt_bias first, then the children in registration order.
void kda_specs(const ModelConfig& c, const std::string& p, SpecList& s) {
  const int64_t D = c.dim, H = c.n_heads, K = c.kda_head, C = H * K;
  const std::string a = p + "delta_attention.";
  s.add(a + "A_log", {H}, Init::ALogRange);
  s.add(a + "dt_bias", {H, K}, Init::Zeros);
  for (const char* n : {"q_proj", "k_proj", "v_proj"}) s.linear(a + n + ".weight", {C, D});
  for (const char* n : {"q_conv", "k_conv", "v_conv"})  // depthwise Conv1d: [C, 1, W]
    s.linear(a + n + ".weight", {C, 1, c.kda_conv});
  s.linear(a + "forget_a.weight", {K, D});
  s.linear(a + "forget_b.weight", {C, K});
  s.linear(a + "beta.weight", {H, D});
  s.linear(a + "output_gate.weight", {C, D});
  s.norm(a + "output_norm.weight", K);
  s.linear(a + "output_proj.weight", {D, C});
}

// FeedForward (layer 0) or KimiLatentMoE. w13 stacks the gate (w1) and up (w3) projections
// ([2, hidden, in]; routed experts [E, 2, F, latent]); each half draws on its own.
void ffn_specs(const ModelConfig& c, int l, const std::string& p, SpecList& s) {
  const int64_t D = c.dim;
  if (c.ffn(l) == FfnKind::Dense) {
    s.linear(p + "feed_forward.w13.weight", {2, c.dense_hidden, D});
    s.linear(p + "feed_forward.w2.weight", {D, c.dense_hidden});
    return;
  }
  const int64_t E = c.n_experts, F = c.expert_hidden, L = c.latent_dim;
  const int64_t Hs = c.n_shared * c.expert_hidden;
  s.linear(p + "moe.routed_experts.w13.weight", {E, 2, F, L});
  s.linear(p + "moe.routed_experts.w2.weight", {E, L, F});
  s.linear(p + "moe.router.gate.weight", {E, D});
  if (Hs > 0) {
    s.linear(p + "moe.shared_experts.w13.weight", {2, Hs, D});
    s.linear(p + "moe.shared_experts.w2.weight", {D, Hs});
  }
  s.linear(p + "moe.routed_down.weight", {L, D});
  s.norm(p + "moe.routed_norm.weight", L);
  s.linear(p + "moe.routed_up.weight", {D, L});
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
  // KimiK3TransformerBlock: attention | delta_attention, feed_forward | moe, attention_norm,
  // ffn_norm, [attention_res_norm, attention_res_proj], ffn_res_norm, ffn_res_proj.
  for (int l = 0; l < c.n_layers; ++l) {
    s.unit = l;
    const std::string p = "layers." + std::to_string(l) + ".";
    if (c.mixer(l) == MixerKind::MLA)
      mla_specs(c, p, s);
    else
      kda_specs(c, p, s);
    ffn_specs(c, l, p, s);
    s.norm(p + "attention_norm.weight", D);
    s.norm(p + "ffn_norm.weight", D);
    if (l > 0) {  // layer 0 reads no stack before its mixer (the stack is still empty)
      s.norm(p + "attention_res_norm.weight", D);
      s.linear(p + "attention_res_proj.weight", {1, D});
    }
    s.norm(p + "ffn_res_norm.weight", D);
    s.linear(p + "ffn_res_proj.weight", {1, D});
  }
  // Decoder: norm, lm_head; KimiK3Model then output_res_norm, output_res_proj.
  s.unit = c.n_layers;
  s.norm("norm.weight", D);
  const double head_std = 1.0 / std::sqrt(static_cast<double>(D));
  out.push_back(ParamSpec{"lm_head.weight", {c.vocab, D}, Init::TruncNormal, head_std, c.n_layers,
                          -3 * head_std, 3 * head_std});
  s.norm("output_res_norm.weight", D);
  s.linear("output_res_proj.weight", {1, D});
  return out;
}

std::vector<BufferSpec> buffer_specs(const ModelConfig& c) {
  std::vector<BufferSpec> out;
  if (!c.has_moe()) return out;
  for (int l = 0; l < c.n_layers; ++l)
    if (c.ffn(l) == FfnKind::MoE) {
      const std::string p = "layers." + std::to_string(l) + ".moe.";
      out.push_back({p + "expert_bias_E", {c.n_experts}, at::kFloat, true, l});
      out.push_back({p + "router.tokens_per_expert_E", {c.n_experts}, at::kFloat, false, l});
      out.push_back({p + "router.quantile_balancer.required_bias_histogram_EB",
                     {c.n_experts, c.balance_bins}, at::kInt, false, l});
    }
  return out;
}

std::vector<ModuleEntry> module_entries(const ModelConfig& c) {
  const auto buffers = buffer_specs(c);
  auto entry = [](const BufferSpec& b) {
    return ModuleEntry{b.fqn, b.shape,
                       b.persistent ? ModuleEntry::Buffer : ModuleEntry::NonPersistentBuffer,
                       b.dtype};
  };
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  std::vector<ModuleEntry> out;
  for (const auto& p : param_specs(c)) {
    const std::string prefix = p.fqn.substr(0, p.fqn.find(".moe.") + 5);
    const bool leads_moe = ends_with(p.fqn, ".moe.routed_experts.w13.weight");
    const bool router_end = ends_with(p.fqn, ".moe.router.gate.weight");
    if (leads_moe)
      for (const auto& b : buffers)
        if (b.fqn == prefix + "expert_bias_E") out.push_back(entry(b));
    out.push_back({p.fqn, p.shape, ModuleEntry::Parameter, at::kFloat});
    if (router_end)
      for (const auto& b : buffers)
        if (b.fqn.rfind(prefix + "router.", 0) == 0) out.push_back(entry(b));
  }
  return out;
}

NamedTensors::NamedTensors(std::vector<std::string> names, std::vector<at::Tensor> tensors)
    : tensors_(std::move(tensors)) {
  if (names.size() != tensors_.size())
    throw std::invalid_argument("NamedTensors: names and tensors differ in length");
  if (names.empty()) return;
  auto shared = std::make_shared<Names>();
  shared->list = std::move(names);
  for (size_t i = 0; i < shared->list.size(); ++i) shared->index.emplace(shared->list[i], i);
  names_ = std::move(shared);
}

NamedTensors NamedTensors::with(std::vector<at::Tensor> tensors) const {
  if (tensors.size() != tensors_.size())
    throw std::invalid_argument("NamedTensors::with: " + std::to_string(tensors.size()) +
                                " tensors for " + std::to_string(tensors_.size()) + " names");
  NamedTensors out;
  out.names_ = names_;
  out.tensors_ = std::move(tensors);
  return out;
}

const std::vector<std::string>& NamedTensors::names() const {
  static const std::vector<std::string> kNone;
  return names_ ? names_->list : kNone;
}

bool NamedTensors::contains(const std::string& fqn) const {
  return names_ && names_->index.count(fqn) != 0;
}

size_t NamedTensors::index_of(const std::string& fqn) const {
  if (names_) {
    auto it = names_->index.find(fqn);
    if (it != names_->index.end()) return it->second;
  }
  throw std::out_of_range("no tensor named '" + fqn + "'");
}

const at::Tensor& NamedTensors::at(const std::string& fqn) const { return tensors_[index_of(fqn)]; }

namespace {

bool is_pseudo_query(const std::string& fqn) {
  const std::string tail = "res_proj.weight";
  return fqn.size() >= tail.size() && fqn.compare(fqn.size() - tail.size(), tail.size(), tail) == 0;
}

// torch.nn.init.trunc_normal_: u ~ U(2 Phi(a) - 1, 2 Phi(b) - 1), x = erfinv(u) std sqrt(2),
// clamped to [a, b] (a, b standardised by std).
at::Tensor trunc_normal(const ParamSpec& s, at::Generator& gen) {
  auto phi = [](double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); };
  const double l = phi(s.lo / s.std), u = phi(s.hi / s.std);
  auto t = at::empty(s.shape, at::TensorOptions().dtype(at::kFloat));
  t.uniform_(2 * l - 1, 2 * u - 1, gen).erfinv_().mul_(s.std * std::sqrt(2.0));
  return t.clamp_(s.lo, s.hi);
}

at::Tensor init_one(const ParamSpec& s, uint64_t seed, const InitOptions& opts) {
  auto fopts = at::TensorOptions().dtype(at::kFloat);
  auto gen = at::detail::createCPUGenerator(fnv1a(s.fqn, 1469598103934665603ULL ^ seed));
  if (opts.zero_pseudo_queries && is_pseudo_query(s.fqn)) return at::zeros(s.shape, fopts);
  switch (s.init) {
    case Init::Ones: return at::ones(s.shape, fopts);
    case Init::Zeros: return at::zeros(s.shape, fopts);
    case Init::Normal: return at::empty(s.shape, fopts).normal_(0.0, s.std, gen);
    case Init::TruncNormal:
      // A stacked w13 is one draw of its whole shape (torchtitan draws its gate and up halves
      // one after the other, from the same law).
      return trunc_normal(s, gen);
    case Init::ALogRange: return at::empty(s.shape, fopts).uniform_(1.0, 16.0, gen).log_();
    case Init::Exact: break;  // init_params fills these from exact_init
  }
  return {};
}

}  // namespace

NamedTensors init_params(const ModelConfig& cfg, uint64_t seed, const InitOptions& opts) {
  if (cfg.shape_only)
    throw ConfigError("flavor '" + cfg.name +
                      "' is shape-only (routing tables and volume); it has no weights. "
                      "Use debugmodel or tiny to train");
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
  for (const auto& s : param_specs(cfg)) {
    names.push_back(s.fqn);
    tensors.push_back(s.init == Init::Exact ? exact_init(cfg, s) : init_one(s, seed, opts));
  }
  return NamedTensors(std::move(names), std::move(tensors));
}

NamedTensors init_buffers(const ModelConfig& cfg, const NamedTensors& state) {
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
  size_t taken = 0;
  for (const auto& s : buffer_specs(cfg)) {
    names.push_back(s.fqn);
    auto t = at::zeros(s.shape, at::TensorOptions().dtype(s.dtype));
    if (s.persistent && state.contains(s.fqn)) {
      const auto& v = state.at(s.fqn);
      if (v.sizes().vec() != s.shape)
        throw std::invalid_argument("buffer " + s.fqn + " has another shape than " + cfg.name +
                                    "'s");
      t.copy_(v);
      ++taken;
    }
    tensors.push_back(t);
  }
  if (taken != state.size())
    throw std::invalid_argument("init_buffers: " + std::to_string(state.size() - taken) +
                                " given buffer(s) are not persistent buffers of " + cfg.name);
  return NamedTensors(std::move(names), std::move(tensors));
}

}  // namespace parity::kernels
