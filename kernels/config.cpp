#include "kernels/config.h"

#include "spec/options.h"

namespace parity::kernels {

MixerKind ModelConfig::mixer(int layer) const {
  if (layer == n_layers - 1 || layer % 4 == 3) return MixerKind::MLA;
  return MixerKind::KDA;
}

FfnKind ModelConfig::ffn(int layer) const { return layer == 0 ? FfnKind::Dense : FfnKind::MoE; }

const char* to_string(MixerKind k) { return k == MixerKind::KDA ? "KDA" : "MLA"; }
const char* to_string(FfnKind k) { return k == FfnKind::Dense ? "dense" : "MoE"; }

ModelConfig flavor(const std::string& name) { return flavor(spec::flavors().parse(name)); }

ModelConfig flavor(spec::Flavor f) {
  ModelConfig c;  // the defaults are debugmodel's
  c.name = spec::to_string(f);
  if (f == spec::Flavor::Debugmodel) return c;
  if (f == spec::Flavor::Tiny) {
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
  if (f == spec::Flavor::K3shape) {
    c.n_layers = 93;
    c.layers_per_block = 12;
    c.shape_only = true;
    return c;
  }
  if (f == spec::Flavor::Exact || f == spec::Flavor::ExactWide) {
    // 16 layers in blocks of 4 over a 2-channel stream; see kernels/exact.h.
    c.kind = ModelKind::Exact;
    c.n_layers = 16;
    c.layers_per_block = 4;
    c.dim = 2;
    c.n_heads = 1;
    c.vocab = 8;
    if (f == spec::Flavor::ExactWide) c.exact_offset = int64_t{1} << 25;
    return c;
  }
  throw ConfigError("flavor '" + c.name + "' has no configuration");  // a table entry added alone
}

}  // namespace parity::kernels
