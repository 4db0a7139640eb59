// Documents inside a row (docs/design.md section 10.7): where each document of a micro-batch's
// rows starts, so that the sequence mixers see one document at a time, as torchtitan's
// per-document masking computes them: MLA attends only within the query's document
// (block-causal), and KDA starts its short-convolution window and its recurrent state afresh
// at each document start.
//
// The rule follows torchtitan's dataloader, which encodes a document as BOS text EOS and
// restarts the positions at 0 on each BOS and at the start of every window: a document starts
// at a row's first token, at every BOS, and after every EOS (parity's own stream separates
// documents by EOS alone; in a BOS ... EOS stream the two coincide). Labels are untouched: a
// document's last token keeps the next document's first token as its label.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace parity::kernels {

// Which token ids delimit documents; -1: none. off: every row is one sequence (the causal
// attention over the whole row parity computed before; `--documents off`).
struct DocumentRule {
  bool on = false;
  int64_t bos = -1;
  int64_t eos = -1;
};

struct Documents {
  // Per row, the ascending start of each document; every row's list begins with 0.
  std::vector<std::vector<int64_t>> starts;
  bool whole_rows() const;  // every row one document
};

// The documents of tokens_BT (int64, any device) under `rule`.
Documents documents_of(const at::Tensor& tokens_BT, const DocumentRule& rule);

// The documents of a [B, T] micro-batch given as row-major ids (torch-free callers).
Documents documents_of(const int64_t* tokens, int64_t rows, int64_t seq_len,
                       const DocumentRule& rule);

// The documents of a [B, T] micro-batch whose per-token positions are given (row-major), as
// torchtitan's dataloader emits them: a document starts at a row's first token and wherever
// the position is 0.
Documents documents_at_positions(const int64_t* positions, int64_t rows, int64_t seq_len);

}  // namespace parity::kernels
