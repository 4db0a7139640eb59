// The bits of a metrics file (`parity train --metrics`): every step's loss and grad norm as C99
// hex floats, the timing fields left out (they differ run to run).
#pragma once

#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace parity::testing {

inline std::vector<std::string> metric_bits(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    auto j = nlohmann::json::parse(line);
    out.push_back(j["loss_hex"].get<std::string>() + " " + j["grad_norm_hex"].get<std::string>());
  }
  return out;
}

}  // namespace parity::testing
