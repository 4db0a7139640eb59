#include "reports/results.h"
#include "spec/limits.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace parity::reports {

namespace fs = std::filesystem;
using nlohmann::json;

const StepPoint* CellResult::at(int64_t step) const {
  // A binary search: a drift over a log of 2 million steps looks up each of them.
  const auto it = std::lower_bound(steps.begin(), steps.end(), step,
                                   [](const StepPoint& s, int64_t k) { return s.step < k; });
  return it != steps.end() && it->step == step ? &*it : nullptr;
}

const CellResult* MatrixResult::find(const std::string& name) const {
  for (const auto& c : cells)
    if (c.cell.name == name) return &c;
  return nullptr;
}

bool MatrixResult::complete() const {
  for (const auto& c : cells)
    if (!c.ok()) return false;
  return true;
}

bool MatrixResult::gates_ok() const {
  for (const auto& c : cells)
    if (!c.gate.passed) return false;
  return true;
}

void sort_steps(std::vector<StepPoint>& steps) {
  std::stable_sort(steps.begin(), steps.end(),
                   [](const StepPoint& a, const StepPoint& b) { return a.step < b.step; });
}

namespace {

// An unset choice is written as "" (its default depends on other fields).
template <class E>
std::string name_or_empty(const std::optional<E>& v) {
  return v ? spec::to_string(*v) : "";
}

template <class E>
std::optional<E> optional_from(const json& j, const char* key, const spec::Choices<E>& table) {
  const std::string s = j.at(key);
  if (s.empty()) return std::nullopt;
  return table.parse(s, std::string("results key ") + key);
}

template <class E>
E choice_from(const json& j, const char* key, const spec::Choices<E>& table) {
  return table.parse(j.at(key).get<std::string>(), std::string("results key ") + key);
}

json cell_json(const Cell& c) {
  return {{"name", c.name},
          {"label", c.label},
          {"trainer", spec::to_string(c.trainer)},
          {"flavor", spec::to_string(c.flavor)},
          {"dtype", spec::to_string(c.dtype)},
          {"steps", c.steps},
          {"microbatches", c.microbatches},
          {"rows", c.rows},
          {"seq_len", c.seq_len},
          {"seed", c.seed},
          {"lr", c.lr},
          {"threads", c.threads},
          {"dp", c.dp},
          {"pp", c.pp},
          {"vp", c.vp},
          {"schedule", name_or_empty(c.schedule)},
          {"cache", spec::to_string(c.cache)},
          {"split", c.split},
          {"clip_order", spec::to_string(c.clip_order)},
          {"grad_accum", spec::to_string(c.grad_accum)},
          {"documents", spec::to_string(c.documents)},
          {"reverse_microbatches", c.reverse_microbatches},
          {"reference", c.reference},
          {"twin", c.twin},
          {"device", spec::to_string(c.device)},
          {"gate", to_string(c.gate)},
          {"nproc", c.nproc},
          {"backend", name_or_empty(c.backend)},
          {"inject", c.inject}};
}

Cell cell_from(const json& j) {
  Cell c;
  c.name = j.at("name");
  c.label = j.at("label");
  c.trainer = choice_from(j, "trainer", spec::trainers());
  c.flavor = choice_from(j, "flavor", spec::flavors());
  c.dtype = choice_from(j, "dtype", spec::precisions());
  c.steps = j.at("steps");
  c.microbatches = j.at("microbatches");
  c.rows = j.at("rows");
  c.seq_len = j.at("seq_len");
  c.seed = j.at("seed");
  c.lr = j.value("lr", c.lr);
  c.threads = j.at("threads");
  c.dp = j.at("dp");
  c.pp = j.at("pp");
  c.vp = j.at("vp");
  c.schedule = optional_from(j, "schedule", spec::schedules());
  c.cache = choice_from(j, "cache", spec::caches());
  c.split = j.at("split");
  c.clip_order = choice_from(j, "clip_order", spec::clip_orders());
  c.grad_accum = choice_from(j, "grad_accum", spec::grad_accums());
  if (j.contains("documents"))  // absent in results written before documents
    c.documents = choice_from(j, "documents", spec::document_modes());
  c.reverse_microbatches = j.at("reverse_microbatches");
  c.reference = j.at("reference");
  c.twin = j.value("twin", std::string());  // absent in results written before twins
  if (j.contains("device")) c.device = choice_from(j, "device", spec::devices());
  c.gate = choice_from(j, "gate", gates());
  c.nproc = j.at("nproc");
  c.backend = optional_from(j, "backend", spec::backends());
  c.inject = j.at("inject").get<std::vector<std::string>>();
  return c;
}

// kUlpInfinite is written as the string "inf" (JSON readers lose 64-bit integers).
json ulp_json(uint64_t u) { return u == kUlpInfinite ? json("inf") : json(u); }
uint64_t ulp_from(const json& j) { return j.is_string() ? kUlpInfinite : j.get<uint64_t>(); }

json cell_result_json(const CellResult& c) {
  json steps = json::array();
  for (const auto& s : c.steps)
    steps.push_back({{"step", s.step}, {"loss", s.loss}, {"grad_norm", s.grad_norm},
                     {"loss_hex", s.loss_hex}, {"grad_norm_hex", s.grad_norm_hex},
                     {"seconds", s.seconds}});
  json ulps = json::array();
  for (auto u : c.step1.grad_ulps) ulps.push_back(ulp_json(u));
  return {{"cell", cell_json(c.cell)},
          {"status", c.status},
          {"error", c.error},
          {"log", c.log},
          {"warnings", c.warnings},
          {"wall_seconds", c.wall_seconds},
          {"seconds_per_step", c.seconds_per_step},
          {"tokens_per_step", c.tokens_per_step},
          {"bytes_forward_per_mb", c.bytes_forward_per_mb},
          {"bytes_backward_per_mb", c.bytes_backward_per_mb},
          {"steps", steps},
          {"step1",
           {{"have", c.step1.have},
            {"why_not", c.step1.why_not},
            {"tensors", c.step1.tensors},
            {"wrong_tensors", c.step1.wrong_tensors},
            {"max_ulp", ulp_json(c.step1.max_ulp)},
            {"grad_ulps", ulps},
            {"scalars_equal", c.step1.scalars_equal}}},
          {"verdicts",
           {{"have", c.verdicts.have},
            {"why_not", c.verdicts.why_not},
            {"exact", c.verdicts.exact},
            {"order_only", c.verdicts.order_only},
            {"wrong", c.verdicts.wrong},
            {"first_wrong", c.verdicts.first_wrong},
            {"divergence", c.verdicts.divergence}}},
          {"gate", {{"gate", to_string(c.gate.gate)}, {"passed", c.gate.passed}, {"why", c.gate.why}}},
          {"layout", c.layout}};
}

CellResult cell_result_from(const json& j) {
  CellResult c;
  c.cell = cell_from(j.at("cell"));
  c.status = j.at("status");
  c.error = j.at("error");
  c.log = j.at("log");
  c.warnings = j.value("warnings", std::vector<std::string>{});
  c.wall_seconds = j.at("wall_seconds");
  c.seconds_per_step = j.at("seconds_per_step");
  c.tokens_per_step = j.at("tokens_per_step");
  c.bytes_forward_per_mb = j.at("bytes_forward_per_mb");
  c.bytes_backward_per_mb = j.at("bytes_backward_per_mb");
  for (const auto& s : j.at("steps"))
    c.steps.push_back({s.at("step"), s.at("loss"), s.at("grad_norm"), s.at("loss_hex"),
                       s.at("grad_norm_hex"), s.at("seconds")});
  sort_steps(c.steps);
  const auto& d = j.at("step1");
  c.step1.have = d.at("have");
  c.step1.why_not = d.at("why_not");
  c.step1.tensors = d.at("tensors");
  c.step1.wrong_tensors = d.at("wrong_tensors");
  c.step1.max_ulp = ulp_from(d.at("max_ulp"));
  for (const auto& u : d.at("grad_ulps")) c.step1.grad_ulps.push_back(ulp_from(u));
  c.step1.scalars_equal = d.at("scalars_equal");
  const auto& v = j.at("verdicts");
  c.verdicts.have = v.at("have");
  c.verdicts.why_not = v.at("why_not");
  c.verdicts.exact = v.at("exact");
  c.verdicts.order_only = v.at("order_only");
  c.verdicts.wrong = v.at("wrong");
  c.verdicts.first_wrong = v.at("first_wrong");
  c.verdicts.divergence = v.at("divergence");
  const auto& g = j.at("gate");
  c.gate.gate = choice_from(g, "gate", gates());
  c.gate.passed = g.at("passed");
  c.gate.why = g.at("why");
  c.layout = j.at("layout");
  return c;
}

}  // namespace

