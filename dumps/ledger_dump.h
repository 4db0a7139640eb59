// The contribution ledger as dumped (kernels/ledger.h records it; DumpWriter stores it), read
// back without torch.
//
// Layout under /step_NNNNNN/ledger (only in runs with --ledger, on dumped steps):
//   index.json                uint8 [n]: the JSON text of
//     {"reads":   [{"mb","block","reader","unit","hash","row"}],   unit: the reader's layer
//                  (n_layers: the head); row: its row in contributions (-1: no gradient)
//      "commits": [{"mb","block","unit","hash","grad": true|false}],  unit: the producer
//      "hops":    [{"mb","from","to","dir": "F"|"B","tensor","hash"}],
//      "events":  [{"kind": "deposit"|"collect","mb","block","stage","count"}]}
//   mb<M>/b<B>/contributions  [R, B, T, D]: the gradient contribution of each reader of
//                             block B in micro-batch M, in index order
//   mb<M>/b<B>/grad           [B, T, D]: the block's gradient as its producer received it
// Hashes are FNV-1a of the tensor bytes, as 16 hex digits.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dumps/h5.h"

namespace parity::dumps {

struct LedgerRead {
  int mb = 0, block = 0, unit = 0;
  std::string reader;
  std::string hash;
  int row = -1;
};

struct LedgerBlock {
  int mb = 0, block = 0, unit = 0;  // unit: the producing layer
  std::string hash;                  // of the committed value
  bool has_grad = false;
  h5::Array grad;           // [B,T,D]
  h5::Array contributions;  // [R,B,T,D]
  std::vector<size_t> reads;  // indices into StepLedger::reads with a row, in row order
};

struct LedgerHop {
  int mb = 0, from = 0, to = 0;
  bool forward = true;
  std::string tensor, hash;
};

struct LedgerEvent {
  std::string kind;
  int mb = 0, block = 0, stage = 0, count = 1;
};

struct StepLedger {
  std::vector<LedgerRead> reads;
  std::map<std::pair<int, int>, LedgerBlock> blocks;  // by (mb, block)
  std::vector<LedgerHop> hops;
  std::vector<LedgerEvent> events;
};

// Whether a dump (file or directory) has a ledger for `step`.
bool has_ledger(const std::string& dump_path, int64_t step);
// The step's ledger merged over the dump's rank files. Throws DumpError when there is none.
StepLedger read_ledger(const std::string& dump_path, int64_t step);

}  // namespace parity::dumps
