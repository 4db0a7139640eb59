// A matrix file: the cells of a parity run and which cell each is compared against
// (DESIGN.md section 7). Torch-free.
//
// TOML, for example:
//
//   name = "quick"
//   report_steps = [1, 5, 10, 20]       # the drift table's columns (default 1, 10, 50, 100)
//   [defaults]                           # any cell key; a cell's own value wins
//   flavor = "tiny"
//   steps = 20
//   [[cell]]
//   name = "ref"                         # no `reference`: a reference of its own table
//   [[cell]]
//   name = "pp2vp2_cached"
//   reference = "ref"
//   trainer = "pipelined"
//   pp = 2
//   vp = 2
//   gate = "order-only"
//
// Cell keys (defaults in brackets): name, label [derived from the shape], trainer
// [reference], flavor [tiny], dtype [bf16], steps [20], microbatches [4], rows [1], seq_len
// [256], seed [42], lr [8e-4: AdamW after 2 warm-up steps], threads [1], dp [1], pp [1], vp [1], schedule [1f1b for vp 1, else
// interleaved1f1b], cache [on], split [the even split], clip_order [single], grad_accum [auto],
// reverse_microbatches [false], device [cpu | cuda], reference [none], gate [none | bitwise | order-only], nproc [0:
// in-process], backend [gloo when nproc > 0], inject [[]: fault specs, as train --inject].
//
// A cell's seed checkpoint is shared by every cell of its batch shape (flavor, seed, dp x
// microbatches x rows x seq_len): made once per matrix run, as the seed's protocol does. (Our
// initialisation depends on flavor and seed alone, so two shapes' checkpoints are equal.) A
// cell and its reference share flavor, batch shape and dtype, else nothing compares.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace parity::reports {

// A matrix file that cannot be used: names the file, the cell, the key and the remedy.
class MatrixError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a cell promises about itself against its reference at step 1.
//   bitwise     every step's loss and grad norm bits, and every gradient and parameter at
//               step 1, equal to the reference's (contract 1);
//   order-only  no WRONG verdict at step 1 (contract 2 and 4: only reduction order differs);
//   none        reported, not gated.
enum class Gate { None, Bitwise, OrderOnly };
const char* to_string(Gate g);  // "none" | "bitwise" | "order-only"

struct Cell {
  std::string name;
  std::string label;  // the drift table's row name
  std::string trainer = "reference";
  std::string flavor = "tiny";
  std::string dtype = "bf16";
  int64_t steps = 20;
  int microbatches = 4;
  int rows = 1;
  int64_t seq_len = 256;
  uint64_t seed = 42;
  double lr = 8e-4;
  int threads = 1;
  int dp = 1, pp = 1, vp = 1;
  std::string schedule;  // "" = the default for vp
  std::string cache = "on";
  std::string split;
  std::string clip_order = "single";
  std::string grad_accum = "auto";
  std::string lr_schedule = "wsd";
  bool expert_balance = true;
  int loss_chunks = 8;
  bool reverse_microbatches = false;
  std::string device = "cpu";
  std::string reference;  // "" = a reference
  Gate gate = Gate::None;
  int nproc = 0;
  std::string backend;
  std::vector<std::string> inject;

  bool pipelined() const { return trainer == "pipelined"; }
  bool multi_process() const { return nproc > 0; }
  // Cores the cell keeps busy while it runs (its processes times their threads).
  int cores() const { return (nproc > 0 ? nproc : 1) * threads; }
  // The seed checkpoint's key: cells with equal keys share one checkpoint.
  std::string batch_shape() const;
  // The `parity train` arguments of this cell (trainer, model, data, shape), without the
  // output options.
  std::vector<std::string> train_args() const;
};

struct Matrix {
  std::string name;
  std::string source;  // the file it came from ("<embedded quick>" for the built-in one)
  std::vector<int64_t> report_steps{1, 10, 50, 100};
  std::vector<Cell> cells;  // file order

  const Cell* find(const std::string& name) const;
  // The reference cells in file order, each followed by the cells compared against it.
  std::vector<std::vector<const Cell*>> tables() const;
};

// Parse and check: unknown keys, wrong types, duplicate names, a reference that does not exist
// or is itself compared against another cell, bad values (dtype, cache, trainer, gate, ...).
// `source` names the text in errors.
Matrix parse_matrix(const std::string& text, const std::string& source);
Matrix load_matrix(const std::string& path);  // MatrixError when unreadable

// The matrices shipped with parity, compiled in: "quick", "seed". Empty when unknown.
std::string embedded_matrix(const std::string& name);

}  // namespace parity::reports
