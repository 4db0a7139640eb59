#include "kernels/config.h"

namespace parity::kernels {

MixerKind ModelConfig::mixer(int layer) const {
  if (layer == n_layers - 1 || layer % 4 == 3) return MixerKind::MLA;
  return MixerKind::KDA;
}

FfnKind ModelConfig::ffn(int layer) const { return layer == 0 ? FfnKind::Dense : FfnKind::MoE; }

const char* to_string(MixerKind k) { return k == MixerKind::KDA ? "KDA" : "MLA"; }
const char* to_string(FfnKind k) { return k == FfnKind::Dense ? "dense" : "MoE"; }

std::vector<std::string> flavor_names() {
  return {"debugmodel", "tiny", "k3shape", "exact", "exact-wide"};
}

ModelConfig flavor(const std::string& name) {
  ModelConfig c;  // the defaults are debugmodel's
  c.name = name;
  if (name == "debugmodel") return c;
  if (name == "tiny") {
    // debugmodel's 17-layer pattern and blocks at a width a CPU test runs in milliseconds.
    c.dim = 32;
    c.n_heads = 2;
    c.q_lora = 16;
    c.kv_lora = 16;
    c.qk_nope = 8;
    c.qk_rope = 8;
    c.v_head = 8;
    c.kda_head = 16;
    c.kda_chunk = 8;
    c.dense_hidden = 64;
    c.n_experts = 4;
    c.top_k = 2;
    c.n_shared = 1;
    c.expert_hidden = 16;
    c.latent_dim = 16;
    return c;
  }
  if (name == "k3shape") {
    c.n_layers = 93;
    c.layers_per_block = 12;
    c.shape_only = true;
    return c;
  }
  if (name == "exact" || name == "exact-wide") {
    // 16 layers in blocks of 4 over a 2-channel stream; see kernels/exact.h.
    c.kind = ModelKind::Exact;
    c.n_layers = 16;
    c.layers_per_block = 4;
    c.dim = 2;
    c.n_heads = 1;
    c.vocab = 8;
    if (name == "exact-wide") c.exact_offset = int64_t{1} << 25;
    return c;
  }
  std::string known;
  for (const auto& n : flavor_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("unknown flavor '" + name + "'; known flavors: " + known);
}

}  // namespace parity::kernels
