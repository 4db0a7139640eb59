#include "harness/gate.h"

#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <set>
#include <utility>
#include <vector>

#include "harness/closed_form.h"
#include "reports/matrix.h"
#include "reports/render.h"

namespace parity::harness {

namespace fs = std::filesystem;

namespace {

// The closed-form cells: the reference and each (pp, vp) of the gated pipelined cells.
int closed_forms(const reports::Matrix& m, const std::string& device, bool quiet) {
  std::set<std::pair<int, int>> shapes;
  for (const auto& c : m.cells)
    if (c.gate != reports::Gate::None && c.pipelined()) shapes.insert({c.pp, c.vp});
  std::vector<ClosedFormOptions> runs(1);  // the reference first
  for (const auto& [pp, vp] : shapes)
    for (const char* cache : {"off", "on"}) {
      ClosedFormOptions o;
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
    const auto r = run_closed_form(o);
    if (!r.pass()) ++failed;
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
  if (o.closed_forms) {
    try {
      failed += closed_forms(m, o.run.device.empty() ? "cpu" : o.run.device, o.run.quiet);
    } catch (const std::exception& e) {
      return cannot_run(std::string("the closed forms: ") + e.what());
    }
  }
  if (temp && !o.keep && failed == 0) fs::remove_all(o.run.out_dir);
  else std::cout << "gate: the runs are in " << o.run.out_dir << "\n";
  std::cout << (failed == 0 ? "gate: PASS" : "gate: FAIL") << "\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace parity::harness
