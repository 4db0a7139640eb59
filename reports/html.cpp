// render_html (render.h): one self-contained HTML5 page. Inline CSS, inline SVG, no script and
// no URL of any kind, so the page opens the same from a CI artifact, a mail or a file. The
// sections, in order: header, drift tables, plots, ulp histograms, summary, layouts, history.
// The plots, histograms and layouts live in html_plots.cpp and html_layout.cpp.
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "reports/drift.h"
#include "reports/html_sections.h"
#include "reports/render.h"
#include "reports/svg.h"

namespace parity::reports {
namespace {

using svg::escape;

constexpr const char* kStyle = R"(
body { font-family: sans-serif; font-size: 14px; color: #222; margin: 20px 28px;
       max-width: 1500px; }
h1 { font-size: 22px; margin-bottom: 6px; }
h2 { font-size: 18px; margin-top: 30px; border-bottom: 1px solid #ccc; padding-bottom: 3px; }
h3 { font-size: 14px; margin: 18px 0 4px; }
table { border-collapse: collapse; font-size: 12px; margin: 6px 0; }
th, td { border: 1px solid #d0d0d0; padding: 3px 6px; text-align: right; vertical-align: top; }
th { background: #f3f3f3; text-align: center; }
.label { text-align: left; white-space: nowrap; }
.text { text-align: left; max-width: 260px; font-size: 11px; }
table.meta td, table.meta th { border: none; text-align: left; padding: 1px 10px 1px 0; }
code { font-family: monospace; }
.same { color: #1a7f37; }
.diff { color: #b35900; }
.na { color: #888; }
tr.failed td, tr.gatefail td { background: #fdecea; }
td.fail, .v-WRONG, .v-FAILED { color: #b00020; font-weight: bold; }
.v-ORDER-ONLY, .v-DIFFERS { color: #b35900; }
.v-EXACT, .v-BITWISE { color: #1a7f37; }
tr.changed td { background: #fff4c2; }
.marker { background: #e0a800; color: #000; font-size: 10px; padding: 0 4px; margin-left: 6px;
          border-radius: 3px; }
.footer { font-family: monospace; font-size: 14px; font-weight: bold; padding: 6px 10px;
          display: inline-block; }
.footer.ok { background: #e6f4ea; color: #1a7f37; }
.footer.failed { background: #fdecea; color: #b00020; }
.notes { font-size: 12px; color: #333; margin: 4px 0 0 0; padding-left: 18px; }
figure { margin: 12px 0 18px; }
figcaption { font-size: 12px; color: #444; max-width: 1000px; }
svg { display: block; max-width: 100%; height: auto; }
.charts { display: flex; flex-wrap: wrap; column-gap: 24px; }
.charts figure { margin: 6px 0; }
.charts figcaption { max-width: 560px; }
)";

std::string td(const std::string& cls, const std::string& html) {
  return "<td class=\"" + cls + "\">" + html + "</td>";
}

std::string duration(double seconds) {
  char buf[64];
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  } else {
    auto s = static_cast<long long>(std::llround(seconds));
    if (s >= 3600)
      std::snprintf(buf, sizeof buf, "%lld h %02lld min %02lld s", s / 3600, s / 60 % 60, s % 60);
    else
      std::snprintf(buf, sizeof buf, "%lld min %02lld s", s / 60, s % 60);
  }
  return buf;
}

// Bytes in binary units: "812 B", "1.5 KiB", "3.0 MiB"; "-" when unknown (negative).
std::string bytes(int64_t n) {
  if (n < 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return u == 0 ? std::to_string(n) + " B" : svg::fixed(v, 1) + " " + units[u];
}

std::string count_or_dash(int n) { return n < 0 ? "-" : std::to_string(n); }

std::string header(const MatrixResult& r) {
  std::string s = "<h1>parity matrix: " + escape(r.matrix) + "</h1>\n<table class=\"meta\">\n";
  auto row = [&](const char* k, const std::string& v) {
    s += std::string("<tr><th>") + k + "</th><td>" + escape(v) + "</td></tr>\n";
  };
  row("source", r.source);
  row("git sha", r.git_sha);
  row("started", r.started);
  row("wall time", duration(r.wall_seconds));
  row("cells", std::to_string(r.cells.size()));
  s += "</table>\n";
  std::string f = footer(r);
  bool ok = f.rfind("OK", 0) == 0;
  s += std::string("<p class=\"footer ") + (ok ? "ok" : "failed") + "\">" + escape(f) + "</p>\n";
  std::string failed;
  for (const auto& c : r.cells)
    if (!c.ok()) {
      failed += "<li><b>" + escape(c.cell.name) + "</b> (" + escape(c.status) + ")";
      if (!c.error.empty()) failed += ": " + escape(c.error);
      if (!c.log.empty()) failed += " &mdash; log <code>" + escape(c.log) + "</code>";
      failed += "</li>\n";
    }
  if (!failed.empty())
    s += "<p>Cells that did not finish:</p>\n<ul class=\"notes\">\n" + failed + "</ul>\n";
  return s;
}

std::string change_cell(const DriftValue& v) {
  std::string html =
      v.value.empty() ? "<span class=\"na\">-</span>" : "<code>" + escape(v.value) + "</code>";
  if (!v.change.empty()) {
    const char* cls = v.change == "identical" ? "same" : v.change == "n/a" ? "na" : "diff";
    html += std::string("<br><span class=\"") + cls + "\">" + escape(v.change) + "</span>";
  }
  return td("", html);
}

std::string drift_table(const DriftTable& t, size_t index) {
  const size_t n = t.steps.size();
  std::string s = "<h3>Table " + std::to_string(index + 1) + ": reference " + escape(t.reference) +
                  " &mdash; " + escape(t.title) + "</h3>\n<table>\n";
  s += "<tr><th class=\"label\" rowspan=\"2\">cell</th><th colspan=\"" + std::to_string(n) +
       "\">loss</th><th colspan=\"" + std::to_string(n) +
       "\">grad norm</th><th colspan=\"2\">bitwise identical steps</th></tr>\n<tr>";
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t step : t.steps) s += "<th>step " + std::to_string(step) + "</th>";
  s += "<th>loss</th><th>grad norm</th></tr>\n";
  for (const auto& row : t.rows) {
    // The label, and the cell's name under it when the label does not start with it.
    std::string label = escape(row.label.empty() ? row.cell : row.label);
    if (!row.label.empty() && row.label.rfind(row.cell, 0) != 0)
      label += "<br><span class=\"na\">" + escape(row.cell) + "</span>";
    if (row.status != "ok") {
      const std::string span = std::to_string(2 * n + 2);
      s += "<tr class=\"failed\">" + td("label", label) + "<td class=\"text fail\" colspan=\"" +
           span + "\">" + escape(row.status) + "</td></tr>\n";
      continue;
    }
    s += "<tr>" + td("label", label);
    for (size_t i = 0; i < n; ++i)
      s += i < row.loss.size() ? change_cell(row.loss[i]) : td("na", "-");
    for (size_t i = 0; i < n; ++i)
      s += i < row.grad_norm.size() ? change_cell(row.grad_norm[i]) : td("na", "-");
    s += td("text", escape(row.loss_same.text)) + td("text", escape(row.grad_norm_same.text));
    s += "</tr>\n";
  }
  s += "</table>\n";
  if (!t.footnotes.empty()) {
    s += "<ul class=\"notes\" style=\"list-style: none; padding-left: 0\">\n";
    for (const auto& f : t.footnotes)
      s += "<li>[" + std::to_string(f.number) + "] " + escape(f.text) + "</li>\n";
    s += "</ul>\n";
  }
  return s;
}

std::string summary(const MatrixResult& r) {
  std::string s =
      "<h2>Summary</h2>\n<table>\n<tr><th class=\"label\">cell</th><th>verdict</th>"
      "<th>#wrong</th><th>max ulp</th><th>EXACT</th><th>ORDER-ONLY</th>"
      "<th>WRONG</th><th>s/step</th><th>fwd bytes/mb</th><th>bwd bytes/mb</th>"
      "<th>gate</th><th class=\"label\">note</th></tr>\n";
  for (const auto& row : summary_rows(r)) {
    bool fail = row.gate == "FAIL";
    s += fail ? "<tr class=\"gatefail\">" : "<tr>";
    s += td("label", escape(row.cell));
    s += td("v-" + escape(row.verdict), escape(row.verdict));
    s += td("", escape(row.wrong)) + td("", escape(row.max_ulp));
    s += td("", count_or_dash(row.exact)) + td("", count_or_dash(row.order_only)) +
         td("", count_or_dash(row.wrong_verdicts));
    s += td("", row.seconds_per_step > 0 ? svg::fixed(row.seconds_per_step, 3) : "-");
    s += td("", bytes(row.bytes_forward_per_mb)) + td("", bytes(row.bytes_backward_per_mb));
    s += td(fail ? "fail" : "", escape(row.gate)) + td("text", escape(row.note));
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

std::string drift_pct(const std::optional<double>& v) {
  if (!v) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f%%", *v);
  return buf;
}

std::string history(const Trend& t) {
  std::string s = "<h2>History</h2>\n<p>The last " + std::to_string(t.runs.size()) +
                  " runs, oldest first: the verdict at step 1 and the final loss's drift "
                  "against the reference. ";
  s += std::to_string(t.changed()) + " cell(s) changed verdict between consecutive runs.</p>\n";
  s += "<table>\n<tr><th class=\"label\">cell</th>";
  for (const auto& run : t.runs)
    s += "<th>" + escape(run.started) + "<br><code>" + escape(run.git_sha.substr(0, 7)) +
         "</code></th>";
  s += "</tr>\n";
  for (const auto& row : t.rows) {
    s += row.changed ? "<tr class=\"changed\">" : "<tr>";
    std::string name = escape(row.cell);
    if (row.changed) name += "<span class=\"marker\">changed</span>";
    s += td("label", name);
    for (size_t i = 0; i < t.runs.size(); ++i) {
      std::string verdict = i < row.verdicts.size() ? row.verdicts[i] : "";
      std::string drift = i < row.drift_pct.size() ? drift_pct(row.drift_pct[i]) : "";
      std::string html = verdict.empty() ? "<span class=\"na\">-</span>"
                                         : "<span class=\"v-" + escape(verdict) + "\">" +
                                               escape(verdict) + "</span>";
      if (!drift.empty()) html += "<br><code>" + escape(drift) + "</code>";
      s += td("", html);
    }
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

}  // namespace

std::string render_html(const MatrixResult& r, const Trend* trend) {
  std::vector<DriftTable> tables = drift_tables(r);
  std::string s =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>parity: " +
      escape(r.matrix) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  s += header(r);
  s += "<h2>Drift against the reference</h2>\n<p>Per report step the raw value (loss with 6 "
       "decimals, grad norm with 4), then <span class=\"same\">identical</span> when it prints "
       "as the reference does, else the signed change.</p>\n";
  for (size_t i = 0; i < tables.size(); ++i) s += drift_table(tables[i], i);
  s += html::plots_section(r, tables);
  s += html::ulp_section(r);
  s += summary(r);
  s += html::layout_section(r);
  if (trend && !trend->runs.empty()) s += history(*trend);
  s += "</body>\n</html>\n";
  return s;
}

std::string render_drift_html(const DriftTable& t, const MatrixResult& runs) {
  std::string s =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>parity drift: " +
      escape(t.reference) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  s += "<h1>parity drift</h1>\n<p>Per report step the raw value (loss with 6 decimals, grad norm "
       "with 4), then <span class=\"same\">identical</span> when it prints as the reference "
       "does, else the signed change.</p>\n";
  s += drift_table(t, 0);
  s += html::plots_section(runs, {t});
  s += "</body>\n</html>\n";
  return s;
}

}  // namespace parity::reports
