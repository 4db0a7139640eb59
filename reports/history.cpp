// Nightly history: one JSON line per matrix run, read back and laid out as a trend.
#include "reports/history.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "reports/drift.h"
#include "reports/matrix.h"
#include "spec/limits.h"

namespace parity::reports {

namespace {

using nlohmann::json;

std::string gate_word(const CellResult& c) {
  if (c.cell.gate == Gate::None) return "-";
  return c.gate.passed ? "pass" : "FAIL";
}

// The signed % change of the cell's last logged loss against its reference's loss at the same
// step; nullopt for a reference, when either loss is missing, or when the reference loss is 0.
std::optional<double> final_loss_drift(const MatrixResult& r, const CellResult& c) {
  if (c.cell.reference.empty() || c.steps.empty()) return std::nullopt;
  const CellResult* ref = r.find(c.cell.reference);
  if (ref == nullptr) return std::nullopt;
  const StepPoint& last = c.steps.back();
  const StepPoint* at = ref->at(last.step);
  if (at == nullptr) return std::nullopt;
  const auto pct = relative_change_pct(last.loss, at->loss);
  // JSON has no NaN or Inf: a non-finite drift is as good as unknown.
  if (!pct || !std::isfinite(*pct)) return std::nullopt;
  return pct;
}

json cell_json(const HistoryCell& c) {
  json j = {{"name", c.name},         {"status", c.status},         {"verdict", c.verdict},
            {"gate", c.gate},         {"final_step", c.final_step}, {"final_loss", c.final_loss},
            {"final_loss_drift_pct", nullptr}};
  if (c.final_loss_drift_pct) j["final_loss_drift_pct"] = *c.final_loss_drift_pct;
  return j;
}

json entry_json(const HistoryEntry& e) {
  json cells = json::array();
  for (const HistoryCell& c : e.cells) cells.push_back(cell_json(c));
  return {{"started", e.started}, {"git_sha", e.git_sha},           {"matrix", e.matrix},
          {"source", e.source},   {"wall_seconds", e.wall_seconds}, {"cells", cells}};
}

// `key` of object `j` as a string; "" when absent. json::type_error when it is not a string.
std::string text_of(const json& j, const char* key) { return j.value(key, std::string()); }

// A number that may have been written as null (nlohmann writes NaN and Inf as null).
double number_of(const json& j, const char* key, double absent) {
  const auto it = j.find(key);
  if (it == j.end()) return absent;
  if (it->is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!it->is_number()) throw std::runtime_error(std::string("\"") + key + "\" is not a number");
  return it->get<double>();
}

HistoryCell cell_from_json(const json& j) {
  if (!j.is_object()) throw std::runtime_error("a cell is not a JSON object");
  HistoryCell c;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string())
    throw std::runtime_error("a cell has no \"name\" string");
  c.name = name->get<std::string>();
  c.status = text_of(j, "status");
  c.verdict = text_of(j, "verdict");
  c.gate = text_of(j, "gate");
  const auto step = j.find("final_step");
  if (step != j.end()) {
    if (!step->is_number_integer())
      throw std::runtime_error("cell '" + c.name + "': \"final_step\" is not an integer");
    c.final_step = step->get<int64_t>();
  }
  c.final_loss = number_of(j, "final_loss", 0);
  const auto drift = j.find("final_loss_drift_pct");
  if (drift != j.end() && !drift->is_null()) {
    if (!drift->is_number())
      throw std::runtime_error("cell '" + c.name + "': \"final_loss_drift_pct\" is not a number");
    c.final_loss_drift_pct = drift->get<double>();
  }
  return c;
}

HistoryEntry entry_from_json(const json& j) {
  if (!j.is_object()) throw std::runtime_error("not a JSON object");
  HistoryEntry e;
  e.started = text_of(j, "started");
  e.git_sha = text_of(j, "git_sha");
  e.matrix = text_of(j, "matrix");
  e.source = text_of(j, "source");
  e.wall_seconds = number_of(j, "wall_seconds", 0);
  const auto cells = j.find("cells");
  if (cells == j.end() || !cells->is_array()) throw std::runtime_error("no \"cells\" array");
  for (const json& c : *cells) e.cells.push_back(cell_from_json(c));
  return e;
}

// " (the system's reason)" when errno holds one, else "".
std::string system_reason() {
  return errno != 0 ? std::string(" (") + std::strerror(errno) + ")" : std::string();
}

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

}  // namespace

