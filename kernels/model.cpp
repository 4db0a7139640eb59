#include "kernels/model.h"

#include <ATen/ATen.h>

#include <string>

#include "kernels/exact.h"
#include "kernels/ledger.h"
#include "kernels/mla.h"
#include "kernels/moe.h"
#include "kernels/ops.h"

namespace parity::kernels {

Model::Model(ModelConfig cfg, ModelOptions opts) : cfg_(std::move(cfg)), opts_(opts) {}

LayerState Model::embed(const NamedTensors& w, const at::Tensor& tokens) const {
  auto x = embed_tokens(tokens, w.at("tok_embeddings.weight"));
  auto stack = x.new_empty({x.size(0), x.size(1), 0, x.size(2)});
  return {x, stack};
}

namespace {

at::Tensor run_mixer(const ModelConfig& c, const ModelOptions& o, int l, const NamedTensors& w,
                     const at::Tensor& x) {
  const std::string p = "layers." + std::to_string(l) + ".attention.";
  auto W = [&](const char* name) { return w.at(p + name); };
  if (c.mixer(l) == MixerKind::MLA) {
    MlaWeights mw{W("wq_a.weight"), W("q_norm.weight"), W("wq_b.weight"), W("wkv_a.weight"),
                  W("kv_norm.weight"), W("wkv_b.weight"), W("gate.weight"), W("wo.weight")};
    MlaDims d{c.n_heads, c.q_lora, c.kv_lora, c.qk_nope, c.qk_rope, c.v_head, c.norm_eps};
    return mla(x, mw, d);
  }
  KdaWeights kw{W("q_proj.weight"), W("k_proj.weight"), W("v_proj.weight"),
                W("q_conv.weight"), W("k_conv.weight"), W("v_conv.weight"),
                W("b_proj.weight"), W("f_a.weight"),    W("f_b.weight"),
                W("A_log"),         W("dt_bias"),       W("o_norm.weight"),
                W("out_gate.weight"), W("o_proj.weight")};
  KdaDims d{c.n_heads, c.kda_head, c.kda_conv, c.kda_chunk, c.norm_eps, o.kda};
  return kda(x, kw, d);
}

at::Tensor run_ffn(const ModelConfig& c, int l, const NamedTensors& w,
                   const NamedTensors& buffers, const at::Tensor& x) {
  const std::string p = "layers." + std::to_string(l) + ".";
  if (c.ffn(l) == FfnKind::Dense)
    return swiglu(x, w.at(p + "feed_forward.w1.weight"), w.at(p + "feed_forward.w3.weight"),
                  w.at(p + "feed_forward.w2.weight"));
  MoeWeights mw;
  mw.router = w.at(p + "moe.router.weight");
  mw.w1 = w.at(p + "moe.experts.w1");
  mw.w3 = w.at(p + "moe.experts.w3");
  mw.w2 = w.at(p + "moe.experts.w2");
  if (c.n_shared > 0) {
    mw.shared_w1 = w.at(p + "moe.shared.w1.weight");
    mw.shared_w3 = w.at(p + "moe.shared.w3.weight");
    mw.shared_w2 = w.at(p + "moe.shared.w2.weight");
  }
  mw.selection_bias = buffers.at(p + "moe.selection_bias");
  return moe(x, mw, c.top_k);
}

}  // namespace

LayerState Model::layer(int l, const NamedTensors& w, const NamedTensors& buffers,
                        const LayerState& in) const {
  const std::string p = "layers." + std::to_string(l) + ".";
  if (cfg_.kind == ModelKind::Exact)
    return exact_layer(cfg_, l, w.at(p + "add.weight"), w.at(p + "read.weight"), in);
  const bool opens = cfg_.opens_block(l);
  at::Tensor prefix = in.x_BTD;
  at::Tensor x = in.x_BTD;
  at::Tensor stack = in.stack_BTND;
  if (stack.size(2) > 0)
    x = attn_res(ledger_read(stack, p + "attn", l), prefix, w.at(p + "attn_res_proj.weight"),
                 w.at(p + "attn_res_norm.weight"), cfg_.attn_res_eps, opts_.attn_res);
  if (opens)
    stack = at::cat({stack, ledger_commit(prefix, l / cfg_.layers_per_block, l).unsqueeze(2)}, 2);
  auto h = run_mixer(cfg_, opts_, l, w, rms_norm(x, w.at(p + "attention_norm.weight"),
                                                 cfg_.norm_eps));
  prefix = opens ? h : prefix + h;
  h = attn_res(ledger_read(stack, p + "ffn", l), prefix, w.at(p + "ffn_res_proj.weight"),
               w.at(p + "ffn_res_norm.weight"), cfg_.attn_res_eps, opts_.attn_res);
  h = run_ffn(cfg_, l, w, buffers, rms_norm(h, w.at(p + "ffn_norm.weight"), cfg_.norm_eps));
  return {prefix + h, stack};
}

at::Tensor Model::head_logits(const NamedTensors& w, const LayerState& in) const {
  auto h = attn_res(ledger_read(in.stack_BTND, "head", cfg_.n_layers), in.x_BTD,
                    w.at("output_res_proj.weight"), w.at("output_res_norm.weight"),
                    cfg_.attn_res_eps, opts_.attn_res);
  return project(rms_norm(h, w.at("norm.weight"), cfg_.norm_eps), w.at("output.weight"));
}

at::Tensor Model::head_loss_sum(const NamedTensors& w, const LayerState& in,
                                const at::Tensor& labels) const {
  if (cfg_.kind == ModelKind::Exact)
    return exact_head_loss_sum(in, w.at("output.weight"), labels, cfg_.n_layers);
  return cross_entropy_sum(head_logits(w, in), labels);
}

at::Tensor Model::loss_sum(const NamedTensors& w, const NamedTensors& buffers,
                           const at::Tensor& tokens, const at::Tensor& labels) const {
  auto s = embed(w, tokens);
  for (int l = 0; l < cfg_.n_layers; ++l) s = layer(l, w, buffers, s);
  return head_loss_sum(w, s, labels);
}

}  // namespace parity::kernels
