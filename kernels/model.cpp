#include "kernels/model.h"

#include <ATen/ATen.h>

#include <string>

#include "kernels/exact.h"
#include "kernels/layer_checkpoint.h"
#include "kernels/ledger.h"
#include "kernels/memory_ledger.h"
#include "kernels/mla.h"
#include "kernels/moe.h"
#include "kernels/op_family.h"
#include "kernels/ops.h"
#include "kernels/precision.h"

namespace parity::kernels {

Model::Model(ModelConfig cfg, ModelOptions opts) : cfg_(std::move(cfg)), opts_(opts) {}

LayerState Model::embed(const NamedTensors& w, const at::Tensor& tokens) const {
  return embed(w, tokens, documents(tokens));
}

LayerState Model::embed(const NamedTensors& w, const at::Tensor& tokens,
                        std::shared_ptr<const Documents> docs) const {
  MemoryTag tag(MemCategory::Embedding);
  auto x = embed_tokens(tokens, w.at("tok_embeddings.weight"));
  auto stack = x.new_empty({x.size(0), x.size(1), 0, x.size(2)});
  return {x, stack, std::move(docs)};
}

namespace {
std::shared_ptr<const Documents> unless_whole_rows(Documents d) {
  if (d.whole_rows()) return nullptr;
  return std::make_shared<const Documents>(std::move(d));
}
}  // namespace

std::shared_ptr<const Documents> Model::documents(const at::Tensor& tokens_BT) const {
  if (!opts_.documents.on) return nullptr;
  return unless_whole_rows(documents_of(tokens_BT, opts_.documents));
}

std::shared_ptr<const Documents> Model::documents(const int64_t* tokens, const int64_t* positions,
                                                  int64_t rows, int64_t seq_len) const {
  if (!opts_.documents.on) return nullptr;
  return unless_whole_rows(positions ? documents_at_positions(positions, rows, seq_len)
                                     : documents_of(tokens, rows, seq_len, opts_.documents));
}

KdaWeights kda_weights(const NamedTensors& w, int layer) {
  const std::string p = "layers." + std::to_string(layer) + ".delta_attention.";
  auto W = [&](const char* name) { return w.at(p + name); };
  return {W("q_proj.weight"),      W("k_proj.weight"),     W("v_proj.weight"),
          W("q_conv.weight"),      W("k_conv.weight"),     W("v_conv.weight"),
          W("beta.weight"),        W("forget_a.weight"),   W("forget_b.weight"),
          W("A_log"),              W("dt_bias"),           W("output_norm.weight"),
          W("output_gate.weight"), W("output_proj.weight")};
}

KdaDims kda_dims(const ModelConfig& c, KdaImpl impl) {
  return {c.n_heads,        c.kda_head,       c.kda_conv, c.kda_chunk, c.kda_l2norm_eps,
          c.kda_gate_bound, c.kda_output_eps, impl};
}

namespace {

at::Tensor run_mixer(const ModelConfig& c, const ModelOptions& o, int l, const NamedTensors& w,
                     const at::Tensor& x) {
  const std::string p = "layers." + std::to_string(l) + ".";
  FamilyScope family(c.mixer(l) == MixerKind::MLA ? OpFamily::Mla : OpFamily::Kda);
  // The output projection feeds only the running sum, which a rerun takes from the first
  // forward (mixer_sum()).
  const auto out = recomputing() ? ProductValue::Unread : ProductValue::Read;
  if (c.mixer(l) == MixerKind::MLA) {
    auto W = [&](const char* name) { return w.at(p + "attention." + name); };
    MlaWeights mw{W("wq_a.weight"), W("q_norm.weight"), W("wq_b.weight"), W("wkv_a.weight"),
                  W("kv_norm.weight"), W("wkv_b.weight"), W("gate.weight"), W("wo.weight")};
    MlaDims d{c.n_heads, c.q_lora, c.kv_lora, c.qk_nope, c.qk_rope, c.v_head, c.norm_eps};
    return mla(x, mw, d, out);
  }
  return kda(x, kda_weights(w, l), kda_dims(c, o.kda), out);
}

// The mixer on each document of each row by itself: a block-causal MLA and a KDA whose
// convolution window and state start afresh at every document start, computed as what they
// are, the mixer of each document alone (every other op of a layer works per token).
at::Tensor run_mixer_by_document(const ModelConfig& c, const ModelOptions& o, int l,
                                 const NamedTensors& w, const at::Tensor& x,
                                 const Documents* docs) {
  if (docs == nullptr) return run_mixer(c, o, l, w, x);
  const int64_t T = x.size(1);
  std::vector<at::Tensor> rows;
  for (int64_t b = 0; b < x.size(0); ++b) {
    const auto row = x.narrow(0, b, 1);
    const auto& starts = docs->starts.at(static_cast<size_t>(b));
    std::vector<at::Tensor> parts;
    for (size_t i = 0; i < starts.size(); ++i) {
      const int64_t s = starts[i], e = i + 1 < starts.size() ? starts[i + 1] : T;
      parts.push_back(run_mixer(c, o, l, w, row.narrow(1, s, e - s)));
    }
    rows.push_back(parts.size() == 1 ? parts[0] : at::cat(parts, 1));
  }
  return rows.size() == 1 ? rows[0] : at::cat(rows, 0);
}

at::Tensor run_ffn(const ModelConfig& c, int l, const NamedTensors& w,
                   const NamedTensors& buffers, const at::Tensor& x, bool training) {
  const std::string p = "layers." + std::to_string(l) + ".";
  FamilyScope family(OpFamily::MoeFfn);
  if (c.ffn(l) == FfnKind::Dense)  // w2's output enters only the layer's output sum
    return glu_ffn(x, w.at(p + "feed_forward.w13.weight"), w.at(p + "feed_forward.w2.weight"),
                   c.situ_beta, c.situ_linear_beta,
                   recomputing() ? ProductValue::Unread : ProductValue::Read);
  auto W = [&](const char* name) { return w.at(p + "moe." + name); };
  MoeWeights mw;
  mw.gate = W("router.gate.weight");
  mw.w13 = W("routed_experts.w13.weight");
  mw.w2 = W("routed_experts.w2.weight");
  if (c.n_shared > 0) {
    mw.shared_w13 = W("shared_experts.w13.weight");
    mw.shared_w2 = W("shared_experts.w2.weight");
  }
  mw.routed_down = W("routed_down.weight");
  mw.routed_norm = W("routed_norm.weight");
  mw.routed_up = W("routed_up.weight");
  return moe(x, mw, moe_buffers(buffers, l), c, training);
}

// An AttnRes read: the pseudo-query is the [1, D] projection weight's one row.
at::Tensor read(const ModelConfig& c, const ModelOptions& o, const at::Tensor& stack,
                const at::Tensor& partial, const at::Tensor& proj_1D, const at::Tensor& norm_D) {
  FamilyScope family(OpFamily::AttnRes);
  MemoryTag tag(MemCategory::AttnRes);
  return attn_res(stack, partial, proj_1D.select(0, 0), norm_D, c.norm_eps, o.attn_res);
}

// A block norm (attention_norm, ffn_norm, the final norm).
at::Tensor block_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  FamilyScope family(OpFamily::Norms);
  return rms_norm(x, w, eps);
}

}  // namespace