HistoryEntry history_entry(const MatrixResult& r) {
  HistoryEntry e;
  e.started = r.started;
  e.git_sha = r.git_sha;
  e.matrix = r.matrix;
  e.source = r.source;
  e.wall_seconds = r.wall_seconds;
  for (const CellResult& c : r.cells) {
    HistoryCell h;
    h.name = c.cell.name;
    h.status = c.status;
    h.verdict = step1_verdict(c);
    h.gate = gate_word(c);
    if (!c.steps.empty()) {
      h.final_step = c.steps.back().step;
      h.final_loss = c.steps.back().loss;
    }
    h.final_loss_drift_pct = final_loss_drift(r, c);
    e.cells.push_back(std::move(h));
  }
  return e;
}

void append_history(const std::string& path, const MatrixResult& r) {
  // One write of the whole line, then a flush, so a later crash leaves whole lines behind.
  const std::string line = entry_json(history_entry(r)).dump() + "\n";
  errno = 0;
  std::ofstream out(path, std::ios::out | std::ios::app | std::ios::binary);
  if (!out)
    throw MatrixError("cannot open history file '" + path + "' for appending" + system_reason() +
                      "; check that its directory exists and is writable and that the path is "
                      "not a directory");
  out.write(line.data(), static_cast<std::streamsize>(line.size()));
  out.flush();
  if (!out)
    throw MatrixError("cannot write history file '" + path + "'" + system_reason() +
                      "; check free space and permissions");
}

std::vector<HistoryEntry> read_history(const std::string& path, int last) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found) return {};
  if (std::filesystem::is_directory(st))
    throw MatrixError("history file '" + path + "' is a directory; pass the history file "
                      "itself (one JSON line per run)");
  errno = 0;
  std::ifstream in(path, std::ios::in | std::ios::binary);
  if (!in)
    throw MatrixError("cannot read history file '" + path + "'" + system_reason() +
                      "; check its permissions");
  std::vector<HistoryEntry> entries;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (blank(line)) continue;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    if (spec::json_depth(line) > spec::kMaxJsonDepth)
      throw MatrixError(where + "malformed history line (it nests more than " +
                        std::to_string(spec::kMaxJsonDepth) + " deep); remove or fix the line");
    try {
      entries.push_back(entry_from_json(json::parse(line)));
    } catch (const json::exception& ex) {
      throw MatrixError(where + "malformed history line (" + ex.what() +
                        "); remove or fix the line");
    } catch (const std::exception& ex) {  // a field of the wrong kind or value
      throw MatrixError(where + "malformed history line (" + ex.what() +
                        "); remove or fix the line");
    }
  }
  if (in.bad())
    throw MatrixError("error reading history file '" + path + "' after line " +
                      std::to_string(number) + "; check the file system");
  if (last > 0 && entries.size() > static_cast<size_t>(last))
    entries.erase(entries.begin(), entries.end() - last);
  return entries;
}

int Trend::changed() const {
  int n = 0;
  for (const TrendRow& row : rows) n += row.changed ? 1 : 0;
  return n;
}

Trend trend(std::vector<HistoryEntry> runs) {
  Trend t;
  t.runs = std::move(runs);
  const size_t n = t.runs.size();

  // Row order: the newest run's cells, then those only in older runs, newest run first.
  std::map<std::string, size_t> row_of;
  for (size_t k = n; k-- > 0;)
    for (const HistoryCell& c : t.runs[k].cells)
      if (row_of.emplace(c.name, t.rows.size()).second) {
        TrendRow row;
        row.cell = c.name;
        row.verdicts.assign(n, "");
        row.drift_pct.assign(n, std::nullopt);
        t.rows.push_back(std::move(row));
      }

  // present[row][run]: kept apart from the verdict text so an empty verdict is not "absent".
  std::vector<std::vector<bool>> present(t.rows.size(), std::vector<bool>(n, false));
  for (size_t k = 0; k < n; ++k)
    for (const HistoryCell& c : t.runs[k].cells) {
      const size_t i = row_of.at(c.name);
      if (present[i][k]) continue;  // a repeated name in one run: the first one counts
      present[i][k] = true;
      t.rows[i].verdicts[k] = c.verdict;
      t.rows[i].drift_pct[k] = c.final_loss_drift_pct;
    }

  // EXACT (the ledger's word) and BITWISE (the comparison's, where there is no ledger) say the
  // same thing: equal bits. Moving between them is not a change of outcome.
  auto outcome = [](const std::string& v) { return v == "BITWISE" ? std::string("EXACT") : v; };
  for (size_t i = 0; i < t.rows.size(); ++i)
    for (size_t k = 1; k < n; ++k)
      if (present[i][k - 1] && present[i][k] &&
          outcome(t.rows[i].verdicts[k - 1]) != outcome(t.rows[i].verdicts[k]))
        t.rows[i].changed = true;
  return t;
}

}  // namespace parity::reports
