// The Block-AttnRes decoder: torchtitan's kimi_k3 text model (docs/design.md sections 4 and 10),
// as functions of named weights.
//
// The model owns no tensors: every call takes the weights (compute copies, by FQN) and the
// buffers. This lets both trainers (and a pipeline stage holding a few units) drive the same
// code. The units are the embedding, each layer and the head.
//
// Layer l (opens = l % lpb == 0), KimiK3TransformerBlock.forward:
//   prefix = x
//   if stack has entries: x = attn_res(stack, prefix, attention_res_proj, attention_res_norm)
//   if opens: stack = cat(stack, prefix)
//   h = mixer(attention_norm(x))                  KDA (delta_attention) or MLA (attention)
//   prefix = h if opens else prefix + h
//   h = attn_res(stack, prefix, ffn_res_proj, ffn_res_norm)
//   h = ffn(ffn_norm(h))                          SiTU-GLU FFN (layer 0) or the latent MoE
//   return prefix + h, stack
// Head: attn_res(stack, x, output_res_proj, output_res_norm) -> norm -> lm_head, the loss in
// chunks of the tokens (ChunkedLossWrapper; HeadLoss below).
// The exact flavors (kernels/exact.h) swap the layer and head for integer-valued ones.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "kernels/attn_res.h"
#include "kernels/documents.h"
#include "kernels/config.h"
#include "kernels/kda.h"
#include "kernels/params.h"

namespace parity::kernels {

struct ModelOptions {
  AttnResImpl attn_res = AttnResImpl::Fused;
  KdaImpl kda = KdaImpl::Fused;
  int loss_chunks = 8;  // ChunkedLossWrapper's num_chunks; 1: the plain loss
  DocumentRule documents = {};  // off: each row is one sequence
  // Activation checkpointing, one region per layer (kernels/layer_checkpoint.h): a training
  // forward keeps each layer's inputs only and the backward recomputes the layer.
  bool checkpoint_layers = false;
};

struct LayerState {
  at::Tensor x_BTD;       // the running sum of the current block after the layer
  at::Tensor stack_BTND;  // the committed blocks, N >= 0
  // Where the micro-batch's documents start (null: each row one sequence); the mixers run
  // each document on its own.
  std::shared_ptr<const Documents> docs;
};

// One micro-batch's loss through the head, as torchtitan's ChunkedLossWrapper computes it: the
// normed hidden states [B, T, D] split along the sequence into `chunks` equal [B, T/chunks, D]
// pieces (the same token range of every row), each a detached leaf; per chunk lm_head, the summed cross-entropy (in acc) / n_global, added onto an acc zero in
// chunk order. backward() runs each chunk's backward in order (lm_head's gradient accumulates
// over the chunks in its own dtype), assembles the hidden gradient in acc, casts it to the
// hidden's dtype and back-propagates it through the decoder once. With one chunk this is the
// plain loss. (The exact flavors: their linear loss / n_global, one backward.)
class HeadLoss {
 public:
  const at::Tensor& loss() const { return loss_; }  // detached, acc dtype
  void backward();

 private:
  friend class Model;
  at::Tensor loss_, hidden_;
  std::vector<at::Tensor> leaves_, chunk_losses_;
};

// Layer `layer`'s KDA weights by their FQNs, and the flavor's KDA dimensions.
KdaWeights kda_weights(const NamedTensors& w, int layer);
KdaDims kda_dims(const ModelConfig& c, KdaImpl impl);

class Model {
 public:
  explicit Model(ModelConfig cfg, ModelOptions opts = {});

  const ModelConfig& config() const { return cfg_; }
  const ModelOptions& options() const { return opts_; }

  // tokens_BT (int64) -> the embedding output x_BTD, an empty stack [B,T,0,D] and the
  // documents of the rows (documents()).
  LayerState embed(const NamedTensors& w, const at::Tensor& tokens_BT) const;

  // The documents of tokens_BT under the options' rule; null when the rule is off or every row
  // holds one document.
  std::shared_ptr<const Documents> documents(const at::Tensor& tokens_BT) const;
  // The same for a [rows, seq_len] micro-batch on the host (row-major ids), which the trainers
  // compute once per micro-batch: from `positions` when given (a document starts where the
  // position is 0; documents_at_positions), else from the tokens under the rule. null when the
  // rule is off or every row holds one document.
  std::shared_ptr<const Documents> documents(const int64_t* tokens, const int64_t* positions,
                                             int64_t rows, int64_t seq_len) const;
  // embed with the micro-batch's documents given (documents() above).
  LayerState embed(const NamedTensors& w, const at::Tensor& tokens_BT,
                   std::shared_ptr<const Documents> docs) const;

  // One transformer layer. training: the router's balancer observes (kernels/moe.h) and its
  // buffers accumulate; a forward-only pass selects without it.
  LayerState layer(int l, const NamedTensors& w, const NamedTensors& buffers,
                   const LayerState& in, bool training = true) const;

  // Output aggregation and final norm: the hidden states the LM head reads, [B,T,D].
  at::Tensor head_hidden(const NamedTensors& w, const LayerState& in) const;

  // head_hidden, then lm_head: logits_BTV in the stream dtype (unchunked).
  at::Tensor head_logits(const NamedTensors& w, const LayerState& in) const;

  // The micro-batch's loss l_m = (sum of its token losses) / n_global, chunked (HeadLoss).
  // Throws ConfigError when T is not a multiple of the chunk count. training: keep what
  // backward() needs.
  HeadLoss head_loss(const NamedTensors& w, const LayerState& in, const at::Tensor& labels_BT,
                     double n_global, bool training) const;

  // The whole forward: embed, every layer, head_loss.
  HeadLoss loss(const NamedTensors& w, const NamedTensors& buffers, const at::Tensor& tokens_BT,
                const at::Tensor& labels_BT, double n_global, bool training) const;
  // The same with the micro-batch's documents given.
  HeadLoss loss(const NamedTensors& w, const NamedTensors& buffers, const at::Tensor& tokens_BT,
                const at::Tensor& labels_BT, double n_global, bool training,
                std::shared_ptr<const Documents> docs) const;

 private:
  LayerState layer_body(int l, const NamedTensors& w, const NamedTensors& buffers,
                        const LayerState& in, bool training) const;

  ModelConfig cfg_;
  ModelOptions opts_;
};

}  // namespace parity::kernels
