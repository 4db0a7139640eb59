// The contribution ledger (docs/design.md section 6): in ledger mode, what each read of the block
// stack contributed to each block's gradient, what each block's gradient came to, and
// fingerprints of what moved between stages.
//
// The model marks two places, both identities on the numbers:
//   ledger_read(stack, reader)  the stack as one reader sees it: forward records a hash of
//                               every column (which block of which micro-batch it read),
//                               backward the reader's gradient for every column;
//   ledger_commit(x, b, unit)   the value committed as a block: forward records its hash,
//                               backward the block's whole gradient (the sum over its readers
//                               that the routing delivered).
// Both are no-ops (they return their input) unless a LedgerScope is active on the thread. The
// stage protocol adds hop fingerprints and its deposits and collections. A step's ledger is
// handed to observers with the step record; compare/localise.h turns two of them into verdicts.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace parity::kernels {

uint64_t tensor_hash(const at::Tensor& t);  // FNV-1a over the contiguous bytes, on the CPU

class Ledger {
 public:
  struct Read {  // one reader's read of one block
    int mb = 0, block = 0;
    std::string reader;  // "layers.3.attn", "layers.3.ffn", "layers.3.read", "head"
    int unit = 0;        // the reader's unit (layer index, n_layers for the head)
    uint64_t hash = 0;   // of the column it read
    at::Tensor grad;     // its gradient contribution (undefined until backward ran)
  };
  struct Commit {  // one block as committed by its producer
    int mb = 0, block = 0;
    int unit = 0;  // the layer that committed it
    uint64_t hash = 0;
    at::Tensor grad;  // the block's gradient arriving at the producer
  };
  struct Hop {  // a payload tensor between stages
    int mb = 0, from = 0, to = 0;
    bool forward = true;
    std::string tensor;  // "h" (the hidden state) or "dh" (its gradient)
    uint64_t hash = 0;
  };
  struct Event {  // the stage protocol's deposits and collections (cached transport)
    std::string kind;  // "deposit" | "collect"
    int mb = 0, block = 0, stage = 0;
    int count = 1;  // collect: the deposits taken
  };

  std::vector<Read> reads;
  std::vector<Commit> commits;
  std::vector<Hop> hops;
  std::vector<Event> events;

  void clear();
};

// Makes `ledger` the active one for micro-batch `mb` on this thread, for the scope's life.
class LedgerScope {
 public:
  LedgerScope(Ledger* ledger, int mb);
  ~LedgerScope();
  LedgerScope(const LedgerScope&) = delete;
  LedgerScope& operator=(const LedgerScope&) = delete;

 private:
  Ledger* prev_;
  int prev_mb_;
};

bool ledger_active();
at::Tensor ledger_read(const at::Tensor& stack_BTND, const std::string& reader, int unit);
at::Tensor ledger_commit(const at::Tensor& x_BTD, int block, int unit);

}  // namespace parity::kernels