LayerState Model::layer(int l, const NamedTensors& w, const NamedTensors& buffers,
                        const LayerState& in, bool training) const {
  MemoryWhere where({l, -1, -1, -1});
  const bool recording = memory_recording();
  if (recording && in.x_BTD.requires_grad() && at::GradMode::is_enabled())
    // Fires when the input's gradient is complete: the layer's backward is done.
    in.x_BTD.register_hook([l](const at::Tensor&) {
      MemoryWhere here({l, -1, -1, -1});
      memory_mark("backward layer " + std::to_string(l), false);
    });
  LayerState out;
  // The last layer is not checkpointed: only the head runs between its forward and its
  // backward (in the reference, and on the pipeline's last stage in both schedules, whose
  // forward of the last stage is followed by that micro-batch's backward), so a rerun would
  // rebuild at once what its forward had just dropped, and the peak is the same either way.
  const bool last = l == cfg_.n_layers - 1;
  if (opts_.checkpoint_layers && !last && training && at::GradMode::is_enabled() &&
      !recomputing()) {
    if (ledger_active())
      throw ConfigError("the contribution ledger taps each stack read once; --ac layer would "
                        "run every read twice (forward and recompute): drop --ac layer or "
                        "--ledger");
    // The body holds copies of the buffer handles: a trainer's buffers outlive the backward,
    // a caller's temporary NamedTensors need not.
    out = checkpointed_layer(
        [this, l, buffers, training](const NamedTensors& weights, const LayerState& s) {
          return layer_body(l, weights, buffers, s, training);
        },
        w, "layers." + std::to_string(l) + ".", in, l);
  } else {
    out = layer_body(l, w, buffers, in, training);
  }
  if (recording) {
    memory_retag(out.x_BTD, MemCategory::Partial);
    memory_mark("forward layer " + std::to_string(l), true);
  }
  return out;
}

