#include "reports/matrix.h"

#include <toml++/toml.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "spec/limits.h"
#include "spec/options.h"

namespace parity::reports {

const spec::Choices<Gate>& gates() {
  static const spec::Choices<Gate> t{
      "gate", {{Gate::None, "none"}, {Gate::Bitwise, "bitwise"}, {Gate::OrderOnly, "order-only"}}};
  return t;
}

const char* to_string(Gate g) { return gates().name(g); }

std::string Cell::batch_shape() const {
  return std::string(spec::to_string(flavor)) + "_s" + std::to_string(seed) + "_" +
         std::to_string(dp) + "x" + std::to_string(microbatches) + "x" + std::to_string(rows) +
         "x" + std::to_string(seq_len);
}

std::vector<std::string> Cell::train_args() const {
  std::vector<std::string> a = spec::to_args(*this);
  if (nproc > 0)
    a.insert(a.end(), {"--nproc", std::to_string(nproc), "--backend",
                       spec::to_string(backend.value_or(spec::Backend::Gloo))});
  return a;
}

const Cell* Matrix::find(const std::string& name) const {
  for (const auto& c : cells)
    if (c.name == name) return &c;
  return nullptr;
}

std::vector<std::vector<const Cell*>> Matrix::tables() const {
  std::vector<std::vector<const Cell*>> out;
  for (const auto& ref : cells) {
    if (!ref.reference.empty()) continue;
    out.push_back({&ref});
    for (const auto& c : cells)
      if (c.reference == ref.name) out.back().push_back(&c);
  }
  return out;
}

namespace {

// Where a value sits, for errors: "quick.toml:12 (cell 'pp2'), key 'vp'".
struct Place {
  std::string source;
  std::string cell;  // "" for the defaults table
  std::string key;
  int64_t line = 0;
  std::string text() const {
    std::string s = source;
    if (line > 0) s += ":" + std::to_string(line);
    s += cell.empty() ? " ([defaults])" : cell == "top level" ? " (top level)" : " (cell '" + cell + "')";
    if (!key.empty()) s += ", key '" + key + "'";
    return s;
  }
};

[[noreturn]] void fail(const Place& p, const std::string& what) {
  throw MatrixError(p.text() + ": " + what);
}

std::string get_string(const toml::node& n, const Place& p) {
  if (auto v = n.value<std::string>()) return *v;
  fail(p, "expected a string");
}

int64_t get_int(const toml::node& n, const Place& p, int64_t min,
                int64_t max = std::numeric_limits<int64_t>::max()) {
  auto v = n.value<int64_t>();
  if (!v || !n.is_integer()) fail(p, "expected an integer");
  if (*v < min) fail(p, "must be at least " + std::to_string(min) + ", got " + std::to_string(*v));
  if (*v > max) fail(p, "must be at most " + std::to_string(max) + ", got " + std::to_string(*v));
  return *v;
}

// An int field: at least `min`, at most what an int holds.
int get_small(const toml::node& n, const Place& p, int min) {
  return static_cast<int>(get_int(n, p, min, std::numeric_limits<int>::max()));
}

double get_positive(const toml::node& n, const Place& p) {
  auto v = n.value<double>();  // an integer reads as a double too
  if (!v || !(n.is_floating_point() || n.is_integer())) fail(p, "expected a number");
  if (!(*v > 0)) fail(p, "must be positive");
  return *v;
}

bool get_bool(const toml::node& n, const Place& p) {
  if (!n.is_boolean()) fail(p, "expected true or false");
  return *n.value<bool>();
}

// A value of one of the specification's closed sets, by its table.
template <class E>
E named(const toml::node& n, const Place& p, const spec::Choices<E>& table) {
  const std::string v = get_string(n, p);
  try {
    return table.parse(v, p.key);
  } catch (const spec::BadInput& e) {
    fail(p, e.what());
  }
}

// The cell `name` that `c` names under the key p.key; neither missing nor `c` itself.
const Cell* other_cell(const Matrix& m, const Cell& c, const std::string& name, const Place& p,
                       const std::string& remedy_for_self) {
  const Cell* other = m.find(name);
  if (!other) fail(p, "no cell named '" + name + "'; name one of this file's cells");
  if (other == &c) fail(p, "a cell cannot be its own " + p.key + "; " + remedy_for_self);
  return other;
}

using Setter = std::function<void(Cell&, const toml::node&, const Place&)>;

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> s = {
      {"name", [](Cell& c, auto& n, auto& p) { c.name = get_string(n, p); }},
      {"label", [](Cell& c, auto& n, auto& p) { c.label = get_string(n, p); }},
      {"trainer", [](Cell& c, auto& n, auto& p) { c.trainer = named(n, p, spec::trainers()); }},
      {"flavor", [](Cell& c, auto& n, auto& p) { c.flavor = named(n, p, spec::flavors()); }},
      {"dtype", [](Cell& c, auto& n, auto& p) { c.dtype = named(n, p, spec::precisions()); }},
      {"steps", [](Cell& c, auto& n, auto& p) { c.steps = get_int(n, p, 1); }},
      {"microbatches", [](Cell& c, auto& n, auto& p) { c.microbatches = get_small(n, p, 1); }},
      {"rows", [](Cell& c, auto& n, auto& p) { c.rows = get_small(n, p, 1); }},
      {"seq_len", [](Cell& c, auto& n, auto& p) { c.seq_len = get_int(n, p, 1); }},
      {"seed", [](Cell& c, auto& n, auto& p) { c.seed = uint64_t(get_int(n, p, 0)); }},
      {"lr", [](Cell& c, auto& n, auto& p) { c.lr = get_positive(n, p); }},
      {"threads", [](Cell& c, auto& n, auto& p) { c.threads = get_small(n, p, 1); }},
      {"dp", [](Cell& c, auto& n, auto& p) { c.dp = get_small(n, p, 1); }},
      {"pp", [](Cell& c, auto& n, auto& p) { c.pp = get_small(n, p, 1); }},
      {"vp", [](Cell& c, auto& n, auto& p) { c.vp = get_small(n, p, 1); }},
      {"schedule", [](Cell& c, auto& n, auto& p) { c.schedule = named(n, p, spec::schedules()); }},
      {"cache", [](Cell& c, auto& n, auto& p) { c.cache = named(n, p, spec::caches()); }},
      {"split", [](Cell& c, auto& n, auto& p) { c.split = get_string(n, p); }},
      {"clip_order", [](Cell& c, auto& n, auto& p) { c.clip_order = named(n, p, spec::clip_orders()); }},
      {"grad_accum", [](Cell& c, auto& n, auto& p) { c.grad_accum = named(n, p, spec::grad_accums()); }},
      {"documents", [](Cell& c, auto& n, auto& p) { c.documents = named(n, p, spec::document_modes()); }},
      {"bos_id", [](Cell& c, auto& n, auto& p) { c.bos_id = get_int(n, p, -1, spec::kMaxTokenId); }},
      {"eos_id", [](Cell& c, auto& n, auto& p) { c.eos_id = get_int(n, p, -1, spec::kMaxTokenId); }},
      {"grad_norm_dtype", [](Cell& c, auto& n, auto& p) { c.grad_norm_dtype = named(n, p, spec::grad_norm_dtypes()); }},
      {"lr_schedule", [](Cell& c, auto& n, auto& p) { c.lr_schedule = named(n, p, spec::lr_schedules()); }},
      {"expert_balance", [](Cell& c, auto& n, auto& p) { c.expert_balance = get_bool(n, p); }},
      {"loss_chunks", [](Cell& c, auto& n, auto& p) { c.loss_chunks = get_small(n, p, 1); }},
      {"reverse_microbatches", [](Cell& c, auto& n, auto& p) { c.reverse_microbatches = get_bool(n, p); }},
      {"freeze_embedding", [](Cell& c, auto& n, auto& p) { c.freeze_embedding = get_bool(n, p); }},
      {"attn_res", [](Cell& c, auto& n, auto& p) { c.attn_res = named(n, p, spec::attn_res_forms()); }},
      {"kda", [](Cell& c, auto& n, auto& p) { c.kda = named(n, p, spec::kda_forms()); }},
      {"ac", [](Cell& c, auto& n, auto& p) { c.ac = named(n, p, spec::checkpointing_modes()); }},
      {"warmup", [](Cell& c, auto& n, auto& p) { c.warmup = get_small(n, p, 0); }},
      {"max_norm", [](Cell& c, auto& n, auto& p) { c.max_norm = get_positive(n, p); }},
      {"pseudo_query_init", [](Cell& c, auto& n, auto& p) { c.pseudo_query_init = named(n, p, spec::pseudo_query_inits()); }},
      {"reference", [](Cell& c, auto& n, auto& p) { c.reference = get_string(n, p); }},
      {"twin", [](Cell& c, auto& n, auto& p) { c.twin = get_string(n, p); }},
      {"device", [](Cell& c, auto& n, auto& p) { c.device = named(n, p, spec::devices()); }},
      {"gate", [](Cell& c, auto& n, auto& p) { c.gate = named(n, p, gates()); }},
      {"nproc", [](Cell& c, auto& n, auto& p) { c.nproc = get_small(n, p, 0); }},
      {"backend", [](Cell& c, auto& n, auto& p) { c.backend = named(n, p, spec::backends()); }},
      {"inject", [](Cell& c, auto& n, auto& p) {
         const auto* arr = n.as_array();
         if (!arr) fail(p, "expected an array of fault specs, e.g. [\"drop-deposit:block=1,stage=2\"]");
         c.inject.clear();
         for (const auto& e : *arr) c.inject.push_back(get_string(e, p));
       }},
  };
  return s;
}

std::string known_keys() {
  std::string s;
  for (const auto& [k, _] : setters()) s += (s.empty() ? "" : ", ") + k;
  return s;
}

void apply(Cell& c, const toml::table& t, Place p) {
  for (const auto& [key, node] : t) {
    p.key = std::string(key.str());
    p.line = node.source().begin.line;
    auto it = setters().find(p.key);
    if (it == setters().end())
      fail(p, "unknown key; a cell takes: " + known_keys());
    if (p.cell.empty() &&
        (p.key == "name" || p.key == "label" || p.key == "reference" || p.key == "twin"))
      fail(p, "'" + p.key + "' belongs to one cell, not to [defaults]");
    it->second(c, node, p);
  }
}

bool valid_name(const std::string& n) {
  if (n.empty()) return false;
  for (char ch : n)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.'))
      return false;
  return n != "." && n != "..";
}

// The drift table's row name when the file gives none, in the seed's words.
std::string default_label(const Cell& c, const Cell* ref) {
  std::string s;
  if (c.pipelined()) {
    if (c.dp > 1) s = "dp" + std::to_string(c.dp) + " x ";
    s += "pp" + std::to_string(c.pp);
    if (c.vp > 1) s += " x vp" + std::to_string(c.vp) + (c.cache == spec::Cache::On ? ", cached" : ", naive");
  } else {
    s = "dp" + std::to_string(c.dp);
  }
  if (c.grad_accum == spec::GradAccum::FP32 && c.dtype != spec::Precision::FP32 &&
      c.dtype != spec::Precision::FP64)
    s += ", stock accumulation";
  if (c.reverse_microbatches) s += ", micro-batches reversed";
  if (c.clip_order == spec::ClipOrder::PerRank) s += ", per-rank clip";
  if (c.grad_norm_dtype == spec::GradNormDtype::BF16) s += ", bf16 grad norm";
  if (c.documents == spec::Documents::On) s += ", per-document masking";
  if (c.nproc > 0) s += ", " + std::to_string(c.nproc) + " processes";
  for (const auto& f : c.inject) s += ", fault " + f;
  if (ref && c.train_args() == ref->train_args()) s += ", repeat";
  return s;
}

}  // namespace