json to_json(const MatrixResult& r) {
  json cells = json::array();
  for (const auto& c : r.cells) cells.push_back(cell_result_json(c));
  return {{"schema", "parity.matrix_result"},
          {"schema_version", 1},
          {"matrix", r.matrix},
          {"source", r.source},
          {"git_sha", r.git_sha},
          {"started", r.started},
          {"wall_seconds", r.wall_seconds},
          {"report_steps", r.report_steps},
          {"cells", cells}};
}

MatrixResult from_json(const json& j) {
  try {
    if (j.value("schema", "") != "parity.matrix_result")
      throw MatrixError("not a parity matrix result (schema '" + j.value("schema", "") + "')");
    MatrixResult r;
    r.matrix = j.at("matrix");
    r.source = j.at("source");
    r.git_sha = j.at("git_sha");
    r.started = j.at("started");
    r.wall_seconds = j.at("wall_seconds");
    r.report_steps = j.at("report_steps").get<std::vector<int64_t>>();
    for (const auto& c : j.at("cells")) r.cells.push_back(cell_result_from(c));
    return r;
  } catch (const json::exception& e) {
    throw MatrixError(std::string("malformed matrix result: ") + e.what());
  }
}

void write_results(const std::string& dir, const MatrixResult& r) {
  // Written whole to a temporary file, then renamed: a reader never sees half a file.
  const fs::path final_path = fs::path(dir) / "results.json";
  const fs::path tmp = fs::path(dir) / "results.json.tmp";
  {
    std::ofstream out(tmp);
    out << to_json(r).dump(1) << "\n";
    if (!out.flush())
      throw MatrixError("cannot write '" + tmp.string() + "'; check the directory is writable");
  }
  fs::rename(tmp, final_path);
}

MatrixResult read_results(const std::string& dir) {
  if (!fs::is_directory(dir))
    throw MatrixError("'" + dir + "' is not a directory; give the --out directory of a "
                      "`parity matrix run`");
  const fs::path p = fs::path(dir) / "results.json";
  std::ifstream in(p);
  if (!in)
    throw MatrixError("'" + dir + "' holds no results.json: no matrix run wrote there; run "
                      "`parity matrix run FILE --out " + dir + "` first");
  std::stringstream text;
  text << in.rdbuf();
  if (spec::json_depth(text.str()) > spec::kMaxJsonDepth)
    throw MatrixError(p.string() + ": nests more than " + std::to_string(spec::kMaxJsonDepth) +
                      " deep (parity writes 5); rerun the matrix");
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    throw MatrixError(p.string() + ": not valid JSON (" + e.what() + "); rerun the matrix");
  }
  try {
    return from_json(j);
  } catch (const MatrixError& e) {
    throw MatrixError(p.string() + ": " + e.what());
  }
}

}  // namespace parity::reports