LayerState Model::layer_body(int l, const NamedTensors& w, const NamedTensors& buffers,
                             const LayerState& in, bool training) const {
  const std::string p = "layers." + std::to_string(l) + ".";
  if (cfg_.kind == ModelKind::Exact)
    return exact_layer(cfg_, l, w.at(p + "add.weight"), w.at(p + "read.weight"), in);
  const bool opens = cfg_.opens_block(l);
  at::Tensor prefix = in.x_BTD;
  at::Tensor x = in.x_BTD;
  at::Tensor stack = in.stack_BTND;
  if (stack.size(2) > 0)
    x = read(cfg_, opts_, ledger_read(stack, p + "attn", l), prefix,
             w.at(p + "attention_res_proj.weight"), w.at(p + "attention_res_norm.weight"));
  if (opens) {
    MemoryTag tag(MemCategory::Stack);
    stack = at::cat({stack, ledger_commit(prefix, l / cfg_.layers_per_block, l).unsqueeze(2)}, 2);
  }
  at::Tensor h;
  {
    MemoryTag tag(MemCategory::Mixer);
    h = run_mixer_by_document(cfg_, opts_, l, w,
                              block_norm(x, w.at(p + "attention_norm.weight"), cfg_.norm_eps),
                              in.docs.get());
  }
  {
    MemoryTag tag(MemCategory::Partial);
    prefix = mixer_sum(opens ? h : prefix + h);
  }
  if (opens) memory_retag(prefix, MemCategory::Partial);  // the mixer's output is the sum now
  h = read(cfg_, opts_, ledger_read(stack, p + "ffn", l), prefix, w.at(p + "ffn_res_proj.weight"),
           w.at(p + "ffn_res_norm.weight"));
  {
    MemoryTag tag(MemCategory::Ffn);
    h = run_ffn(cfg_, l, w, buffers, block_norm(h, w.at(p + "ffn_norm.weight"), cfg_.norm_eps),
                training);
  }
  MemoryTag tag(MemCategory::Partial);
  return {prefix + h, stack, in.docs};
}

at::Tensor Model::head_hidden(const NamedTensors& w, const LayerState& in) const {
  auto h = read(cfg_, opts_, ledger_read(in.stack_BTND, "head", cfg_.n_layers), in.x_BTD,
                w.at("output_res_proj.weight"), w.at("output_res_norm.weight"));
  return block_norm(h, w.at("norm.weight"), cfg_.norm_eps);
}

at::Tensor Model::head_logits(const NamedTensors& w, const LayerState& in) const {
  return project(head_hidden(w, in), w.at("lm_head.weight"));
}

HeadLoss Model::head_loss(const NamedTensors& w, const LayerState& in, const at::Tensor& labels,
                          double n_global, bool training) const {
  FamilyScope family(OpFamily::HeadLoss);
  MemoryTag tag(MemCategory::Head);
  HeadLoss out;
  if (cfg_.kind == ModelKind::Exact) {
    auto l = exact_head_loss_sum(in, w.at("output.weight"), labels, cfg_.n_layers) / n_global;
    out.loss_ = l.detach();
    if (training) out.chunk_losses_.push_back(l);
    return out;
  }
  auto hidden = head_hidden(w, in);  // [B,T,D]
  const int64_t T = hidden.size(1), C = opts_.loss_chunks;
  if (C < 1 || T % C != 0)
    throw ConfigError("the chunked loss splits each micro-batch's sequence of " +
                      std::to_string(T) + " tokens (--seq-len) into " + std::to_string(C) +
                      " equal chunks; give a --seq-len that --loss-chunks divides, or "
                      "--loss-chunks 1");
  const auto& head = w.at("lm_head.weight");
  const int64_t len = T / C;
  auto total = at::zeros({}, hidden.options().dtype(accum_dtype(hidden.scalar_type())));
  for (int64_t c = 0; c < C; ++c) {
    // Chunk c is the tokens [c len, (c+1) len) of every row, [B, len, D], a fresh leaf.
    auto chunk = hidden.narrow(1, c * len, len).contiguous().detach();
    if (training) chunk.requires_grad_(true);
    auto l = cross_entropy_sum(project(chunk, head), labels.narrow(1, c * len, len)) / n_global;
    total = total + l.detach();
    if (training) {
      out.leaves_.push_back(chunk);
      out.chunk_losses_.push_back(l);
    }
  }
  out.loss_ = total;
  if (training) out.hidden_ = hidden;
  return out;
}

void HeadLoss::backward() {
  if (leaves_.empty()) {  // the exact flavors' one loss
    for (auto& l : chunk_losses_) l.backward();
    chunk_losses_.clear();
    return;
  }
  const auto acc = loss_.scalar_type();
  std::vector<at::Tensor> grads;
  for (size_t c = 0; c < chunk_losses_.size(); ++c) {
    chunk_losses_[c].backward();
    grads.push_back(leaves_[c].grad().to(acc));
  }
  // The chunks' gradients in place along the sequence, in acc, then cast once.
  auto g = at::cat(grads, 1).to(hidden_.scalar_type());
  chunk_losses_.clear();
  leaves_.clear();
  hidden_.backward(g);
  hidden_ = at::Tensor();
}

HeadLoss Model::loss(const NamedTensors& w, const NamedTensors& buffers, const at::Tensor& tokens,
                     const at::Tensor& labels, double n_global, bool training) const {
  return loss(w, buffers, tokens, labels, n_global, training, documents(tokens));
}

HeadLoss Model::loss(const NamedTensors& w, const NamedTensors& buffers, const at::Tensor& tokens,
                     const at::Tensor& labels, double n_global, bool training,
                     std::shared_ptr<const Documents> docs) const {
  auto s = embed(w, tokens, std::move(docs));
  for (int l = 0; l < cfg_.n_layers; ++l) s = layer(l, w, buffers, s, training);
  return head_loss(w, s, labels, n_global, training);
}

}  // namespace parity::kernels
