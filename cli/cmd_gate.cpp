// parity gate [--matrix FILE]: the step-1 checks, for CI and `git bisect run`.
//
//   contract 1  each gated cell of the matrix (the shipped quick one by default) run for one
//               step: `bitwise` cells equal to their reference bit for bit (loss, grad norm,
//               every gradient and updated parameter);
//   contract 2  `order-only` cells: no WRONG verdict from the ledger;
//   contract 3  the exact flavor against its closed form (3 steps, a forward-only pass
//               between) for the reference and every pipelined shape the gated cells use,
//               cache on and off, in bf16.
//
// Exit codes: 0 pass, 1 a check failed, 125 the gate cannot run (a bad matrix, a cell that
// refuses its configuration, no seed checkpoint): what `git bisect run` reads as "skip";
// 130 stopped by SIGINT or SIGTERM (bisect stops too).
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <tuple>

#include "cli/commands.h"
#include "cli/matrix_runner.h"
#include "compare/closed_form.h"
#include "reports/drift.h"
#include "reports/matrix.h"
#include "reports/render.h"

namespace parity::cli {

namespace fs = std::filesystem;

namespace {

constexpr int kCannotRun = 125;
constexpr int kInterrupted = 130;  // 128 + SIGINT

struct GateOptions {
  std::string matrix = "quick";
  std::string out;
  MatrixRunOptions run;
  bool keep = false;
  bool closed_forms = true;
};

// The closed-form cells: the reference and each (pp, vp) of the gated pipelined cells.
int closed_forms(const reports::Matrix& m, const std::string& device, bool quiet) {
  std::set<std::pair<int, int>> shapes;
  for (const auto& c : m.cells)
    if (c.gate != reports::Gate::None && c.pipelined()) shapes.insert({c.pp, c.vp});
  std::vector<compare::ClosedFormOptions> runs(1);  // the reference first
  for (const auto& [pp, vp] : shapes)
    for (const char* cache : {"off", "on"}) {
      compare::ClosedFormOptions o;
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
    const auto r = compare::run_closed_form(o);
    if (!r.pass()) ++failed;
    if (!quiet || !r.pass())
      std::cerr << "gate: closed form, " << r.cell << ": " << (r.pass() ? "PASS" : "FAIL")
                << " (" << r.values_checked << " values"
                << (r.mismatches.empty() ? "" : ", first mismatch: " + r.mismatches[0].what) << ")\n";
  }
  std::cout << "closed forms: " << runs.size() - failed << " of " << runs.size() << " pass\n";
  return failed;
}

int run_gate(GateOptions& o) {
  reports::Matrix m;
  try {
    m = reports::load_matrix(o.matrix);
  } catch (const std::exception& e) {
    std::cerr << "parity gate: cannot run: " << e.what() << "\n";
    return kCannotRun;
  }
  // Only the gated cells and their references, one step each.
  for (const auto& c : m.cells)
    if (c.gate != reports::Gate::None) o.run.only.push_back(c.name);
  if (o.run.only.empty()) {
    std::cerr << "parity gate: cannot run: " << m.source << " has no gated cell (gate = "
              << "\"bitwise\" or \"order-only\")\n";
    return kCannotRun;
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
    return kCannotRun;
  };
  reports::MatrixResult r;
  try {
    r = run_matrix(m, o.run);
  } catch (const Interrupted& e) {
    // Neither pass, fail nor skip: an exit above 127 makes `git bisect run` stop.
    std::cerr << "parity gate: " << e.what() << "\n";
    return kInterrupted;
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

}  // namespace

Command add_gate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "gate", "step-1 checks: contracts 1 and 2 and the closed forms (exit 0 pass, 1 fail, "
              "125 cannot run)");
  auto o = std::make_shared<GateOptions>();
  cmd->add_option("--matrix", o->matrix, "matrix file, or a shipped one (quick, seed)")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "keep the runs in this directory (default: a temporary "
                                   "one, removed when the gate passes)");
  cmd->add_option("--jobs", o->run.jobs, "cores to keep busy (default: all)");
  cmd->add_option("--device", o->run.device, "run the cells and the closed forms on this "
                                            "device (cpu, cuda)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--tokens", o->run.tokens, "every cell reads this token file (train --tokens)");
  cmd->add_flag("--keep", o->keep, "keep the temporary directory even when the gate passes");
  cmd->add_flag("!--no-closed-forms", o->closed_forms, "skip the closed-form checks");
  cmd->add_flag("--quiet", o->run.quiet, "no progress lines");
  return {cmd, [o] { return run_gate(*o); }};
}

}  // namespace parity::cli
