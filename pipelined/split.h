// Splitting the model's units over pipeline stages (docs/design.md section 5).
//
// Units: the embedding, each layer, the head (output aggregation + final norm + LM head),
// coded as -1, 0..L-1 and L. A split lists, per stage, its units in order; every unit appears
// exactly once, contiguously and in order; the embedding is on stage 0 and the head on the last.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "spec/bad_input.h"

namespace parity::pipelined {

class SplitError : public spec::BadInput {
 public:
  using spec::BadInput::BadInput;
};

constexpr int kEmbUnit = -1;

class Split {
 public:
  Split() = default;
  Split(int n_layers, std::vector<std::vector<int>> stages);  // validates; throws SplitError

  int n_layers() const { return n_layers_; }
  int num_stages() const { return static_cast<int>(stages_.size()); }
  int head_unit() const { return n_layers_; }
  const std::vector<int>& units(int stage) const { return stages_.at(stage); }
  int stage_of_unit(int unit) const;
  bool has_layers(int stage) const;
  bool has_head(int stage) const;
  bool has_emb(int stage) const;
  std::vector<int> layers(int stage) const;  // the stage's layer indices in order

  // "emb,0-1|2-4|5-6|7,head": the explicit-split syntax that parse_split reads back.
  std::string spec() const;
  static std::string units_text(const std::vector<int>& units, int n_layers);

 private:
  int n_layers_ = 0;
  std::vector<std::vector<int>> stages_;
};

// torchtitan's even split over num_stages stages: the embedding and the head weigh one layer
// each; with E = L + 2 effective units, every stage gets E / num_stages and the first
// E % num_stages stages one more; stage 0 starts with the embedding, the last ends with the
// head. Throws SplitError when a stage would hold nothing.
Split default_split(int n_layers, int num_stages);

// Parses "emb,0|1-2|3-4|5|...|16|head": stages separated by '|', each a comma list of `emb`,
// `head`, a layer N or an inclusive range A-B. `emb` and `head` may be left out (they then
// join the first and the last stage); a stage holding only the head is written `head`.
// num_stages > 0 also checks the stage count. Errors name the first bad stage.
Split parse_split(const std::string& spec, int n_layers, int num_stages = 0);

// The split a run uses: `spec` parsed when given, torchtitan's even split when empty.
Split split_or_default(const std::string& spec, int n_layers, int num_stages);

}  // namespace parity::pipelined
