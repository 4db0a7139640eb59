// The report's plots (html_sections.h): loss curves and |delta| against the reference per drift
// table, and the per-tensor ulp histograms at step 1.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "reports/html_sections.h"
#include "reports/svg.h"

namespace parity::reports::html {
namespace {

using svg::escape;

std::string figure(const std::string& svg_text, const std::string& caption_html) {
  return "<figure>\n" + svg_text + "<figcaption>" + caption_html + "</figcaption>\n</figure>\n";
}

// The cells of one drift table that exist in the result, the reference first.
std::vector<const CellResult*> table_cells(const MatrixResult& r, const DriftTable& t) {
  std::vector<const CellResult*> out;
  for (const auto& row : t.rows)
    if (const CellResult* c = r.find(row.cell)) out.push_back(c);
  return out;
}

struct DeltaSeries {
  svg::Series series;
  int64_t shared = 0;  // steps logged by both
  int64_t zero = 0;    // of them, |delta| exactly 0
};

// |metric(cell) - metric(reference)| at every step both logged, in the cell's step order.
// Doubles hold the logged floats exactly, so the difference is 0 exactly when the bits match.
template <class Metric>
DeltaSeries delta(const CellResult& cell, const std::map<int64_t, const StepPoint*>& ref,
                  Metric metric) {
  DeltaSeries d;
  d.series.name = cell.cell.name;
  for (const auto& p : cell.steps) {
    auto it = ref.find(p.step);
    if (it == ref.end()) continue;
    double v = std::fabs(metric(p) - metric(*it->second));
    ++d.shared;
    if (v == 0) ++d.zero;
    d.series.points.push_back({static_cast<double>(p.step), v});
  }
  return d;
}

template <class Metric>
std::string delta_figure(const DriftTable& t, const std::vector<const CellResult*>& cells,
                         const char* what, Metric metric) {
  std::map<int64_t, const StepPoint*> ref;
  for (const auto& p : cells.front()->steps) ref[p.step] = &p;
  svg::LineChart chart;
  chart.title = std::string("|\u0394 ") + what + "| against " + t.reference;
  chart.x_label = "step";
  chart.y_label = std::string("|\u0394 ") + what + "|";
  chart.y_scale = svg::YScale::Log10;
  std::string zeros;
  for (size_t i = 1; i < cells.size(); ++i) {
    if (cells[i]->steps.empty()) continue;
    DeltaSeries d = delta(*cells[i], ref, metric);
    if (!zeros.empty()) zeros += ", ";
    zeros +=
        escape(d.series.name) + " " + std::to_string(d.zero) + " of " + std::to_string(d.shared);
    // A series with nothing to draw still has its legend entry, which says why.
    if (d.shared > 0 && d.zero == d.shared)
      d.series.name += " (all " + std::to_string(d.shared) + " equal)";
    chart.series.push_back(std::move(d.series));
  }
  std::string caption = "Log scale. Steps where the " + std::string(what) +
                        " is bitwise equal to the reference's have |\u0394| = 0 and are not drawn;";
  caption += " exactly zero: " + zeros + " shared steps.";
  return figure(svg::line_chart(chart), caption);
}

}  // namespace

std::string plots_section(const MatrixResult& r, const std::vector<DriftTable>& tables) {
  std::string s = "<h2>Plots</h2>\n";
  for (size_t ti = 0; ti < tables.size(); ++ti) {
    const DriftTable& t = tables[ti];
    std::vector<const CellResult*> cells = table_cells(r, t);
    s += "<h3>Table " + std::to_string(ti + 1) + ": reference " + escape(t.reference) + "</h3>\n";
    svg::LineChart loss;
    loss.title = "loss, table " + std::to_string(ti + 1) + " (" + t.reference + ")";
    loss.x_label = "step";
    loss.y_label = "loss";
    std::vector<std::string> silent;
    for (const CellResult* c : cells) {
      if (c->steps.empty()) {
        silent.push_back(escape(c->cell.name));
        continue;
      }
      svg::Series series{c->cell.name, {}};
      for (const auto& p : c->steps) series.points.push_back({static_cast<double>(p.step), p.loss});
      loss.series.push_back(std::move(series));
    }
    std::string none;
    for (const auto& name : silent) none += (none.empty() ? "" : ", ") + name;
    if (loss.series.empty()) {
      s += "<p>No cell of this table logged a step.</p>\n";
      continue;
    }
    s += figure(svg::line_chart(loss),
                "Loss per logged step, linear scale." +
                    (none.empty() ? std::string() : " No steps logged: " + none + "."));
    bool ref_steps =
        !cells.empty() && cells.front()->cell.name == t.reference && !cells.front()->steps.empty();
    bool others = std::any_of(cells.begin() + (cells.empty() ? 0 : 1), cells.end(),
                              [](const CellResult* c) { return !c->steps.empty(); });
    if (!ref_steps) {
      s += "<p>The reference logged no steps: no |\u0394| plots.</p>\n";
      continue;
    }
    if (!others) continue;
    s += delta_figure(t, cells, "loss", [](const StepPoint& p) { return p.loss; });
    s += delta_figure(t, cells, "grad norm", [](const StepPoint& p) { return p.grad_norm; });
  }
  return s;
}

std::string ulp_section(const MatrixResult& r) {
  std::string s =
      "<h2>Gradient ulp distances at step 1</h2>\n<p>Per gradient tensor, its "
      "largest distance to the reference in units in the last place, bucketed by "
      "powers of two; inf is a NaN/Inf mismatch.</p>\n";
  std::string equal, missing, charts;
  for (const auto& c : r.cells) {
    if (c.cell.reference.empty()) continue;  // a reference is not compared
    if (!c.step1.have) {
      const std::string why = !c.step1.why_not.empty() ? c.step1.why_not
                              : !c.ok()                ? c.status
                                                       : "none recorded";
      missing += (missing.empty() ? "" : "; ") + escape(c.cell.name) + " (" + escape(why) + ")";
      continue;
    }
    bool nonzero = std::any_of(c.step1.grad_ulps.begin(), c.step1.grad_ulps.end(),
                               [](uint64_t u) { return u != 0; });
    if (!nonzero) {
      equal += (equal.empty() ? "" : ", ") + escape(c.cell.name);
      continue;
    }
    svg::UlpBuckets b = svg::ulp_buckets(c.step1.grad_ulps);
    svg::BarChart chart;
    chart.title = c.cell.name + ": per-tensor max ulp at step 1 (" +
                  std::to_string(c.step1.grad_ulps.size()) + " gradient tensors)";
    chart.x_label = "ulp distance";
    chart.y_label = "tensors";
    chart.labels = b.labels;
    chart.counts = b.counts;
    int64_t bitwise = b.counts.front();
    charts +=
        figure(svg::bar_chart(chart),
               escape(c.cell.name) + ": " + std::to_string(bitwise) + " of " +
                   std::to_string(c.step1.grad_ulps.size()) + " gradient tensors bitwise equal; " +
                   std::to_string(c.step1.wrong_tensors) + " of " +
                   std::to_string(c.step1.tensors) + " compared tensors differ (max ulp " +
                   (c.step1.max_ulp == kUlpInfinite ? std::string("inf")
                                                    : std::to_string(c.step1.max_ulp)) +
                   ").");
  }
  if (!charts.empty()) s += "<div class=\"charts\">\n" + charts + "</div>\n";
  if (!equal.empty())
    s += "<p>Every gradient tensor bitwise equal to the reference at step 1: " + equal + ".</p>\n";
  if (!missing.empty()) s += "<p>No step-1 comparison: " + missing + ".</p>\n";
  return s;
}

}  // namespace parity::reports::html
