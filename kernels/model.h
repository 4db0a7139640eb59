// The Block-AttnRes decoder (DESIGN.md section 4), as functions of named weights.
//
// The model owns no tensors: every call takes the weights (compute copies, by FQN) and the
// buffers. This lets both trainers (and a pipeline stage holding a few units) drive the same
// code. The units are the embedding, each layer and the head.
//
// Layer l (opens = l % lpb == 0):
//   prefix = x
//   if stack has entries: x = attn_res(stack, prefix, attn_res_proj, attn_res_norm)
//   if opens: stack = cat(stack, prefix)
//   h = mixer(attention_norm(x))                  KDA or MLA
//   prefix = h if opens else prefix + h
//   h = attn_res(stack, prefix, ffn_res_proj, ffn_res_norm)
//   h = ffn(ffn_norm(h))                          dense SwiGLU (layer 0) or MoE
//   return prefix + h, stack
// Head: attn_res(stack, x, output_res_proj, output_res_norm) -> norm -> output (LM head).
// The exact flavors (kernels/exact.h) swap the layer and head for integer-valued ones.
#pragma once

#include <ATen/core/Tensor.h>

#include "kernels/attn_res.h"
#include "kernels/config.h"
#include "kernels/kda.h"
#include "kernels/params.h"

namespace parity::kernels {

struct ModelOptions {
  AttnResImpl attn_res = AttnResImpl::Recompute;
  KdaImpl kda = KdaImpl::Chunked;
};

struct LayerState {
  at::Tensor x_BTD;       // the running sum of the current block after the layer
  at::Tensor stack_BTND;  // the committed blocks, N >= 0
};

class Model {
 public:
  explicit Model(ModelConfig cfg, ModelOptions opts = {});

  const ModelConfig& config() const { return cfg_; }
  const ModelOptions& options() const { return opts_; }

  // tokens_BT (int64) -> the embedding output x_BTD and an empty stack [B,T,0,D].
  LayerState embed(const NamedTensors& w, const at::Tensor& tokens_BT) const;

  // One transformer layer.
  LayerState layer(int l, const NamedTensors& w, const NamedTensors& buffers,
                   const LayerState& in) const;

  // Output aggregation, final norm and LM head: logits_BTV in the stream dtype.
  at::Tensor head_logits(const NamedTensors& w, const LayerState& in) const;

  // The head and the loss: the sum over the micro-batch's tokens of the cross-entropy (the
  // exact flavors: their linear loss), a scalar in the accumulation dtype.
  at::Tensor head_loss_sum(const NamedTensors& w, const LayerState& in,
                           const at::Tensor& labels_BT) const;

  // The whole forward: embed, every layer, head_loss_sum.
  at::Tensor loss_sum(const NamedTensors& w, const NamedTensors& buffers,
                      const at::Tensor& tokens_BT, const at::Tensor& labels_BT) const;

 private:
  ModelConfig cfg_;
  ModelOptions opts_;
};

}  // namespace parity::kernels
