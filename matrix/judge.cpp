#include "matrix/judge.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>

#include "compare/dump_compare.h"
#include "compare/localise.h"
#include "dumps/dump.h"

namespace parity::matrix {

namespace fs = std::filesystem;
using reports::CellResult;
using reports::Gate;
using reports::MatrixResult;

namespace {

// A reference's step-1 dump, read once however many cells compare against it.
struct ReferenceDump {
  dumps::Dump dump;
  std::string error;  // why it could not be read
};

// The dump in `dir`, or why it could not be read.
ReferenceDump read_dump_of(const fs::path& dir) {
  ReferenceDump d;
  try {
    d.dump = dumps::read_dump(dir.string());
  } catch (const std::exception& e) {
    d.error = e.what();
  }
  return d;
}

// The cells' dumps, each read once however many cells compare against it.
class DumpCache {
 public:
  explicit DumpCache(fs::path cells_dir) : dir_(std::move(cells_dir)) {}
  const ReferenceDump& operator()(const std::string& cell) {
    auto it = read_.find(cell);
    if (it != read_.end()) return it->second;
    return read_.emplace(cell, read_dump_of(dir_ / cell / "dump")).first->second;
  }

 private:
  fs::path dir_;
  std::map<std::string, ReferenceDump> read_;
};

// Step 1 of the dump `a` against `b`, tensor by tensor; `rows` gets the comparison. The runner
// dumps step 1 alone, so the dumps compare whole. Throws when a dump cannot be read.
reports::Step1Diff diff_step1(const dumps::Dump& a, const ReferenceDump& b,
                              std::vector<compare::CompareRow>& rows) {
  if (!b.error.empty()) throw dumps::DumpError(b.error);
  if (!a.steps.count(1) || !b.dump.steps.count(1))
    throw dumps::DumpError("step 1 is not in both dumps");
  rows = compare::compare_dumps(a, b.dump, 1);
  reports::Step1Diff d;
  for (const auto& row : rows) {
    const auto& t = row.diff;
    const bool tensor = t.name.rfind("grads/", 0) == 0 || t.name.rfind("params/", 0) == 0;
    // A NaN or Inf is never a match, not even the same bits in both dumps.
    const bool nonfinite = t.nonfinite() > 0;
    const uint64_t ulp = !t.problem.empty() || t.nan_mismatch || nonfinite ? reports::kUlpInfinite
                                                                           : t.max_ulp;
    if (!tensor) {
      if (!t.bitwise || nonfinite) d.scalars_equal = false;
      continue;
    }
    ++d.tensors;
    if (!t.bitwise || nonfinite) ++d.wrong_tensors;
    d.max_ulp = std::max(d.max_ulp, ulp);
    if (t.name.rfind("grads/", 0) == 0) d.grad_ulps.push_back(t.bitwise && !nonfinite ? 0 : std::max<uint64_t>(ulp, 1));
  }
  d.have = true;
  return d;
}

// Step 1 of `cell` (its dump `own`) against `ref` (its dump `b`): every scalar and tensor, and
// the ledger verdicts.
void compare_step1(CellResult& cell, const CellResult& ref, const ReferenceDump& own,
                   const fs::path& cell_dump, const fs::path& ref_dump, const ReferenceDump& b) {
  // Compared once: the verdicts below reuse the rows.
  const dumps::Dump& a = own.dump;
  std::vector<compare::CompareRow> rows;
  try {
    // the reference's failure first, as it is the more likely to be shared by many cells
    if (!b.error.empty()) throw dumps::DumpError(b.error);
    if (!own.error.empty()) throw dumps::DumpError(own.error);
    cell.step1 = diff_step1(a, b, rows);
  } catch (const std::exception& e) {
    cell.step1.why_not = e.what();
  }
  // The verdicts answer one question: does the pipeline route every gradient contribution
  // exactly once? A reference-trainer cell (stock accumulation, reversed micro-batches, a
  // repeat) routes nothing; it changes the computation on purpose, and the comparison above
  // is its whole story (BITWISE or DIFFERS).
  if (!cell.cell.pipelined()) {
    cell.verdicts.why_not = "not a pipelined cell: the verdicts judge gradient routing";
    return;
  }
  if (cell.cell.multi_process() || ref.cell.multi_process()) {
    cell.verdicts.why_not = "multi-process runs record no ledger";
    return;
  }
  if (!cell.step1.have) {
    cell.verdicts.why_not = cell.step1.why_not;
    return;
  }
  try {
    const auto r = compare::localise(a, b.dump, rows, cell_dump.string(), ref_dump.string());
    auto& v = cell.verdicts;
    v.have = true;
    v.exact = r.count(compare::Verdict::Exact);
    v.order_only = r.count(compare::Verdict::OrderOnly);
    v.wrong = r.count(compare::Verdict::Wrong);
    // Why, most telling first: a run's routing self-check (it names the fault), a block
    // gradient outside its bound, a gradient tensor, anything else.
    for (const auto& f : r.findings) {
      v.first_wrong = "run " + f.run + ", block " + std::to_string(f.block) + ", stage " +
                      std::to_string(f.stage) + ": " + f.what;
      break;
    }
    if (!r.findings.empty() && v.wrong == 0) v.wrong = 1;  // a finding is WRONG on its own
    for (const auto& b : r.blocks)
      if (v.first_wrong.empty() && b.verdict == compare::Verdict::Wrong)
        v.first_wrong = "block " + std::to_string(b.block) + ", micro-batch " +
                        std::to_string(b.mb) + ", stage " + std::to_string(b.stage) + ": " + b.why;
    for (const bool grads_only : {true, false})
      for (const auto& t : r.tensors)
        if (v.first_wrong.empty() && t.verdict == compare::Verdict::Wrong &&
            (!grads_only || t.name.rfind("grads/", 0) == 0))
          v.first_wrong = t.name + ": " + t.why;
    if (r.first.found)
      v.divergence = "step " + std::to_string(r.first.step) + ", micro-batch " +
                     std::to_string(r.first.mb) + ", stage " + std::to_string(r.first.stage) +
                     ", " + r.first.hop + ": " + r.first.tensor;
  } catch (const std::exception& e) {
    cell.verdicts.why_not = e.what();
  }
}

// Whether every step both logged has equal loss and grad-norm bits, and both logged the same
// steps. `why` says where not; `other` names `target` in it ("its twin 'x'").
bool every_step_bitwise(const CellResult& c, const CellResult& target, const std::string& other,
                        std::string& why) {
  if (c.steps.size() != target.steps.size()) {
    why = "logged " + std::to_string(c.steps.size()) + " steps, " + other + " " +
          std::to_string(target.steps.size());
    return false;
  }
  for (size_t i = 0; i < c.steps.size(); ++i) {
    const auto &a = c.steps[i], &b = target.steps[i];
    if (a.loss_hex != b.loss_hex || a.grad_norm_hex != b.grad_norm_hex) {
      why = "step " + std::to_string(a.step) + " differs from " + other + ": loss " + a.loss_hex +
            " vs " + b.loss_hex + ", grad norm " + a.grad_norm_hex + " vs " + b.grad_norm_hex;
      return false;
    }
  }
  return true;
}

// The gate of `c` against `target` (its twin when it has one, else its reference), `step1`
// being c's step 1 against that target.
void judge_gate(CellResult& c, const CellResult* target, const reports::Step1Diff& step1) {
  auto& g = c.gate;
  g.gate = c.cell.gate;
  if (g.gate == Gate::None) return;
  g.passed = false;
  if (!c.ok()) {
    g.why = "the cell did not run to the end";
    return;
  }
  const std::string other =
      (c.cell.twin.empty() ? "its reference '" : "its twin '") + c.cell.gate_target() + "'";
  if (!target || !target->ok()) {
    g.why = other + " did not run to the end";
    return;
  }
  // Agreement between dead runs proves nothing (as `parity compare` says of both runs dead).
  for (const auto& st : c.steps)
    if (!std::isfinite(st.loss) || !std::isfinite(st.grad_norm)) {
      g.why = "the run diverged (loss or grad norm not finite from step " +
              std::to_string(st.step) + "): an agreement there proves nothing";
      return;
    }
  if (g.gate == Gate::Bitwise) {
    if (!every_step_bitwise(c, *target, other, g.why)) return;
    if (!step1.have) {
      g.why = "step 1 could not be compared: " + step1.why_not;
      return;
    }
    if (step1.wrong_tensors > 0 || !step1.scalars_equal) {
      g.why = std::to_string(step1.wrong_tensors) + " of " + std::to_string(step1.tensors) +
              " tensors differ at step 1 (max " +
              (step1.max_ulp == reports::kUlpInfinite ? std::string("inf")
                                                      : std::to_string(step1.max_ulp)) +
              " ulp) from " + other;
      return;
    }
  } else {
    if (!c.verdicts.have) {
      g.why = "no verdicts: " + c.verdicts.why_not;
      return;
    }
    if (c.verdicts.wrong > 0) {
      g.why = std::to_string(c.verdicts.wrong) + " WRONG at step 1; first: " + c.verdicts.first_wrong;
      return;
    }
  }
  g.passed = true;
}

// Step 1 of a cell (its dump `own`) against its twin (its dump `dump`): every tensor and scalar.
reports::Step1Diff against_twin(const ReferenceDump& own, const ReferenceDump& dump) {
  reports::Step1Diff d;
  try {
    if (!own.error.empty()) throw dumps::DumpError(own.error);
    std::vector<compare::CompareRow> rows;
    d = diff_step1(own.dump, dump, rows);
  } catch (const std::exception& e) {
    d.why_not = e.what();
  }
  return d;
}

// One cell against its reference and its twin, whose dumps `dump_of` gives when they have
// been read already.
void judge(CellResult& cr, const MatrixResult& r, const fs::path& cells_dir, DumpCache& dump_of) {
  if (cr.cell.reference.empty() && cr.cell.twin.empty()) return;
  const CellResult* ref = r.find(cr.cell.reference);
  const CellResult* twin = r.find(cr.cell.twin);
  std::optional<ReferenceDump> own;  // the cell's dump, read once for both comparisons
  auto own_dump = [&]() -> const ReferenceDump& {
    if (!own) own = read_dump_of(cells_dir / cr.cell.name / "dump");
    return *own;
  };
  try {
    if (cr.cell.reference.empty()) {
      // a cell held against its twin alone
    } else if (!cr.ok()) {
      cr.step1.why_not = cr.verdicts.why_not = "the cell did not run to the end";
    } else if (!ref || !ref->ok()) {
      cr.step1.why_not = cr.verdicts.why_not = "its reference did not run to the end";
    } else {
      compare_step1(cr, *ref, own_dump(), cells_dir / cr.cell.name / "dump",
                    cells_dir / ref->cell.name / "dump", dump_of(ref->cell.name));
    }
    if (cr.cell.twin.empty()) {
      judge_gate(cr, ref, cr.step1);
      return;
    }
    reports::Step1Diff step1;
    if (!cr.ok() || !twin || !twin->ok())
      step1.why_not = !cr.ok() ? "the cell did not run to the end" : "its twin did not run to the end";
    else
      step1 = against_twin(own_dump(), dump_of(twin->cell.name));
    judge_gate(cr, twin, step1);
  } catch (const std::exception& e) {  // out of memory, say
    judging_failed(cr, r, e.what());
  }
}


}  // namespace

void judge_cells(reports::MatrixResult& r, const fs::path& cells_dir) {
  DumpCache dumps(cells_dir);
  for (auto& cr : r.cells) judge(cr, r, cells_dir, dumps);
}

void judging_failed(CellResult& c, const MatrixResult& r, const std::string& why) {
  c.step1 = {};
  c.verdicts = {};
  c.step1.why_not = c.verdicts.why_not = "judging failed: " + why;
  judge_gate(c, r.find(c.cell.gate_target()), c.step1);
}

void judge_cell(CellResult& c, const MatrixResult& r, const fs::path& cells_dir) {
  DumpCache dumps(cells_dir);  // the reference and the twin, once each
  judge(c, r, cells_dir, dumps);
}

}  // namespace parity::matrix
