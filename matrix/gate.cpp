#include "matrix/gate.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <set>
#include <utility>
#include <vector>

#include "dumps/junit.h"
#include "dumps/temp_files.h"
#include "harness/closed_form.h"
#include "matrix/reports.h"
#include "harness/validate.h"
#include "reports/matrix.h"
#include "reports/render.h"

namespace parity::matrix {

namespace fs = std::filesystem;

namespace {

// The closed-form cells: the reference and each (pp, vp) of the gated pipelined cells; one
// JUnit testcase each.
int closed_forms(const reports::Matrix& m, const std::string& device, bool quiet,
                 std::vector<dumps::JunitCase>& cases) {
  std::set<std::pair<int, int>> shapes;
  for (const auto& c : m.cells)
    if (c.gate != reports::Gate::None && c.pipelined()) shapes.insert({c.pp, c.vp});
  std::vector<harness::ClosedFormOptions> runs(1);  // the reference first
  for (const auto& [pp, vp] : shapes)
    for (const char* cache : {"off", "on"}) {
      harness::ClosedFormOptions o;
      o.pipelined = true;
      o.pipeline.pp = pp;
      o.pipeline.vp = vp;
      o.pipeline.cache = std::string(cache) == "on";
      o.pipeline.schedule = vp == 1 ? pipelined::ScheduleKind::OneFOneB
                                    : pipelined::ScheduleKind::Interleaved1F1B;
      runs.push_back(o);
    }
  int failed = 0;
  for (auto& o : runs) {
    o.precision = kernels::Precision::BF16;
    o.device = device;
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = harness::run_closed_form(o);
    if (!r.pass()) ++failed;
    dumps::JunitCase jc;
    jc.classname = "parity.gate.closed_form";
    jc.name = r.cell;
    jc.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r.pass()) {
      jc.outcome = dumps::JunitCase::Failed;
      jc.message = !r.mismatches.empty()
                       ? std::to_string(r.mismatches.size()) + " of " +
                             std::to_string(r.tensors_checked) +
                             " tensors differ from the closed form; first: " +
                             r.mismatches[0].what + " at index " +
                             std::to_string(r.mismatches[0].first_index) + ": " +
                             r.mismatches[0].got + " vs " + r.mismatches[0].expected
                       : "expected values out of their dtype's range: " + r.out_of_range[0];
      for (const auto& mm : r.mismatches)
        jc.detail += mm.what + ": " + std::to_string(mm.n_wrong) + " of " +
                     std::to_string(mm.numel) + " wrong\n";
      for (const auto& oor : r.out_of_range) jc.detail += "out of range: " + oor + "\n";
    }
    cases.push_back(jc);
    if (!quiet || !r.pass())
      std::cerr << "gate: closed form, " << r.cell << ": " << (r.pass() ? "PASS" : "FAIL")
                << " (" << r.values_checked << " values"
                << (r.mismatches.empty() ? "" : ", first mismatch: " + r.mismatches[0].what) << ")\n";
  }
  std::cout << "closed forms: " << runs.size() - failed << " of " << runs.size() << " pass\n";
  return failed;
}

}  // namespace

int run_gate(GateOptions& o) {
  if (!o.junit.empty()) harness::check_output_file("--junit", o.junit);
  if (!o.markdown.empty()) harness::check_output_file("--markdown", o.markdown);
  reports::Matrix m;
  try {
    m = reports::load_matrix(o.matrix);
  } catch (const std::exception& e) {
    std::cerr << "parity gate: cannot run: " << e.what() << "\n";
    return kGateCannotRun;
  }
  // Only the gated cells and their references, one step each.
  for (const auto& c : m.cells)
    if (c.gate != reports::Gate::None) o.run.only.push_back(c.name);
  if (o.run.only.empty()) {
    std::cerr << "parity gate: cannot run: " << m.source << " has no gated cell (gate = "
              << "\"bitwise\" or \"order-only\")\n";
    return kGateCannotRun;
  }
  o.run.steps = 1;
  if (o.run.jobs <= 0) o.run.jobs = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  const bool temp = o.out.empty();
  o.run.out_dir = temp ? (fs::temp_directory_path() / ("parity-gate-" + std::to_string(::getpid()))).string()
                       : o.out;
  // A gate that cannot run leaves nothing behind in a temporary directory (git bisect run
  // would collect one per skipped commit).
  auto cannot_run = [&](const std::string& why) {
    if (temp && !o.keep) fs::remove_all(o.run.out_dir);
    std::cerr << "parity gate: cannot run: " << why << "\n";
    return kGateCannotRun;
  };
  reports::MatrixResult r;
  try {
    r = run_matrix(m, o.run);
  } catch (const Interrupted& e) {
    // Neither pass, fail nor skip: an exit above 127 makes `git bisect run` stop.
    std::cerr << "parity gate: " << e.what() << "\n";
    return 128 + e.signal();
  } catch (const std::exception& e) {
    return cannot_run(e.what());
  }
  // A cell that refused its configuration (exit 2), or a seed checkpoint that could not be
  // made, is a broken gate, not a failed check.
  for (const auto& c : r.cells)
    if (!c.ok() && (c.error.rfind("exit 2", 0) == 0 || c.error.rfind(kNoSeed, 0) == 0))
      return cannot_run("cell " + c.cell.name + ": " + c.error);
  std::cout << reports::render_text(r);
  int failed = r.complete() && r.gates_ok() ? 0 : 1;
  // JUnit: one testcase per gated cell (its references ran for it), then the closed forms.
  std::vector<dumps::JunitCase> cells, forms;
  for (const auto& jc : junit_cases(r))
    if (const auto* c = r.find(jc.name); c && c->cell.gate != reports::Gate::None) cells.push_back(jc);
  if (o.closed_forms) {
    try {
      failed += closed_forms(m, spec::to_string(o.run.device.value_or(spec::Device::Cpu)), o.run.quiet, forms);
    } catch (const std::exception& e) {
      return cannot_run(std::string("the closed forms: ") + e.what());
    }
  }
  if (!o.junit.empty())
    dumps::write_junit(o.junit, {{"parity.gate.cells", cells}, {"parity.gate.closed_forms", forms}});
  if (!o.markdown.empty()) {
    std::string md = reports::render_markdown(r);
    int passed = 0;
    for (const auto& f : forms) passed += f.outcome == dumps::JunitCase::Passed;
    md += "\nClosed forms: " + std::to_string(passed) + " of " + std::to_string(forms.size()) +
          " pass\n";
    for (const auto& f : forms)
      if (f.outcome != dumps::JunitCase::Passed) md += "- **" + f.name + "**: " + f.message + "\n";
    md += std::string("\n**gate: ") + (failed == 0 ? "PASS" : "FAIL") + "**\n";
    dumps::write_file_atomically(o.markdown, md);
  }
  if (temp && !o.keep && failed == 0) fs::remove_all(o.run.out_dir);
  else std::cout << "gate: the runs are in " << o.run.out_dir << "\n";
  std::cout << (failed == 0 ? "gate: PASS" : "gate: FAIL") << "\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace parity::matrix
