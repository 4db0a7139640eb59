// Shared inputs of the trainer suites: a synthetic corpus and tiny's parameters with non-zero
// pseudo-queries (a uniform AttnRes mix would hide a wrong stack-entry order).
#pragma once

#include <torch/torch.h>

#include <random>
#include <string>
#include <vector>

#include "datasets/rows.h"
#include "kernels/config.h"
#include "kernels/params.h"
#include "kernels/precision.h"

namespace parity::testing {

// Uniform random ids below 2048, `rows` rows of seq_len + 1 tokens.
inline datasets::TokenRows synthetic_rows(int64_t seq_len, int64_t rows, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, 2047);
  std::vector<int32_t> stream(static_cast<size_t>(rows * (seq_len + 1)));
  for (auto& t : stream) t = id(rng);
  return datasets::TokenRows(std::move(stream), seq_len, rows);
}

// A precision mode as a test-name part ("bf16-master" -> "bf16_master": gtest names take no '-').
inline std::string test_name(kernels::Precision p) {
  std::string s = kernels::to_string(p);
  for (auto& c : s)
    if (c == '-') c = '_';
  return s;
}

inline kernels::NamedTensors tiny_params(uint64_t seed = 3) {
  auto p = kernels::init_params(kernels::flavor("tiny"), seed);
  auto gen = at::detail::createCPUGenerator(seed + 100);
  for (size_t i = 0; i < p.size(); ++i)
    if (p.names()[i].find("res_proj") != std::string::npos) p[i].normal_(0.0, 0.5, gen);
  return p;
}

}  // namespace parity::testing
