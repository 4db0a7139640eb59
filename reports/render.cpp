// Text, Markdown, CSV and JSON renderings of a matrix result (render_html is in html.cpp).
#include "reports/render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "reports/drift.h"

namespace parity::reports {

namespace {

using nlohmann::json;

std::string cell_text(const DriftValue& v) {
  if (v.value.empty()) return v.change.empty() ? "-" : v.change;
  return v.change.empty() ? v.value : v.value + " " + v.change;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return s > 0 ? buf : "-";
}

std::string bytes_text(int64_t b) { return b < 0 ? "-" : std::to_string(b); }

// Left-aligned columns, two spaces apart.
std::string columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  std::ostringstream out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  return out.str();
}

std::vector<std::string> header(const DriftTable& t) {
  std::vector<std::string> h = {"cell"};
  for (const char* metric : {"loss", "grad norm"})
    for (size_t i = 0; i < t.steps.size(); ++i)
      h.push_back((i == 0 ? std::string(metric) + ", step " : "step ") + std::to_string(t.steps[i]));
  return h;
}

std::string verdict_counts(const SummaryRow& s, int SummaryRow::*field) {
  return s.*field < 0 ? "-" : std::to_string(s.*field);
}

std::vector<std::vector<std::string>> summary_table(const MatrixResult& r) {
  std::vector<std::vector<std::string>> rows = {
      {"#", "cell", "verdict", "#wrong", "max ulp", "EXACT", "ORDER", "WRONG", "s/step",
       "fwd/mb", "bwd/mb", "gate", "note"},
      {"#", "", "(step 1)", "(tensors)", "", "", "ONLY", "", "(s)", "(bytes)", "(bytes)", "", ""}};
  for (const auto& s : summary_rows(r))
    rows.push_back({"", s.cell, s.verdict, s.wrong, s.max_ulp,
                    verdict_counts(s, &SummaryRow::exact), verdict_counts(s, &SummaryRow::order_only),
                    verdict_counts(s, &SummaryRow::wrong_verdicts), seconds_text(s.seconds_per_step),
                    bytes_text(s.bytes_forward_per_mb), bytes_text(s.bytes_backward_per_mb), s.gate,
                    s.note});
  return rows;
}

std::string drift_text(const std::string& pct) {
  return pct.empty() ? "" : " (" + pct + ")";
}

std::string trend_cell(const TrendRow& row, size_t i) {
  if (row.verdicts[i].empty()) return "-";
  std::string s = row.verdicts[i];
  if (row.drift_pct[i]) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%+.2f%%", *row.drift_pct[i]);
    s += drift_text(*row.drift_pct[i] == 0 ? "identical" : buf);
  }
  return s;
}

std::string run_title(const HistoryEntry& e) {
  return e.started.substr(0, 16) + " " + e.git_sha.substr(0, 8);
}

