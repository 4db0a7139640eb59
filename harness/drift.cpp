#include "harness/drift.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>

#include "dumps/junit.h"
#include "dumps/temp_files.h"
#include "dumps/training_log.h"
#include "harness/errors.h"
#include "harness/observers.h"
#include "harness/validate.h"
#include "reports/drift.h"
#include "reports/render.h"

namespace parity::harness {

namespace fs = std::filesystem;

namespace {

reports::CellResult as_cell(const dumps::TrainingLog& log, const std::string& name,
                            const std::string& label, const std::string& reference) {
  reports::CellResult c;
  c.cell.name = name;
  c.cell.label = label;
  c.cell.reference = reference;
  c.cell.steps = log.steps.empty() ? 0 : log.steps.back().step;
  c.status = "ok";
  c.steps.reserve(log.steps.size());
  for (const auto& s : log.steps) {
    reports::StepPoint p;
    p.step = s.step;
    p.loss = s.loss;
    p.grad_norm = s.grad_norm;
    p.loss_hex = hex_float(s.loss);
    p.grad_norm_hex = hex_float(s.grad_norm);
    c.steps.push_back(p);
  }
  return c;
}

std::vector<int64_t> report_steps(const DriftJob& o, const reports::CellResult& ref,
                                  const std::string& ref_path) {
  const int64_t last = ref.steps.back().step;  // steps ascend (CellResult::steps)
  if (!o.steps.empty()) {
    for (auto s : o.steps)
      if (!ref.at(s)) {
        std::vector<int64_t> logged;
        for (const auto& p : ref.steps) logged.push_back(p.step);
        throw UsageError("--steps: the reference '" + ref_path + "' logs no step " +
                         std::to_string(s) + " (it logs " + step_ranges(logged) + ")");
      }
    return o.steps;
  }
  std::vector<int64_t> steps;
  for (int64_t s : {1, 10, 50, 100})
    if (s <= last && ref.at(s)) steps.push_back(s);
  if (steps.empty() || steps.back() != last) steps.push_back(last);
  return steps;
}

// The runs lacking a grad norm print n/a where it would be.
void blank_grad_norms(reports::DriftRow& row, bool cell_has, bool ref_has) {
  if (cell_has && ref_has) return;
  for (auto& v : row.grad_norm) {
    if (!cell_has) v.value.clear();
    if (!row.reference || !cell_has) v.change = "n/a";
  }
  if (!row.reference) row.grad_norm_same = {0, 0, cell_has ? "the reference logs no grad norm"
                                                            : "no grad norm logged"};
}

}  // namespace

std::string step_ranges(const std::vector<int64_t>& steps) {
  std::string s;
  for (size_t i = 0; i < steps.size();) {
    size_t j = i;
    while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + std::to_string(steps[i]) +
         (j > i ? "-" + std::to_string(steps[j]) : "");
    i = j + 1;
  }
  return s;
}

int drift_command(const DriftJob& o) {
  if (!o.out.empty()) check_output_file("--out", o.out);
  if (!o.junit.empty()) check_output_file("--junit", o.junit);
  std::vector<std::string> paths = {o.reference};
  paths.insert(paths.end(), o.cells.begin(), o.cells.end());
  if (!o.labels.empty() && o.labels.size() != paths.size())
    throw UsageError("--labels: " + std::to_string(o.labels.size()) + " label(s) for " +
                     std::to_string(paths.size()) + " logs; give one per log, the reference's first");
  std::vector<dumps::TrainingLog> logs;
  for (const auto& p : paths) logs.push_back(dumps::read_training_log(p));

  // Names: the file names, made unique.
  std::vector<std::string> names;
  std::set<std::string> taken;
  for (const auto& p : paths) {
    std::string base = fs::path(p).filename().string(), name = base;
    for (int k = 2; taken.count(name); ++k) name = base + "#" + std::to_string(k);
    taken.insert(name);
    names.push_back(name);
  }
  reports::MatrixResult runs;
  runs.matrix = "drift";
  for (size_t i = 0; i < logs.size(); ++i)
    runs.cells.push_back(as_cell(logs[i], names[i], o.labels.empty() ? names[i] : o.labels[i],
                                 i == 0 ? "" : names[0]));
  const reports::CellResult& ref = runs.cells[0];
  runs.report_steps = report_steps(o, ref, paths[0]);

  reports::DriftTable t;
  t.reference = names[0];
  t.steps = runs.report_steps;
  t.title = "reference: " + ref.cell.label + " (" + paths[0] + ", " + logs[0].format + " log, " +
            std::to_string(logs[0].steps.size()) + " steps)";
  std::vector<dumps::JunitCase> cases;
  int lacking = 0;
  for (size_t i = 0; i < runs.cells.size(); ++i) {
    const auto& c = runs.cells[i];
    auto row = reports::drift_row(c, i == 0 ? nullptr : &ref, t.steps);
    blank_grad_norms(row, logs[i].has_grad_norm, logs[0].has_grad_norm);
    if (i > 0) {
      std::vector<int64_t> missing;
      for (const auto& s : ref.steps)
        if (!c.at(s.step)) missing.push_back(s.step);
      dumps::JunitCase jc{"parity.drift", c.cell.label, 0, dumps::JunitCase::Passed, "", ""};
      if (!missing.empty()) {
        ++lacking;
        const std::string line = "cell '" + c.cell.label + "' (" + paths[i] + ") lacks " +
                                 std::to_string(missing.size()) + " of the reference's " +
                                 std::to_string(ref.steps.size()) + " steps: " +
                                 step_ranges(missing);
        std::cerr << "parity drift: " << line << "\n";
        jc.outcome = dumps::JunitCase::Failed;
        jc.message = line;
      }
      jc.detail = "loss: " + row.loss_same.text + "\ngrad norm: " + row.grad_norm_same.text;
      cases.push_back(jc);
    }
    t.rows.push_back(std::move(row));
  }
  for (size_t i = 0; i < o.footnotes.size(); ++i)
    t.footnotes.push_back({static_cast<int>(i) + 1, o.footnotes[i]});

  std::string text;
  switch (o.format) {
    case spec::ReportFormat::Txt: text = reports::drift_table_text(t); break;
    case spec::ReportFormat::Md: text = reports::drift_table_markdown(t); break;
    case spec::ReportFormat::Json: text = reports::drift_table_json(t).dump(1) + "\n"; break;
    case spec::ReportFormat::Csv: text = reports::drift_table_csv(t); break;
    case spec::ReportFormat::Html: text = reports::render_drift_html(t, runs); break;
  }
  if (o.out.empty())
    std::cout << text;
  else
    dumps::write_file_atomically(o.out, text);
  if (!o.junit.empty()) dumps::write_junit(o.junit, {{"parity.drift", cases}});
  return lacking == 0 ? 0 : 1;
}

}  // namespace parity::harness
