// parity matrix run FILE --out DIR: every cell of a matrix, then the drift tables and the
// verdict summary. parity report DIR: the same result rendered again, in any format.
// (DESIGN.md section 7.)
//
// Exit codes: 0 every cell ran and every gate passed, 1 otherwise, 2 bad input.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/matrix_runner.h"
#include "reports/history.h"
#include "reports/matrix.h"
#include "reports/render.h"

namespace parity::cli {

namespace fs = std::filesystem;

namespace {

struct MatrixOptions {
  std::string file;
  MatrixRunOptions run;
  std::vector<std::string> inject;  // CELL=SPEC
  std::string history;
  int last = 10;
};

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p);
  out << text;
  if (!out.flush()) throw UsageError("cannot write '" + p.string() + "'");
}

// Every rendering beside results.json, so that a run directory is a report on its own.
void write_reports(const std::string& dir, const reports::MatrixResult& r,
                   const reports::Trend* trend) {
  write_file(fs::path(dir) / "report.txt", reports::render_text(r, trend));
  write_file(fs::path(dir) / "report.md", reports::render_markdown(r, trend));
  write_file(fs::path(dir) / "report.json", reports::render_json(r, trend).dump(1) + "\n");
  write_file(fs::path(dir) / "report.csv", reports::render_csv(r));
  write_file(fs::path(dir) / "report.html", reports::render_html(r, trend));
}

int run_matrix_command(MatrixOptions& o) {
  const auto m = reports::load_matrix(o.file);
  for (const auto& spec : o.inject) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError("--inject '" + spec + "': expected CELL=KIND:block=B,stage=S");
    o.run.inject.push_back({spec.substr(0, eq), spec.substr(eq + 1)});
  }
  if (o.run.jobs <= 0) o.run.jobs = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  o.run.on_start = [&](const reports::MatrixResult& r) {
    if (!o.run.quiet)
      std::cerr << "matrix " << m.name << " (" << m.source << "): " << r.cells.size()
                << " cells, " << o.run.jobs << " cores, into " << o.run.out_dir << "\n";
  };
  const auto r = run_matrix(m, o.run);
  std::unique_ptr<reports::Trend> trend;
  if (!o.history.empty()) {
    reports::append_history(o.history, r);
    trend = std::make_unique<reports::Trend>(reports::trend(reports::read_history(o.history, o.last)));
  }
  write_reports(o.run.out_dir, r, trend.get());
  std::cout << reports::render_text(r, trend.get());
  std::cout << "HTML report: " << (fs::absolute(o.run.out_dir) / "report.html").string() << "\n";
  return r.complete() && r.gates_ok() ? 0 : 1;
}

struct ReportOptions {
  std::string dir;
  std::string format = "txt";
  std::string out;
  std::string history;
  int last = 10;
};

int run_report(const ReportOptions& o) {
  const auto r = reports::read_results(o.dir);
  std::unique_ptr<reports::Trend> trend;
  if (!o.history.empty()) {
    if (!fs::exists(o.history))
      throw UsageError("--history '" + o.history + "' does not exist; give the file a "
                       "`parity matrix run --history` appended to");
    trend = std::make_unique<reports::Trend>(reports::trend(reports::read_history(o.history, o.last)));
  }
  std::string text;
  if (o.format == "txt") text = reports::render_text(r, trend.get());
  else if (o.format == "md") text = reports::render_markdown(r, trend.get());
  else if (o.format == "json") text = reports::render_json(r, trend.get()).dump(1) + "\n";
  else if (o.format == "csv") text = reports::render_csv(r);
  else if (o.format == "html") text = reports::render_html(r, trend.get());
  if (o.out.empty())
    std::cout << text;
  else
    write_file(o.out, text);
  return r.complete() && r.gates_ok() ? 0 : 1;
}

void add_run_matrix_options(CLI::App& cmd, MatrixRunOptions& o) {
  cmd.add_option("--jobs", o.jobs, "cores to keep busy (default: all)");
  cmd.add_option("--cell-timeout-s", o.cell_timeout_s, "stop a cell that runs longer (0: never)")
      ->capture_default_str();
  cmd.add_flag("--quiet", o.quiet, "no progress lines");
}

}  // namespace

Command add_matrix_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("matrix", "run a matrix of cells against their references");
  cmd->require_subcommand(1);
  auto* run = cmd->add_subcommand("run", "run every cell, compare step 1, print the report");
  auto o = std::make_shared<MatrixOptions>();
  o->run.jobs = 0;
  run->add_option("file", o->file, "matrix file (TOML), or a shipped one: quick, seed")->required();
  run->add_option("--out", o->run.out_dir, "directory for the cells' runs and the reports")
      ->required();
  add_run_matrix_options(*run, o->run);
  run->add_option("--only", o->run.only, "run only these cells (and their references)")
      ->delimiter(',');
  run->add_option("--steps", o->run.steps, "override every cell's step count");
  run->add_option("--device", o->run.device, "run every cell on this device (cpu, cuda)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  run->add_option("--tokens", o->run.tokens, "every cell reads this token file (train --tokens)");
  run->add_option("--inject", o->inject, "CELL=KIND:block=B,stage=S: a routing fault in a cell");
  run->add_option("--history", o->history, "append the result to this JSONL history and show "
                                           "the trend");
  run->add_option("--last", o->last, "runs of history to show")->capture_default_str();
  return {cmd, [o] { return run_matrix_command(*o); }};
}

Command add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "render a matrix run's result");
  auto o = std::make_shared<ReportOptions>();
  cmd->add_option("dir", o->dir, "the --out directory of `parity matrix run`")->required();
  cmd->add_option("--format", o->format, "txt, md, json, csv or html")
      ->check(CLI::IsMember({"txt", "md", "json", "csv", "html"}))
      ->capture_default_str();
  cmd->add_option("--out", o->out, "write to this file instead of standard output");
  cmd->add_option("--history", o->history, "a history file: add the trend of its last runs");
  cmd->add_option("--last", o->last, "runs of history to show")->capture_default_str();
  return {cmd, [o] { return run_report(*o); }};
}

}  // namespace parity::cli