std::vector<std::vector<std::string>> trend_table(const Trend& t) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> h = {"cell"};
  for (const auto& e : t.runs) h.push_back(run_title(e));
  h.push_back("");
  rows.push_back(h);
  for (const auto& row : t.rows) {
    std::vector<std::string> r = {row.cell};
    for (size_t i = 0; i < t.runs.size(); ++i) r.push_back(trend_cell(row, i));
    r.push_back(row.changed ? "<-- verdict changed" : "");
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

std::string footer(const MatrixResult& r) {
  std::vector<std::string> failed, gates;
  int gated = 0;
  for (const auto& c : r.cells) {
    if (!c.ok()) failed.push_back(c.cell.name);
    if (c.gate.gate != Gate::None) ++gated;
    if (!c.gate.passed) gates.push_back(c.cell.name);
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  const std::string n = std::to_string(r.cells.size());
  if (failed.empty() && gates.empty())
    return "OK: " + n + (r.cells.size() == 1 ? " cell" : " cells") + " run, " +
           std::to_string(gated) + (gated == 1 ? " gate" : " gates") + " passed";
  std::string s = "FAILED:";
  if (!failed.empty())
    s += " " + std::to_string(failed.size()) + " of " + n + " cells failed to run (" +
         list(failed) + ")" + (gates.empty() ? "" : ";");
  if (!gates.empty())
    s += " " + std::to_string(gates.size()) + " of " + std::to_string(gated) +
         " gates failed (" + list(gates) + ")";
  return s;
}

std::string render_text(const MatrixResult& r, const Trend* trend) {
  std::ostringstream out;
  out << "# matrix " << r.matrix << " (" << r.source << "), git " << r.git_sha << ", started "
      << r.started << ", " << seconds_text(r.wall_seconds) << " s\n";
  for (const auto& t : drift_tables(r)) out << drift_table_text(t);
  out << "\n## step 1 against the reference, and the run\n\n" << columns(summary_table(r));
  for (const auto& c : r.cells)
    for (const auto& w : c.warnings) out << "warning: cell " << c.cell.name << ": " << w << "\n";
  if (trend && !trend->runs.empty()) {
    out << "\n## history, last " << trend->runs.size() << " runs: step-1 verdict (final-loss drift)\n\n"
        << columns(trend_table(*trend));
    out << trend->changed() << " cell(s) changed verdict\n";
  }
  out << "\n" << footer(r) << "\n";
  return out.str();
}

std::string render_markdown(const MatrixResult& r, const Trend* trend) {
  std::ostringstream out;
  out << "**parity matrix `" << r.matrix << "`** (" << r.source << "), git `" << r.git_sha
      << "`, started " << r.started << ", " << seconds_text(r.wall_seconds) << " s\n";
  for (const auto& t : drift_tables(r)) out << drift_table_markdown(t);
  const auto rows = summary_table(r);
  out << "\n| " << rows[0][1];
  for (size_t i = 2; i < rows[0].size(); ++i) out << " | " << rows[0][i];
  out << " |\n|";
  for (size_t i = 1; i < rows[0].size(); ++i) out << "---|";
  out << "\n";
  for (size_t k = 2; k < rows.size(); ++k) {
    out << "| " << rows[k][1];
    for (size_t i = 2; i < rows[k].size(); ++i) out << " | " << rows[k][i];
    out << " |\n";
  }
  if (trend && !trend->runs.empty()) {
    const auto tt = trend_table(*trend);
    out << "\nHistory, last " << trend->runs.size() << " runs: step-1 verdict (final-loss drift)\n\n|";
    for (const auto& h : tt[0]) out << " " << h << " |";
    out << "\n|";
    for (size_t i = 0; i < tt[0].size(); ++i) out << "---|";
    out << "\n";
    for (size_t k = 1; k < tt.size(); ++k) {
      out << "|";
      for (const auto& c : tt[k]) out << " " << (c.rfind("<--", 0) == 0 ? "**verdict changed**" : c) << " |";
      out << "\n";
    }
  }
  out << "\n**" << footer(r) << "**\n";
  return out.str();
}

std::string render_csv(const MatrixResult& r) {
  std::ostringstream out;
  out << "cell,reference,step,loss,grad_norm,loss_hex,grad_norm_hex,loss_change_pct,"
         "grad_norm_change_pct,seconds\n";
  auto pct = [](double v, const StepPoint* ref, double StepPoint::*f) -> std::string {
    if (!ref || ref->*f == 0) return "";
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", (v - ref->*f) / std::fabs(ref->*f) * 100.0);
    return buf;
  };
  for (const auto& c : r.cells) {
    const CellResult* ref = c.cell.reference.empty() ? nullptr : r.find(c.cell.reference);
    for (const auto& s : c.steps) {
      const StepPoint* rs = ref ? ref->at(s.step) : nullptr;
      char nums[128];
      std::snprintf(nums, sizeof nums, "%.17g,%.17g", s.loss, s.grad_norm);
      out << c.cell.name << "," << c.cell.reference << "," << s.step << "," << nums << ","
          << s.loss_hex << "," << s.grad_norm_hex << "," << pct(s.loss, rs, &StepPoint::loss)
          << "," << pct(s.grad_norm, rs, &StepPoint::grad_norm) << "," << s.seconds << "\n";
    }
  }
  return out.str();
}

std::string drift_table_text(const DriftTable& t) {
  std::ostringstream out;
  out << "\n## " << t.title << "\n\n";
  std::vector<std::vector<std::string>> rows = {header(t)};
  for (const auto& row : t.rows) {
    std::vector<std::string> line = {row.label};
    if (row.status != "ok") {
      line.push_back(row.status);
    } else {
      for (const auto& v : row.loss) line.push_back(cell_text(v));
      for (const auto& v : row.grad_norm) line.push_back(cell_text(v));
    }
    rows.push_back(line);
  }
  out << columns(rows) << "\n";
  for (const auto& row : t.rows)
    if (!row.reference && row.status == "ok")
      out << row.label << ": loss " << row.loss_same.text << "; grad norm "
          << row.grad_norm_same.text << "\n";
  out << "\n";
  for (const auto& f : t.footnotes) out << "[" << f.number << "] " << f.text << "\n";
  return out.str();
}

std::string drift_table_markdown(const DriftTable& t) {
  std::ostringstream out;
  out << "\n" << t.title << "\n\n|";
  for (const auto& h : header(t)) out << " " << h << " |";
  out << "\n|";
  for (size_t i = 0; i < header(t).size(); ++i) out << "---|";
  out << "\n";
  for (const auto& row : t.rows) {
    out << "| " << row.label << " |";
    if (row.status != "ok") {
      out << " " << row.status << " |";
      for (size_t i = 1; i < 2 * t.steps.size(); ++i) out << " |";
    } else {
      for (const auto* vs : {&row.loss, &row.grad_norm})
        for (const auto& v : *vs)
          out << " " << (v.value.empty() ? "" : "`" + v.value + "`")
              << (v.change.empty() ? "" : (v.value.empty() ? "" : " ") + v.change) << " |";
    }
    out << "\n";
  }
  out << "\n";
  for (const auto& f : t.footnotes) out << "[" << f.number << "] " << f.text << "  \n";
  for (const auto& row : t.rows)
    if (!row.reference && row.status == "ok")
      out << "- " << row.label << ": loss " << row.loss_same.text << "; grad norm "
          << row.grad_norm_same.text << "\n";
  return out.str();
}

json drift_table_json(const DriftTable& t) {
  json rows = json::array();
  for (const auto& row : t.rows) {
    auto values = [&](const std::vector<DriftValue>& vs) {
      json a = json::array();
      for (size_t i = 0; i < vs.size(); ++i)
        a.push_back({{"step", t.steps[i]}, {"value", vs[i].value}, {"change", vs[i].change}});
      return a;
    };
    json jr = {{"cell", row.cell},       {"label", row.label},
               {"reference", row.reference}, {"status", row.status},
               {"loss", values(row.loss)}, {"grad_norm", values(row.grad_norm)}};
    if (!row.reference)
      for (const auto& [name, same] : {std::pair{"loss_identical", &row.loss_same},
                                       std::pair{"grad_norm_identical", &row.grad_norm_same}})
        jr[name] = {{"compared", same->compared}, {"identical", same->identical}, {"text", same->text}};
    rows.push_back(jr);
  }
  json notes = json::array();
  for (const auto& f : t.footnotes) notes.push_back({{"number", f.number}, {"text", f.text}});
  return {{"reference", t.reference}, {"title", t.title}, {"steps", t.steps},
          {"rows", rows}, {"footnotes", notes}};
}

std::string drift_table_csv(const DriftTable& t) {
  auto quoted = [](const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  std::ostringstream out;
  out << "cell,label,reference,metric,step,value,change\n";
  for (const auto& row : t.rows)
    for (const auto& [metric, vs] : {std::pair{"loss", &row.loss}, std::pair{"grad_norm", &row.grad_norm}})
      for (size_t i = 0; i < vs->size(); ++i)
        out << quoted(row.cell) << "," << quoted(row.label) << "," << (row.reference ? 1 : 0)
            << "," << metric << "," << t.steps[i] << "," << (*vs)[i].value << ","
            << (*vs)[i].change << "\n";
  return out.str();
}

json render_json(const MatrixResult& r, const Trend* trend) {
  json tables = json::array();
  for (const auto& t : drift_tables(r)) tables.push_back(drift_table_json(t));
  json summary = json::array();
  for (const auto& s : summary_rows(r)) {
    auto count = [](int v) { return v < 0 ? json(nullptr) : json(v); };
    summary.push_back({{"cell", s.cell},
                       {"verdict", s.verdict},
                       {"wrong_tensors", s.wrong},
                       {"max_ulp", s.max_ulp},
                       {"exact", count(s.exact)},
                       {"order_only", count(s.order_only)},
                       {"wrong", count(s.wrong_verdicts)},
                       {"seconds_per_step", s.seconds_per_step},
                       {"bytes_forward_per_mb", s.bytes_forward_per_mb},
                       {"bytes_backward_per_mb", s.bytes_backward_per_mb},
                       {"gate", s.gate},
                       {"note", s.note}});
  }
  json j = {{"matrix", r.matrix},   {"source", r.source},       {"git_sha", r.git_sha},
            {"started", r.started}, {"wall_seconds", r.wall_seconds}, {"drift_tables", tables},
            {"summary", summary},   {"footer", footer(r)},
            {"ok", r.complete() && r.gates_ok()}, {"result", to_json(r)}};
  if (trend && !trend->runs.empty()) {
    json rows = json::array();
    for (const auto& row : trend->rows) {
      json drift = json::array();
      for (const auto& d : row.drift_pct) drift.push_back(d ? json(*d) : json(nullptr));
      rows.push_back({{"cell", row.cell}, {"verdicts", row.verdicts}, {"final_loss_drift_pct", drift},
                      {"changed", row.changed}});
    }
    json runs = json::array();
    for (const auto& e : trend->runs)
      runs.push_back({{"started", e.started}, {"git_sha", e.git_sha}, {"matrix", e.matrix}});
    j["history"] = {{"runs", runs}, {"rows", rows}, {"changed", trend->changed()}};
  }
  return j;
}

}  // namespace parity::reports
