// A matrix file: the cells of a parity run and which cell each is compared against
// (docs/design.md section 7). Torch-free.
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
// Cell keys: name, label [derived from the shape], reference [none: a reference], twin [none:
// a cell of the same run to equal bit for bit; needs gate = "bitwise"], gate [none | bitwise |
// order-only], nproc [0: in-process], backend [gloo when nproc > 0], and the RunSpec's
// fields under their names (spec/run_spec.h; defaults as there, but flavor [tiny] and dtype
// [bf16]): trainer, flavor, dtype, steps, microbatches, rows, seq_len, seed, lr, warmup,
// lr_schedule, threads, dp, pp, vp, schedule, cache, split, clip_order, grad_norm_dtype,
// grad_accum, attn_res, kda, documents, bos_id, eos_id, expert_balance, pseudo_query_init, loss_chunks, max_norm,
// reverse_microbatches, freeze_embedding, device, inject [[]: fault specs, as train --inject].
//
// A cell's seed checkpoint is shared by every cell of its batch shape (flavor, seed, dp x
// microbatches x rows x seq_len): made once per matrix run, as the seed's protocol does. (Our
// initialisation depends on flavor and seed alone, so two shapes' checkpoints are equal.) A
// cell and its reference share flavor, batch shape and dtype, else nothing compares.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "spec/bad_input.h"
#include "spec/run_spec.h"

namespace parity::reports {

// A matrix file that cannot be used: names the file, the cell, the key and the remedy.
class MatrixError : public spec::BadInput {
 public:
  using spec::BadInput::BadInput;
};

// What a cell promises about itself against its reference at step 1.
//   bitwise     every step's loss and grad norm bits, and every gradient and parameter at
//               step 1, equal to the reference's (contract 1);
//   order-only  no WRONG verdict at step 1 (contract 2 and 4: only reduction order differs);
//   none        reported, not gated.
enum class Gate { None, Bitwise, OrderOnly };
const spec::Choices<Gate>& gates();  // the `gate` key: none, bitwise, order-only
const char* to_string(Gate g);

// A cell: a name, a label, a reference and a gate, and the run it is (a RunSpec, with how many
// processes carry it out). A matrix's runs default to the seed's tables: the tiny flavor in
// bf16; every other field has the RunSpec's default.
struct Cell : spec::RunSpec {
  Cell() {
    flavor = spec::Flavor::Tiny;
    dtype = spec::Precision::BF16;
  }

  std::string name;
  std::string label;  // the drift table's row name
  std::string reference;  // "" = a reference
  // "" = none; else the cell this one must equal bit for bit: the same RunSpec carried out
  // another way (other processes, another backend). Its gate (bitwise) holds it against the
  // twin; its reference still places it in the drift tables.
  std::string twin;
  Gate gate = Gate::None;
  int nproc = 0;
  std::optional<spec::Backend> backend;  // none: gloo when nproc > 0

  bool multi_process() const { return nproc > 0; }
  // The cell the gate holds this one against: its twin when it has one, else its reference.
  const std::string& gate_target() const { return twin.empty() ? reference : twin; }
  // Cores the cell keeps busy while it runs (its processes times their threads).
  int cores() const { return (nproc > 0 ? nproc : 1) * threads; }
  // The seed checkpoint's key: cells with equal keys share one checkpoint.
  std::string batch_shape() const;
  // The `parity train` arguments of this cell: its RunSpec's (spec::to_args) and its
  // processes', without the output options.
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
