// The predicted set (docs/design.md section 6): the parameters whose gradients the cached transport
// may change, written down from the routing tables before any dump is read.
//
// A block that some stage reads from its rank's store gets its gradient home as deposits, and
// the deposits are added in another association than the naive transport's running sum. Every
// parameter upstream of such a block (its unit before the layer that commits it) may therefore
// differ by reduction order; every other gradient must be bitwise equal.
//
// Names follow torchtitan's (and parity's) state dict: "tok_embeddings.*" is the embedding,
// "layers.<l>.*" layer l, and anything else the head (final norm, lm_head, the output
// aggregation). Runs with other names map theirs first (`parity compare --map`).
#pragma once

#include <set>
#include <stdexcept>
#include <string>

#include "pipelined/split.h"

#include "spec/bad_input.h"

namespace parity::compare {

// A --layout spec that cannot be used: the CLI maps it to exit 2.
class LayoutError : public spec::BadInput {
 public:
  using spec::BadInput::BadInput;
};

// "layers=17,block=4,pp=2,vp=2[,split=SPEC]" (split last: its own commas are part of it).
struct Layout {
  int layers = 0, block = 0, pp = 1, vp = 1;
  std::string split;  // "" for the default even split over pp x vp stages
};
Layout parse_layout(const std::string& spec);

// The pipeline unit of a parameter name: -1 the embedding, l for layer l, `layers` the head.
int unit_of_name(const std::string& fqn, int layers);

// A parameter of unit u feeds block b when b * block > u.
bool feeds(int unit, int block_index, int layers_per_block);

struct Prediction {
  int layers = 0, block = 0;
  std::set<int> deposited;  // blocks some stage reads from its rank's store
  bool predicts(const std::string& fqn) const;
  std::string describe() const;  // "blocks [e, x4] are read from a rank's store: ..."
};

// From the routing tables of the layout (cache on: the loop stage-to-rank map).
Prediction predict(const Layout& l);

// The blocks that some stage of a split reads from its rank's store (stage s on rank s % pp,
// the cache on).
std::set<int> deposited_blocks(int layers, int block, const pipelined::Split& split, int pp);

}  // namespace parity::compare
