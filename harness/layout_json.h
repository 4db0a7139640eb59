// A pipeline shape's routing tables as JSON: what `parity layout --json` prints and a matrix
// run keeps for each pipelined cell's layout diagram.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace parity::harness {

// Throws pipelined::SplitError for a bad split.
nlohmann::json layout_json(int layers, int block, int pp, int vp, const std::string& split);

}  // namespace parity::harness
