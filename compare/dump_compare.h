// Comparing two dumps tensor by tensor: the rows `parity compare` prints and the benchmark
// times.
#pragma once

#include <cstdint>
#include <vector>

#include "compare/tensor_compare.h"
#include "dumps/dump.h"

namespace parity::compare {

struct CompareRow {
  int64_t step = 0;
  TensorDiff diff;
};

// Every dumped step's scalars (loss, grad_norm, mb_losses), then grads/<fqn> and params/<fqn>
// in FQN order. Throws dumps::DumpError when the dumps cannot be compared (other flavor, other FQN
// set, other steps, a rank's file missing). `threads` workers split the tensors; the rows
// come back in the same order whatever the count.
std::vector<CompareRow> compare_dumps(const dumps::Dump& a, const dumps::Dump& b, int threads = 1);

// Bytes of tensor data on one side of the rows (what a comparison reads per side).
int64_t compared_bytes(const dumps::Dump& a);

}  // namespace parity::compare
