#include "matrix/judge.h"

#include <algorithm>
#include <cmath>
#include <functional>
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

namespace {

// A reference's step-1 dump, read once however many cells compare against it.
struct ReferenceDump {
  dumps::Dump dump;
  std::string error;  // why it could not be read
};

// Step 1 of `cell` against `ref`: every scalar and tensor, and the ledger verdicts. The runner
// dumps step 1 alone, so the dumps compare whole.
void compare_step1(CellResult& cell, const CellResult& ref, const fs::path& cell_dump,
                   const fs::path& ref_dump, const ReferenceDump& b) {
  // Read and compared once: the verdicts below reuse both.
  dumps::Dump a;
  std::vector<compare::CompareRow> rows;
  try {
    if (!b.error.empty()) throw dumps::DumpError(b.error);
    a = dumps::read_dump(cell_dump.string());
    if (!a.steps.count(1) || !b.dump.steps.count(1))
      throw dumps::DumpError("step 1 is not in both dumps");
    rows = compare::compare_dumps(a, b.dump, 1);
    auto& d = cell.step1;
    for (const auto& row : rows) {
      const auto& t = row.diff;
      const bool tensor = t.name.rfind("grads/", 0) == 0 || t.name.rfind("params/", 0) == 0;
      const uint64_t ulp = !t.problem.empty() || t.nan_mismatch ? reports::kUlpInfinite : t.max_ulp;
      if (!tensor) {
        if (!t.bitwise) d.scalars_equal = false;
        continue;
      }
      ++d.tensors;
      if (!t.bitwise) ++d.wrong_tensors;
      d.max_ulp = std::max(d.max_ulp, ulp);
      if (t.name.rfind("grads/", 0) == 0) d.grad_ulps.push_back(t.bitwise ? 0 : std::max<uint64_t>(ulp, 1));
    }
    d.have = true;
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
// steps. `why` says where not.
bool every_step_bitwise(const CellResult& c, const CellResult& ref, std::string& why) {
  if (c.steps.size() != ref.steps.size()) {
    why = "logged " + std::to_string(c.steps.size()) + " steps, the reference " +
          std::to_string(ref.steps.size());
    return false;
  }
  for (size_t i = 0; i < c.steps.size(); ++i) {
    const auto &a = c.steps[i], &b = ref.steps[i];
    if (a.loss_hex != b.loss_hex || a.grad_norm_hex != b.grad_norm_hex) {
      why = "step " + std::to_string(a.step) + " differs: loss " + a.loss_hex + " vs " +
            b.loss_hex + ", grad norm " + a.grad_norm_hex + " vs " + b.grad_norm_hex;
      return false;
    }
  }
  return true;
}

void judge_gate(CellResult& c, const CellResult* ref) {
  auto& g = c.gate;
  g.gate = c.cell.gate;
  if (g.gate == Gate::None) return;
  g.passed = false;
  if (!c.ok()) {
    g.why = "the cell did not run to the end";
    return;
  }
  if (!ref || !ref->ok()) {
    g.why = "its reference '" + c.cell.reference + "' did not run to the end";
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
    if (!every_step_bitwise(c, *ref, g.why)) return;
    if (!c.step1.have) {
      g.why = "step 1 could not be compared: " + c.step1.why_not;
      return;
    }
    if (c.step1.wrong_tensors > 0 || !c.step1.scalars_equal) {
      g.why = std::to_string(c.step1.wrong_tensors) + " of " + std::to_string(c.step1.tensors) +
              " tensors differ at step 1 (max " +
              (c.step1.max_ulp == reports::kUlpInfinite ? std::string("inf")
                                                        : std::to_string(c.step1.max_ulp)) +
              " ulp)";
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

// One cell against its reference, whose dump `ref_dump` gives when it has been read already.
void judge(CellResult& cr, const CellResult* ref, const fs::path& cells_dir,
           const std::function<const ReferenceDump&(const std::string&)>& ref_dump) {
  if (cr.cell.reference.empty()) return;
  if (!cr.ok()) {
    cr.step1.why_not = cr.verdicts.why_not = "the cell did not run to the end";
  } else if (!ref || !ref->ok()) {
    cr.step1.why_not = cr.verdicts.why_not = "its reference did not run to the end";
  } else {
    try {
      compare_step1(cr, *ref, cells_dir / cr.cell.name / "dump",
                    cells_dir / ref->cell.name / "dump", ref_dump(ref->cell.name));
    } catch (const std::exception& e) {  // out of memory, say
      judging_failed(cr, ref, e.what());
      return;
    }
  }
  judge_gate(cr, ref);
}

ReferenceDump read_reference(const fs::path& dir) {
  ReferenceDump d;
  try {
    d.dump = dumps::read_dump(dir.string());
  } catch (const std::exception& e) {
    d.error = e.what();
  }
  return d;
}

}  // namespace

void judge_cells(reports::MatrixResult& r, const fs::path& cells_dir) {
  std::map<std::string, ReferenceDump> refs;  // each read once however many cells use it
  auto ref_dump = [&](const std::string& name) -> const ReferenceDump& {
    auto it = refs.find(name);
    if (it == refs.end()) it = refs.emplace(name, read_reference(cells_dir / name / "dump")).first;
    return it->second;
  };
  for (auto& cr : r.cells) judge(cr, r.find(cr.cell.reference), cells_dir, ref_dump);
}

void judging_failed(CellResult& c, const CellResult* ref, const std::string& why) {
  c.step1 = {};
  c.verdicts = {};
  c.step1.why_not = c.verdicts.why_not = "judging failed: " + why;
  judge_gate(c, ref);
}

void judge_cell(CellResult& c, const CellResult* ref, const fs::path& cells_dir) {
  std::optional<ReferenceDump> read;
  judge(c, ref, cells_dir, [&](const std::string& name) -> const ReferenceDump& {
    if (!read) read = read_reference(cells_dir / name / "dump");
    return *read;
  });
}

}  // namespace parity::matrix
