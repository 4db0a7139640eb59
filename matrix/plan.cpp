#include "matrix/plan.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "dumps/temp_files.h"
#include "harness/errors.h"
#include "spec/limits.h"
#include "matrix/cells.h"
#include "matrix/judge.h"
#include "matrix/reports.h"
#include "harness/run_options.h"
#include "harness/validate.h"
#include "reports/matrix.h"
#include "reports/render.h"

namespace parity::matrix {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kPlanVersion = 1;

std::string sh_line(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "" : " ") + harness::shell_quote(a);
  return s;
}

// What identifies a matrix's plan: its name and its cells as they will run.
json fingerprint(const reports::MatrixResult& r) {
  json cells = json::array();
  for (const auto& c : r.cells) cells.push_back(c.cell.train_args());
  return {{"matrix", r.matrix}, {"cells", cells}};
}

json read_plan(const std::string& dir) {
  const fs::path p = fs::path(dir) / "plan.json";
  if (!fs::is_directory(dir))
    throw harness::UsageError("'" + dir + "' is not a directory; give the --out directory of "
                     "`parity matrix plan`");
  std::ifstream in(p);
  if (!in)
    throw harness::UsageError("'" + dir + "' holds no plan.json: `parity matrix plan FILE --out " + dir +
                     "` writes one");
  std::stringstream text;
  text << in.rdbuf();
  json j = spec::json_depth(text.str()) > spec::kMaxJsonDepth ? json(nullptr)
                                                              : json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("plan_version", 0) != kPlanVersion ||
      !j.contains("result") || !j.contains("fingerprint"))
    throw harness::UsageError("'" + p.string() + "' is not a plan parity wrote (or a newer one); plan "
                     "the matrix again");
  return j;
}

}  // namespace

int matrix_plan_command(PlanJob& o) {
  const auto m = reports::load_matrix(o.file);
  add_injections(o.inject, o.run);
  reports::MatrixResult r = detail::prepare_cells(m, o.run);
  const fs::path out = fs::absolute(o.run.out_dir);
  if (fs::exists(out) && !fs::is_directory(out))
    throw harness::UsageError("--out '" + o.run.out_dir + "' is a file; give a directory");
  if (fs::exists(out / "plan.json")) {
    const json old = read_plan(out.string());
    if (old["fingerprint"] != fingerprint(r))
      throw harness::UsageError("--out '" + o.run.out_dir + "' holds the plan of another matrix ('" +
                       old["fingerprint"].value("matrix", std::string("?")) +
                       "', or other cells); give a new directory");
  } else if (fs::exists(out) && !fs::is_empty(out)) {
    throw harness::UsageError("--out '" + o.run.out_dir + "' is not empty and holds no plan; give a new "
                     "or empty directory");
  }
  std::error_code ec;
  fs::create_directories(out / "seeds", ec);
  fs::create_directories(out / "cells", ec);
  if (ec) throw harness::UsageError("cannot create '" + o.run.out_dir + "': " + ec.message());

  const std::string self = detail::self_binary();
  std::map<std::string, std::string> seeds;
  for (const auto& c : r.cells) {
    const std::string shape = c.cell.batch_shape();
    if (seeds.count(shape)) continue;
    const fs::path file = out / "seeds" / (shape + ".h5");
    const fs::path log = out / "seeds" / (shape + ".log");
    if (!fs::exists(file)) {
      const int code = detail::run_seed_init(
          {self, "init", "--flavor", spec::to_string(c.cell.flavor), "--seed", std::to_string(c.cell.seed),
           "--out", file.string()},
          log);
      if (code != 0)
        throw std::runtime_error("the seed checkpoint " + shape + " could not be made: " +
                                 detail::last_error(log));
    }
    seeds[shape] = file.string();
    std::cerr << "matrix plan " << m.name << ": seed checkpoint " << shape << "\n";
  }
  std::string commands;
  json lines = json::array();
  for (const auto& c : r.cells) {
    const fs::path dir = out / "cells" / c.cell.name;
    fs::create_directories(dir, ec);
    const auto args = detail::cell_command(c.cell, self, seeds[c.cell.batch_shape()], dir,
                                                  o.run.tokens);
    const std::string q = harness::shell_quote(dir.string());
    std::string script =
        "#!/bin/sh\n"
        "# parity matrix plan: cell " + c.cell.name + " of matrix " + m.name + ". Any scheduler "
        "may run it, once, where\n# these paths are visible; `parity matrix judge " +
        out.string() + "` reads what it leaves.\n"
        "rm -rf " + q + "/dump " + q + "/exit_status\n" +
        sh_line(args) + " > " + q + "/log.txt 2>&1\n"
        "status=$?\n"
        "echo $status > " + q + "/exit_status.tmp && mv " + q + "/exit_status.tmp " + q +
        "/exit_status\n"
        "exit $status\n";
    dumps::write_file_atomically((dir / "run.sh").string(), script);
    const std::string line = "sh " + harness::shell_quote((dir / "run.sh").string());
    commands += line + "\n";
    lines.push_back(line);
  }
  dumps::write_file_atomically((out / "commands.txt").string(), commands);
  const json plan = {{"plan_version", kPlanVersion},
                     {"fingerprint", fingerprint(r)},
                     {"source", m.source},
                     {"commands", lines},
                     {"result", reports::to_json(r)}};
  dumps::write_file_atomically((out / "plan.json").string(), plan.dump(1) + "\n");
  std::cout << "planned " << r.cells.size() << " cells of matrix " << m.name << " in "
            << out.string() << "\n"
            << "run the lines of " << (out / "commands.txt").string()
            << " (any order, any scheduler), e.g.\n"
            << "  xargs -P 2 -d '\\n' -n 1 sh -c < " << (out / "commands.txt").string() << "\n"
            << "then: parity matrix judge " << out.string() << "\n";
  return 0;
}

