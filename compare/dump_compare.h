// Comparing two dumps tensor by tensor: the rows `parity compare` prints and the benchmark
// times.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "compare/tensor_compare.h"
#include "dumps/dump.h"

namespace parity::compare {

struct CompareRow {
  int64_t step = 0;
  TensorDiff diff;
};

// Which dtype a tensor's ulps are counted in.
//   forced: every float tensor in this dtype (--ulp-dtype; it never widens a tensor's own);
//   otherwise the compute dtype where parity knows it: a bf16-master run's gradients are bf16
//   values stored in fp32, counted in bf16 ulps; every other tensor in its own dtype.
struct UlpChoice {
  std::optional<h5::DType> forced;
};

// Two parity dumps: every dumped step's scalars (loss, grad_norm, mb_losses), then grads/<fqn>
// and params/<fqn> in FQN order, then buffers/<fqn>; throws dumps::DumpError when they cannot be
// compared (other flavor, other FQN set, other steps, a rank's file missing).
// Any other pair (a file of another writer on either side): the tensors are matched by name
// within grads/, params/ and buffers/; a name on one side only is a row with a problem ("only
// in A: ..."), and a group one side lacks altogether (a file of gradients alone) is left out.
// The steps must agree (a file of another writer is one step).
// `threads` workers split the tensors; the rows come back in the same order whatever the count.
std::vector<CompareRow> compare_dumps(const dumps::Dump& a, const dumps::Dump& b, int threads = 1,
                                      const UlpChoice& ulp = {});

// Bytes of tensor data on one side of the rows (what a comparison reads per side).
int64_t compared_bytes(const dumps::Dump& a);

}  // namespace parity::compare