Matrix parse_matrix(const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw MatrixError(source + ":" + std::to_string(e.source().begin.line) + ": not valid TOML: " +
                      std::string(e.description()));
  }
  Matrix m;
  m.source = source;
  Cell defaults;
  const Place top{source, "", "", 0};
  for (const auto& [key, node] : root) {
    Place p = top;
    p.key = std::string(key.str());
    p.line = node.source().begin.line;
    p.cell = "top level";
    if (p.key == "name") {
      m.name = get_string(node, p);
    } else if (p.key == "description") {
      get_string(node, p);
    } else if (p.key == "report_steps") {
      const auto* arr = node.as_array();
      if (!arr || arr->empty()) fail(p, "expected a non-empty array of steps, e.g. [1, 10, 50, 100]");
      m.report_steps.clear();
      for (const auto& e : *arr) m.report_steps.push_back(get_int(e, p, 1));
    } else if (p.key == "defaults") {
      const auto* t = node.as_table();
      if (!t) fail(p, "expected a table: [defaults]");
      p.cell.clear();
      apply(defaults, *t, p);
    } else if (p.key != "cell") {
      fail(p, "unknown key; the top level takes: name, description, report_steps, [defaults], "
              "[[cell]]");
    }
  }
  const auto* cells = root["cell"].as_array();
  if (!cells || cells->empty())
    throw MatrixError(source + ": no cells; add at least one [[cell]] table with a name");
  std::set<std::string> names;
  std::map<std::string, int64_t> line_of;  // each cell's [[cell]] line, for later errors
  for (size_t i = 0; i < cells->size(); ++i) {
    const auto* t = (*cells)[i].as_table();
    Place p{source, "#" + std::to_string(i + 1), "", (*cells)[i].source().begin.line};
    if (!t) fail(p, "expected a table: [[cell]]");
    Cell c = defaults;
    c.name.clear();
    if (auto n = (*t)["name"].value<std::string>()) p.cell = *n;
    apply(c, *t, p);
    p.key.clear();
    p.line = t->source().begin.line;
    if (!valid_name(c.name))
      fail(p, "every cell needs a name of letters, digits, '_', '-' or '.' (it names its "
              "directory), got '" + c.name + "'");
    if (!names.insert(c.name).second) fail(p, "a second cell named '" + c.name + "'; names are unique");
    if (c.nproc > 0 && !c.pipelined())
      fail(p, "nproc needs trainer = \"pipelined\" (the reference runs in one process)");
    if (!c.inject.empty() && !c.pipelined())
      fail(p, "inject needs trainer = \"pipelined\" (faults break the pipeline's routing)");
    if (c.gate == Gate::OrderOnly && !c.pipelined())
      fail(p, "gate = \"order-only\" judges a pipeline's routing; a reference-trainer cell "
              "routes nothing (give it gate = \"bitwise\" or none)");
    if (c.gate == Gate::OrderOnly && c.nproc > 0)
      fail(p, "gate = \"order-only\" needs the ledger, which multi-process runs do not record "
              "yet; drop nproc or the gate");
    if (!c.pipelined() && c.vp > 1 && c.clip_order != spec::ClipOrder::PerRank)
      fail(p, "vp belongs to trainer = \"pipelined\" (or the reference's per-rank clip order)");
    line_of[c.name] = p.line;
    m.cells.push_back(std::move(c));
  }
  for (auto& c : m.cells) {
    if (c.reference.empty()) continue;
    const Place p{source, c.name, "reference", line_of[c.name]};
    const Cell* ref = other_cell(m, c, c.reference, p, "drop the key to make it a reference");
    if (!ref->reference.empty())
      fail(p, "'" + c.reference + "' is compared against '" + ref->reference +
                  "' itself; name a reference cell (one without a reference key)");
    if (ref->flavor != c.flavor)
      fail(p, std::string("flavor '") + spec::to_string(c.flavor) +
                  "' against a reference of flavor '" + spec::to_string(ref->flavor) +
                  "': the parameters differ, nothing can be compared");
    if (ref->batch_shape() != c.batch_shape())
      fail(p, "the batch (flavor_seed_dp x micro-batches x rows x seq_len) is " +
                  c.batch_shape() + ", the reference's " + ref->batch_shape() +
                  ": a comparison needs the same tokens and checkpoint; give the cell a "
                  "reference of its own batch");
    if (ref->dtype != c.dtype)
      fail(p, std::string("dtype '") + spec::to_string(c.dtype) + "' against a reference in '" +
                  spec::to_string(ref->dtype) +
                  "': give the cell a reference of its own dtype (compare --truth compares "
                  "against an fp64 run)");
  }
  for (auto& c : m.cells) {
    if (c.twin.empty()) continue;
    const Place p{source, c.name, "twin", line_of[c.name]};
    const Cell* twin = other_cell(m, c, c.twin, p, "name the cell it must equal");
    if (!(static_cast<const spec::RunSpec&>(*twin) == static_cast<const spec::RunSpec&>(c)))
      fail(p, "'" + c.twin + "' is another run: twins differ only in how the run is carried "
                  "out (nproc, backend); give both the same run keys");
    if (c.gate != Gate::Bitwise)
      fail(p, "a cell is held bit for bit against its twin: give it gate = \"bitwise\"");
  }
  for (auto& c : m.cells) {
    if (!c.label.empty()) continue;
    c.label = default_label(c, c.reference.empty() ? nullptr : m.find(c.reference));
  }
  for (auto& c : m.cells)
    if (c.reference.empty() && c.twin.empty() && c.gate != Gate::None)
      fail({source, c.name, "gate", line_of[c.name]}, "a reference has nothing to be gated against; give the "
                                        "gate to the cells that name it");
  return m;
}

Matrix load_matrix(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw MatrixError("'" + path + "' is a directory; give a matrix file (TOML) or a shipped "
                      "matrix name (quick, seed)");
  std::ifstream in(path);
  if (!in) {
    if (const std::string text = embedded_matrix(path); !text.empty())
      return parse_matrix(text, "<embedded " + path + ">");
    throw MatrixError("cannot read matrix file '" + path + "'; give a path to a TOML file or a "
                      "shipped matrix name (quick, seed)");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_matrix(ss.str(), path);
}

}  // namespace parity::reports
