// `parity localise A B`: is each difference between two runs only reduction order, or a bug?
// (docs/design.md section 6, "Contribution ledger and verdicts" and "Localisation".)
//
// Both runs were made with --ledger. For every block gradient (step, micro-batch, block) each
// side is first checked against its own contributions c_1..c_n: its value must lie within
// gamma_{n-1} * sum|c_i| of their exact sum (Boost.Multiprecision), gamma_k = k u / (1 - k u)
// in the dtype's unit roundoff u, element by element. That bound covers every order of
// summation and nothing else, so a missing, duplicated or misrouted term falls outside it; the
// residual is then matched against one stage's terms to say which (a dropped or duplicated
// deposit, a deposit that arrived at another block, a skipped collection). Every read must
// also have read what the producer committed for its micro-batch (a stale block otherwise).
//
// Verdicts, per block gradient and per dumped tensor:
//   EXACT       bitwise equal;
//   ORDER-ONLY  the same multiset of contributions (readers) on both sides, both within the
//               bound, the forward bitwise equal, and for a parameter: inside the predicted
//               set, with some block gradient it depends on that differs (order-only);
//   WRONG       anything else, with the reason.
// A parameter of unit u depends on the gradients of blocks b with b * lpb > u (the blocks its
// output flows into). The predicted set: the parameters upstream of a block that some stage
// reads from its rank's store (the routing tables' deposits, cache on), in either run.
// The first divergence is the earliest differing record in execution order: forward reads and
// hops by stage, then backward hops, block gradients and contributions by stage, descending.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "compare/dump_compare.h"

namespace parity::compare {

enum class Verdict { Exact, OrderOnly, Wrong };
const char* to_string(Verdict v);  // "EXACT" | "ORDER-ONLY" | "WRONG"

struct BlockVerdict {
  int64_t step = 0;
  int mb = 0, block = 0;
  int stage = 0;  // the producer's (in run A's split)
  Verdict verdict = Verdict::Exact;
  int contributions = 0;
  double excess_a = 0, excess_b = 0;  // max |G - exact sum| / bound (<= 1 inside)
  std::string why;
};

struct TensorVerdict {
  int64_t step = 0;
  std::string name;  // "loss", "mb_losses", "grad_norm", "grads/<fqn>", "params/<fqn>"
  Verdict verdict = Verdict::Exact;
  bool predicted = false;  // in the predicted set (parameters only)
  int64_t wrong = 0;       // differing elements
  uint64_t max_ulp = 0;
  double nmse = 0;
  std::string why;
};

// A self-check failure of one run: where its routing went wrong.
struct Finding {
  std::string run;  // "A" or "B"
  int64_t step = 0;
  int mb = 0, block = 0, stage = 0;
  std::string what;
};

struct Divergence {
  bool found = false;
  int64_t step = 0;
  int mb = 0, stage = 0;
  std::string hop;     // "forward read", "forward hop 1->2", "backward block gradient", ...
  std::string tensor;  // "block 1 read by layers.12.attn", "h", ...
};

struct LocaliseReport {
  std::vector<int64_t> steps;        // the steps with ledgers on both sides
  std::set<std::string> predicted;   // FQNs
  std::vector<BlockVerdict> blocks;
  std::vector<TensorVerdict> tensors;
  std::vector<Finding> findings;
  Divergence first;
  int count(Verdict v) const;  // over tensors
  bool ok() const;             // no WRONG tensor, block or finding
};

// Throws dumps::DumpError when a dump is unreadable, the two are not comparable, or a side has no
// ledger on a common dumped step. threads: for the tensor comparison.
LocaliseReport localise(const std::string& a_path, const std::string& b_path, int threads = 1);
// The same, for dumps already read and compared (compare_dumps(a, b)): a caller that has both
// in memory reads neither again. The paths are where the ledgers are read from.
LocaliseReport localise(const dumps::Dump& a, const dumps::Dump& b,
                        const std::vector<CompareRow>& rows, const std::string& a_path,
                        const std::string& b_path);

}  // namespace parity::compare
