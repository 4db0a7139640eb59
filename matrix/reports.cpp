#include "matrix/reports.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "dumps/temp_files.h"
#include "harness/errors.h"
#include "harness/validate.h"
#include "reports/history.h"
#include "reports/matrix.h"
#include "reports/drift.h"
#include "reports/render.h"

namespace parity::matrix {

namespace fs = std::filesystem;

namespace {

void write_file(const fs::path& p, const std::string& text) {
  try {
    dumps::write_file_atomically(p.string(), text);
  } catch (const std::exception& e) {
    throw harness::UsageError(std::string(e.what()) + "; give a path you can write");
  }
}

}  // namespace

void write_reports(const std::string& dir, const reports::MatrixResult& r,
                   const reports::Trend* trend) {
  write_file(fs::path(dir) / "report.txt", reports::render_text(r, trend));
  write_file(fs::path(dir) / "report.md", reports::render_markdown(r, trend));
  write_file(fs::path(dir) / "report.json", reports::render_json(r, trend).dump(1) + "\n");
  write_file(fs::path(dir) / "report.csv", reports::render_csv(r));
  write_file(fs::path(dir) / "report.html", reports::render_html(r, trend));
}

void add_injections(const std::vector<std::string>& specs, MatrixRunOptions& run) {
  for (const auto& spec : specs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      throw harness::UsageError("--inject '" + spec + "': expected CELL=KIND:block=B,stage=S");
    run.inject.push_back({spec.substr(0, eq), spec.substr(eq + 1)});
  }
}

std::vector<dumps::JunitCase> junit_cases(const reports::MatrixResult& r) {
  std::vector<dumps::JunitCase> cases;
  const auto rows = reports::summary_rows(r);
  for (size_t i = 0; i < r.cells.size(); ++i) {
    const auto& c = r.cells[i];
    dumps::JunitCase jc;
    jc.classname = "parity.matrix." + r.matrix;
    jc.name = c.cell.name;
    jc.seconds = c.wall_seconds;
    const std::string verdict = rows[i].verdict;
    if (c.status == "not run") {
      jc.outcome = dumps::JunitCase::Failed;
      jc.message = "not run" + (c.error.empty() ? "" : ": " + c.error);
    } else if (!c.ok()) {
      jc.outcome = dumps::JunitCase::Failed;
      jc.message = "failed: " + c.error;
    } else if (!c.gate.passed) {
      jc.outcome = dumps::JunitCase::Failed;
      jc.message = "gate " + std::string(reports::to_string(c.gate.gate)) + " failed: " + c.gate.why;
    }
    jc.detail = "step 1: " + verdict + (rows[i].note.empty() ? "" : "\n" + rows[i].note);
    cases.push_back(jc);
  }
  return cases;
}

void write_side_reports(const reports::MatrixResult& r, const std::string& junit,
                        const std::string& markdown) {
  try {
    if (!junit.empty()) dumps::write_junit(junit, {{"parity.matrix." + r.matrix, junit_cases(r)}});
  } catch (const std::exception& e) {
    throw harness::UsageError(std::string(e.what()) + "; give a --junit path you can write");
  }
  if (!markdown.empty()) write_file(markdown, reports::render_markdown(r));
}

int matrix_run_command(MatrixJob& o) {
  if (!o.history.empty()) harness::check_output_file("--history", o.history);  // before any cell runs
  if (!o.junit.empty()) harness::check_output_file("--junit", o.junit);
  if (!o.markdown.empty()) harness::check_output_file("--markdown", o.markdown);
  const auto m = reports::load_matrix(o.file);
  add_injections(o.inject, o.run);
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
  write_side_reports(r, o.junit, o.markdown);
  std::cout << reports::render_text(r, trend.get());
  std::cout << "HTML report: " << (fs::absolute(o.run.out_dir) / "report.html").string() << "\n";
  return r.complete() && r.gates_ok() ? 0 : 1;
}

int report_command(const ReportJob& o) {
  if (!o.out.empty()) harness::check_output_file("--out", o.out);
  const auto r = reports::read_results(o.dir);
  std::unique_ptr<reports::Trend> trend;
  if (!o.history.empty()) {
    if (!fs::exists(o.history))
      throw harness::UsageError("--history '" + o.history + "' does not exist; give the file a "
                       "`parity matrix run --history` appended to");
    trend = std::make_unique<reports::Trend>(reports::trend(reports::read_history(o.history, o.last)));
  }
  std::string text;
  switch (o.format) {
    case spec::ReportFormat::Txt: text = reports::render_text(r, trend.get()); break;
    case spec::ReportFormat::Md: text = reports::render_markdown(r, trend.get()); break;
    case spec::ReportFormat::Json: text = reports::render_json(r, trend.get()).dump(1) + "\n"; break;
    case spec::ReportFormat::Csv: text = reports::render_csv(r); break;
    case spec::ReportFormat::Html: text = reports::render_html(r, trend.get()); break;
  }
  if (o.out.empty())
    std::cout << text;
  else
    write_file(o.out, text);
  return r.complete() && r.gates_ok() ? 0 : 1;
}

}  // namespace parity::matrix