int matrix_judge_command(const JudgeJob& o) {
  if (!o.junit.empty()) harness::check_output_file("--junit", o.junit);
  if (!o.markdown.empty()) harness::check_output_file("--markdown", o.markdown);
  const json plan = read_plan(o.dir);
  reports::MatrixResult r = reports::from_json(plan["result"]);
  if (!o.matrix.empty()) {
    const auto m = reports::load_matrix(o.matrix);
    if (m.name != r.matrix)
      throw harness::UsageError("'" + o.dir + "' is a plan of matrix '" + r.matrix + "' (" +
                       plan.value("source", std::string("?")) + "), not of '" + m.name + "'");
  }
  const fs::path cells = fs::path(o.dir) / "cells";
  int not_run = 0;
  for (auto& c : r.cells) {
    const fs::path dir = cells / c.cell.name;
    std::ifstream status_file(dir / "exit_status");
    int code = -1;
    if (!(status_file >> code)) {
      c.status = "not run";
      c.error = "its command has not run or not ended: sh '" + (dir / "run.sh").string() + "'";
      ++not_run;
      continue;
    }
    detail::collect(c, dir);
    c.warnings = detail::warnings(dir / "log.txt");
    const bool all_steps = static_cast<int64_t>(c.steps.size()) == c.cell.steps;
    c.status = code == 0 && all_steps ? "ok" : "failed";
    if (code != 0) {
      const std::string why = detail::last_error(dir / "log.txt");
      c.error = (code > 128 ? "killed by signal " + std::to_string(code - 128)
                            : "exit " + std::to_string(code)) +
                (why.empty() ? "" : ": " + why);
    } else if (!all_steps) {
      c.error = "logged " + std::to_string(c.steps.size()) + " of " +
                std::to_string(c.cell.steps) + " steps (see " + c.log + ")";
    }
  }
  judge_cells(r, cells);
  reports::write_results(o.dir, r);
  write_reports(o.dir, r, nullptr);
  write_side_reports(r, o.junit, o.markdown);
  std::cout << reports::render_text(r);
  if (not_run > 0 && !o.quiet)
    std::cerr << "parity matrix judge: " << not_run << " of " << r.cells.size()
              << " cells have not run; run their lines of "
              << (fs::path(o.dir) / "commands.txt").string() << "\n";
  return r.complete() && r.gates_ok() ? 0 : 1;
}

}  // namespace parity::matrix
