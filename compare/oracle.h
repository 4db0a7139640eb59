// The oracle for runs parity did not compute (docs/design.md section 6.7): a run's step-1
// gradients judged against the float64 truth of the same step, with a rounding floor measured
// on correct runs of the run's dtype, and a wrong gradient explained as the truth plus or
// minus whole terms that can be computed in fp64 (micro-batches, deposits), or as a zeroed or
// swapped tensor.
//
// Everything here is arithmetic on fp64 copies, torch-free; harness/truth_command.h runs the
// trainers that produce the truth, the floor's variants and the terms.
//
// Distance: for a tensor with truth t and run g, d = ||g - t||_2 / ||t||_2 (fp64 sums);
// 0 when both are all zero, infinite when t is zero and g is not, and infinite for any
// non-finite element of g. Floor: the largest d among the correct variants of the run's dtype,
// and never below the expected rounding of t itself into that dtype,
// sqrt(sum_i spacing(t_i)^2 / 12) / ||t|| (a uniform rounding error in +-spacing/2 has variance
// spacing^2 / 12). A tensor is within the floor when d <= margin * floor.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dumps/h5.h"

namespace parity::compare {

// The margin over the floor (docs/design.md section 6.7 derives it): rounding errors add as
// random walks, so a sum of n terms rounded after every term (error ~ u sqrt(n)) and the same
// sum in a tree (~ u sqrt(log2 n)) differ in error by less than sqrt(n). The deepest sum of a
// debugmodel step gathers 1024 token contributions (4 micro-batches x 256 tokens), sqrt(1024)
// = 32, and twice that covers the walk's tail (two standard deviations).
constexpr double kFloorMargin = 64;

// One set of gradients in fp64, aligned with the truth's names (index i is names[i]).
struct GradSet {
  std::vector<std::vector<double>> values;
};

// The names and shapes every GradSet of one judgement is aligned to.
struct GradLayout {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  size_t size() const { return names.size(); }
};

// d above, for one tensor.
double relative_distance(const std::vector<double>& g, const std::vector<double>& t);

// The expected relative rounding error of t in `dtype` (above); 0 for an all-zero t.
double rounding_floor(const std::vector<double>& t, h5::DType dtype);

// max |g - t| in ulps of the tensor's scale in `dtype` (the spacing at max |t|); infinite for a
// non-finite g, 0 for an all-zero t with an all-zero g.
double scale_ulps(const std::vector<double>& g, const std::vector<double>& t, h5::DType dtype);

enum class TruthVerdict { Consistent, Wrong, Suspect };
const char* to_string(TruthVerdict v);  // "CONSISTENT", "WRONG", "SUSPECT"

// A named defect: what it is, how much of the run's discrepancy it accounts for, the tensors
// it explains.
struct Defect {
  std::string kind;  // "micro-batches" | "zeroed" | "swapped" | "deposits"
  std::string text;  // "micro-batch 3 missing", "all gradients x 4.00 (the micro-batch count)"
  // 1 - sum_t ||g - model||^2 / ||t||^2 over sum_t ||g - t||^2 / ||t||^2, over the tensors it
  // explains: the share of their (relative) discrepancy the named term accounts for.
  double fit = 0;
  std::vector<std::string> tensors;
};

struct TensorJudgement {
  std::string name;
  int64_t numel = 0;
  double distance = 0;  // d
  double floor = 0;
  double ratio = 0;     // d / floor (infinite for a zero floor and d > 0)
  double scale_ulps = 0;
  TruthVerdict verdict = TruthVerdict::Consistent;
  int defect = -1;  // the Defect that explains it (WRONG), else -1
  std::vector<double> mb_weights;  // beyond the floor: this tensor's own micro-batch fit
};

// A term that may be missing from, or present twice in, a run's gradients: a deposit (block,
// reading stage, micro-batch), with its contribution to every gradient in fp64.
struct Term {
  std::string name;  // "deposit of block 1 read by stage 6, micro-batch 2"
  GradSet contribution;
};

struct RunJudgement {
  std::vector<TensorJudgement> tensors;  // in the layout's order
  std::vector<Defect> defects;
  std::vector<double> mb_weights;  // the whole run's micro-batch fit
  int consistent = 0, wrong = 0, suspect = 0;
  std::vector<std::string> notes;  // what could not be tried, and why
};

// The inputs of one judgement.
struct OracleInputs {
  const GradLayout* layout = nullptr;
  const GradSet* truth = nullptr;
  std::vector<double> floor;         // per tensor, the floor (variants and rounding)
  const std::vector<GradSet>* per_microbatch = nullptr;  // truth terms, summing to the truth
  double margin = kFloorMargin;
};

// Terms for the unexplained tensors, one per call, most likely first (computing each is the
// caller's cost): given the tensors still beyond the floor and the residual g - truth, the
// next deposit worth trying; nullopt when there are no more (or the run has no cached layout).
using TermSource = std::function<std::optional<Term>(const std::vector<size_t>& beyond,
                                                     const GradSet& residual)>;

// Judges a run. The defects, in this order, each over the tensors still unexplained: zeroed
// tensors, swapped same-shaped pairs (among tensors beyond every variant), the micro-batch
// weights (named weights whose model accounts for half the discrepancy or more), then, when a
// tensor lies beyond every variant, terms from `terms`: the first that, missing or duplicated
// and significant (five standard errors of the floor's noise), explains every tensor beyond the
// margin ends the search; failing one, pairs and the triple of the three best; failing those,
// the best significant one alone. A defect explains a tensor when its model lies within the
// margin of the run, closer than the truth, and moves the tensor by more than a tenth of its
// floor, so a defect is named inside a wide floor too. Verdicts: WRONG explained, CONSISTENT
// within margin x floor, SUSPECT otherwise.
RunJudgement judge_run(const OracleInputs& in, const GradSet& run, const TermSource& terms = {});

// Least-squares micro-batch weights of `g` over the per-micro-batch terms, each tensor weighted
// by 1 / ||truth||^2, over the tensors `use` lists (all when empty). Empty when singular.
std::vector<double> microbatch_weights(const OracleInputs& in, const GradSet& g,
                                       const std::vector<size_t>& use = {});

// The name micro-batch weights deserve, with the weights that name stands for ("" and all
// ones when they are all 1 within `slack`): a common factor k ("all gradients x k", "(the
// micro-batch count)" when k = M), else per micro-batch 0 (missing), 2 (twice) or the value.
std::string name_weights(const std::vector<double>& w, double slack, std::vector<double>& named);

// A scalar (the step-1 loss) against its truth: |x - t| / |t|, infinite when non-finite.
double relative_scalar(double x, double t);

}  // namespace parity::compare
