// Model configuration and the named flavors (DESIGN.md section 4).
//
// A flavor is a plain struct: widths, the layer pattern and the block size. Everything
// else (parameter shapes, FQNs, which layers open a block) is a pure function of it.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace parity::kernels {

// Bad configuration from the user (unknown flavor, impossible width). The CLI maps it to
// exit code 2.
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

enum class MixerKind { KDA, MLA };
// BlockAttnRes: the real decoder. Exact: the integer-valued model of the closed forms
// (kernels/exact.h), with the same units, blocks and stack as the real one.
enum class ModelKind { BlockAttnRes, Exact };
enum class FfnKind { Dense, MoE };

struct ModelConfig {
  std::string name;
  ModelKind kind = ModelKind::BlockAttnRes;
  int n_layers = 17;
  int layers_per_block = 4;  // lpb: layer l opens a block when l % lpb == 0
  int dim = 256;
  int n_heads = 4;
  int vocab = 2048;
  double norm_eps = 1e-6;      // RMSNorm
  double attn_res_eps = 1e-6;  // key normalisation inside the AttnRes read

  // MLA
  int q_lora = 128;
  int kv_lora = 64;
  int qk_nope = 64;
  int qk_rope = 32;
  int v_head = 64;

  // KDA (key and value head dims are equal)
  int kda_head = 128;
  int kda_conv = 4;
  int kda_chunk = 16;  // tokens per chunk of the chunked form ([C,C,K] work per chunk)

  // FFN
  int dense_hidden = 512;  // layer 0
  int n_experts = 8;
  int top_k = 2;
  int n_shared = 2;
  int expert_hidden = 128;

  // Exact flavors: added to the initial channel-1 constant of every layer. exact-wide uses
  // 2^25, so its activations need more than fp32's 24 significand bits (fp64 only).
  int64_t exact_offset = 0;

  // True for flavors that exist only for shape work (routing tables, volume): no weights.
  bool shape_only = false;

  MixerKind mixer(int layer) const;  // (3 KDA + 1 MLA) repeated, the last layer MLA
  FfnKind ffn(int layer) const;      // layer 0 dense, the rest MoE
  bool opens_block(int layer) const { return layer % layers_per_block == 0; }
  // Number of stack entries the output aggregation reads: one per committed block.
  int n_blocks() const { return (n_layers - 1) / layers_per_block + 1; }
};

// Flavors: "debugmodel", "tiny", "k3shape", "exact", "exact-wide". Throws ConfigError naming the known ones.
ModelConfig flavor(const std::string& name);
std::vector<std::string> flavor_names();

const char* to_string(MixerKind);
const char* to_string(FfnKind);

}  // namespace parity::kernels
