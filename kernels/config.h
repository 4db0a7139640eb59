// Model configuration and the named flavors (docs/design.md section 4).
//
// A flavor is a plain struct: widths, the layer pattern and the block size. Everything
// else (parameter shapes, FQNs, which layers open a block) is a pure function of it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "spec/bad_input.h"
#include "spec/options.h"

namespace parity::kernels {

// Bad configuration from the user (unknown flavor, impossible width). The CLI maps it to
// exit code 2.
class ConfigError : public spec::BadInput {
 public:
  using spec::BadInput::BadInput;
};

enum class MixerKind { KDA, MLA };
// BlockAttnRes: the real decoder. Exact: the integer-valued model of the closed forms
// (kernels/exact.h), with the same units, blocks and stack as the real one.
enum class ModelKind { BlockAttnRes, Exact };
enum class FfnKind { Dense, MoE };

// Every constant the forward pass depends on is named here, once. The values are torchtitan's
// kimi_k3 debugmodel (models/kimi_k3/flavors.py, kda.py, moe.py; models/common/moe.py,
// activation.py); `parity model` prints them.
struct ModelConfig {
  std::string name;
  ModelKind kind = ModelKind::BlockAttnRes;
  int n_layers = 17;
  int layers_per_block = 4;  // lpb: layer l opens a block when l % lpb == 0
  int dim = 256;
  int n_heads = 4;
  int vocab = 2048;
  // RMSNorm eps of every norm (flavors._norm), the AttnRes key normalisation included: the
  // read normalises with its norm module's eps.
  double norm_eps = 1e-5;

  // MLA
  int q_lora = 128;
  int kv_lora = 64;
  int qk_nope = 64;
  int qk_rope = 32;
  int v_head = 64;

  // KDA (key and value head dims are equal)
  int kda_head = 128;
  int kda_conv = 4;
  int kda_chunk = 16;             // tokens per chunk of the chunked form ([C,C,K] per chunk)
  double kda_l2norm_eps = 1e-6;   // q, k: x / sqrt(sum x^2 + eps) (the kernel's l2norm)
  double kda_gate_bound = -5.0;   // g = bound * sigmoid(exp(A_log) (raw + dt_bias))
  double kda_output_eps = 1e-5;   // KimiRMSNormGated

  // FFN: SiTU-GLU everywhere, (beta tanh(g/beta) sigmoid(g)) (linear_beta tanh(u/linear_beta))
  double situ_beta = 4.0;
  double situ_linear_beta = 25.0;
  int dense_hidden = 512;  // layer 0
  // Latent MoE (layers 1..): routed experts on a latent of latent_dim; shared experts (one
  // SiTU-GLU of width n_shared * expert_hidden) on the full width.
  int n_experts = 8;
  int top_k = 2;
  int n_shared = 2;
  int expert_hidden = 128;
  int latent_dim = 128;
  double route_norm_eps = 1e-20;  // weights / (sum + eps)
  double route_scale = 1.0;
  int balance_bins = 1000;        // the quantile balancer's histogram

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
  bool has_moe() const { return kind == ModelKind::BlockAttnRes && n_layers > 1; }
};

// torchtitan's debugmodel also has a vision tower (vision_encoder.*) of this many parameters;
// parity models the text model only.
constexpr int64_t kDebugmodelVisionParams = 3297792;

// The flavor spec::flavors() names; an unknown name throws spec::BadInput listing the known ones.
ModelConfig flavor(const std::string& name);
ModelConfig flavor(spec::Flavor f);

const char* to_string(MixerKind);
const char* to_string(FfnKind);

}  // namespace parity::kernels
