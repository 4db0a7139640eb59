#include "harness/truth_command.h"

#include <ATen/ATen.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include "compare/float_formats.h"
#include "compare/oracle.h"
#include "dumps/checkpoint.h"
#include "dumps/dump.h"
#include "dumps/external.h"
#include "dumps/junit.h"
#include "dumps/temp_files.h"
#include "dumps/state_dict.h"
#include "dumps/training_log.h"
#include "harness/errors.h"
#include "kernels/config.h"
#include "harness/run.h"
#include "harness/validate.h"
#include "harness/version.h"
#include "pipelined/routing.h"
#include "pipelined/schedule.h"
#include "pipelined/split.h"
#include "spec/numbers.h"
#include "spec/printable.h"

namespace parity::harness {

namespace {

using compare::GradLayout;
using compare::GradSet;
using compare::TruthVerdict;
using Clock = std::chrono::steady_clock;

// Step 1 of a trainer run: the gradients in fp64 (FQN order) and the loss.
class Step1 : public kernels::StepObserver {
 public:
  bool wants_tensors(int64_t step) const override { return step == 1; }
  void on_step(const kernels::StepRecord& r) override {
    if (r.step != 1) return;
    loss = r.loss.to(at::kDouble).item<double>();
    if (!r.grads) return;
    grads.values.clear();
    for (const auto& g : *r.grads) {
      const auto d = g.detach().to(at::kCPU).to(at::kDouble).contiguous();
      const double* p = d.data_ptr<double>();
      grads.values.emplace_back(p, p + d.numel());
    }
  }
  GradSet grads;
  double loss = 0;
};

// Progress on stderr: what runs now, of how many, and how long the last took.
class Progress {
 public:
  explicit Progress(bool quiet) : quiet_(quiet) {}
  void say(const std::string& what) {
    if (quiet_) return;
    std::cerr << "parity truth: " << what << "\n";
  }

 private:
  bool quiet_;
};

// One step-1 run of `o` (steps forced to 1), optionally on other rows.
Step1 run_step1(RunOptions o, std::shared_ptr<const datasets::TokenRows> rows = nullptr) {
  o.steps = 1;
  o.ledger = false;
  PreparedRun p = validate_run(o);
  if (rows) p.rows = std::move(rows);
  Step1 s;
  run_prepared(o, p, s);
  return s;
}

// The rows of the step's data micro-batch m alone (dp 1, step 1), positions included.
std::shared_ptr<const datasets::TokenRows> microbatch_rows_of(const datasets::TokenRows& all,
                                                             int microbatches, int rows, int m) {
  const auto idx = datasets::microbatch_rows({1, microbatches, rows}, all.num_rows(), 1, 0, m,
                                             false);
  const int64_t w = all.seq_len() + 1;
  std::vector<int32_t> stream, positions;
  for (int64_t r : idx) {
    stream.insert(stream.end(), all.row(r), all.row(r) + w);
    if (all.has_positions())
      positions.insert(positions.end(), all.positions(r), all.positions(r) + w);
  }
  auto out = std::make_shared<datasets::TokenRows>(std::move(stream), all.seq_len(),
                                                   datasets::BatchShape{1, 1, rows});
  if (!positions.empty()) out->set_positions(std::move(positions), "micro-batch rows");
  return out;
}

void scale(GradSet& g, double k) {
  for (auto& v : g.values)
    for (double& x : v) x *= k;
}

h5::DType ulp_dtype_of(spec::Precision p) {
  switch (p) {
    case spec::Precision::BF16:
    case spec::Precision::BF16Master: return h5::DType::BF16;
    case spec::Precision::FP64: return h5::DType::F64;
    default: return h5::DType::F32;
  }
}

struct Layout {
  std::string text;  // as given
  RunOptions opts;   // the step's options with the layout applied
};

// A run as read: its gradients aligned to the flavor, its dtype, its layout and loss.
struct Run {
  std::string path;
  spec::Precision dtype = spec::Precision::FP32;
  std::optional<Layout> layout;
  GradSet grads;
  std::optional<double> loss;  // step 1's, from the dump or --log
  std::string loss_from;
};

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// Reads one run's step-1 gradients and checks them against the flavor's parameters.
Run read_run_grads(const std::string& path, const GradLayout& L, const dumps::NameMap& names,
                   const TruthOptions& o) {
  Run run;
  run.path = path;
  const auto dump = dumps::read_run(path, names);
  const bool parity_dump = dumps::is_parity_dump(dump);
  const std::string where = "run '" + spec::printable(path, 200) + "'";
  if (dump.steps.empty()) throw UsageError(where + " holds no step; dump step 1's gradients");
  const auto it = parity_dump ? dump.steps.find(1) : dump.steps.begin();
  if (it == dump.steps.end())
    throw UsageError(where + " holds no step 1; write it with --dump-steps 1");
  const auto& grads = it->second.grads;
  if (grads.empty())
    throw UsageError(where + " holds no gradients (names 'grads.<fqn>' or a dump's grads/); "
                     "see `parity compare --help` for the names it reads");
  std::set<std::string> known(L.names.begin(), L.names.end());
  for (const auto& [name, a] : grads)
    if (!known.count(name) && name.rfind("vision_encoder.", 0) != 0)  // not modelled: skipped
      throw UsageError(where + " holds a gradient '" + spec::printable(name, 120) +
                       "' the flavor has no parameter for: gradients of another model? (map "
                       "names with --map, or give the run's --flavor)");
  if (parity_dump) {
    auto d = dump.meta.find("dtype");
    if (d != dump.meta.end() && !o.dtype) run.dtype = spec::precisions().parse(d->second, where);
    if (!dump.losses.empty()) {
      run.loss = dump.losses[0];
      run.loss_from = "the dump";
    }
  }
  if (o.dtype) run.dtype = *o.dtype;
  h5::DType stored = h5::DType::F32;
  for (size_t i = 0; i < L.size(); ++i) {
    const auto g = grads.find(L.names[i]);
    if (g == grads.end())
      throw UsageError(where + " has no gradient for '" + L.names[i] + "' (" +
                       std::to_string(std::count_if(L.names.begin(), L.names.end(),
                                                    [&](const std::string& n) {
                                                      return grads.count(n) == 0;
                                                    })) +
                       " of the flavor's " +
                       std::to_string(L.size()) + " are missing); write a frozen parameter's "
                       "gradient as zeros");
    const auto& a = g->second;
    if (a.shape != L.shapes[i])
      throw UsageError(where + ": gradient '" + L.names[i] + "' has shape " +
                       shape_text(a.shape) + ", the flavor's parameter " +
                       shape_text(L.shapes[i]) + ": gradients of another model?");
    if (!compare::is_float(a.dtype))
      throw UsageError(where + ": gradient '" + L.names[i] + "' is " +
                       h5::dtype_name(a.dtype) + ", not a float tensor");
    stored = a.dtype;
    std::vector<double> v(static_cast<size_t>(a.numel()));
    for (int64_t k = 0; k < a.numel(); ++k)
      v[static_cast<size_t>(k)] = compare::load_value(a.dtype, a.bytes.data(), k);
    run.grads.values.push_back(std::move(v));
  }
  if (!parity_dump && !o.dtype)
    run.dtype = stored == h5::DType::BF16 ? spec::Precision::BF16
                : stored == h5::DType::F64 ? spec::Precision::FP64
                                           : spec::Precision::FP32;
  if (stored == h5::DType::F16)
    throw UsageError(where + " holds fp16 gradients; parity trains no fp16 step to measure their "
                     "floor");
  return run;
}

// The layout's split against what a parity dump says it ran.
void check_layout_against_dump(const std::string& path, const Layout& l,
                               const kernels::ModelConfig& m, const dumps::NameMap& names) {
  if (dumps::detect_kind(path) != dumps::FileKind::ParityDump &&
      !std::filesystem::is_directory(path))
    return;
  const auto dump = dumps::read_run(path, names);
  if (!dumps::is_parity_dump(dump)) return;
  const auto t = dump.meta.find("trainer");
  const auto s = dump.meta.find("split");
  if (t == dump.meta.end() || t->second != "pipelined" || s == dump.meta.end()) return;
  const auto want = pipelined::make_split(m, pipeline_config(l.opts)).spec();
  if (s->second != want)
    throw UsageError("--layout " + l.text + " splits flavor " + m.name + " as '" + want +
                     "', but run '" + spec::printable(path, 200) + "' ran split '" +
                     spec::printable(s->second, 200) + "': give the layout the run used");
}

// Which layer a parameter belongs to: l for layers.<l>.*, -1 for the embedding, n_layers for
// anything after the last layer (the final norm and the output head).
int unit_of(const std::string& fqn, int n_layers) {
  if (fqn.rfind("tok_embeddings.", 0) == 0) return -1;
  if (fqn.rfind("layers.", 0) == 0) {
    const auto dot = fqn.find('.', 7);
    try {
      return std::stoi(fqn.substr(7, dot - 7));
    } catch (const std::exception&) {
      return n_layers;
    }
  }
  return n_layers;
}

// Everything computed once for all runs: the truth and its per-micro-batch terms.
struct Truth {
  GradLayout layout;
  GradSet grads;
  double loss = 0;
  std::vector<GradSet> per_microbatch;
  std::shared_ptr<const datasets::TokenRows> rows;
  kernels::ModelConfig model;
  std::vector<std::vector<int64_t>> mb_token_ids;  // per micro-batch, the input ids
};

// The floor of one dtype: per tensor and for the loss, with the variants that made it.
struct Floor {
  std::vector<double> per_tensor;
  double loss = 0;
  std::vector<std::pair<std::string, double>> variants;  // label, median tensor distance
};

Floor measure_floor(const RunOptions& step, spec::Precision dtype, const Truth& truth,
                    const std::vector<Layout>& layouts, Progress& progress) {
  struct Variant {
    std::string label;
    RunOptions o;
  };
  std::vector<Variant> variants;
  RunOptions base = step;
  base.dtype = dtype;
  variants.push_back({"reference", base});
  {
    auto v = base;
    v.reverse_microbatches = true;
    variants.push_back({"reversed micro-batches", v});
  }
  {
    auto v = base;
    const bool bf16 = dtype == spec::Precision::BF16 || dtype == spec::Precision::BF16Master;
    v.grad_accum = bf16 ? spec::GradAccum::FP32 : spec::GradAccum::BF16;
    variants.push_back({bf16 ? "stock accumulation (fp32)" : "accumulation in the compute dtype", v});
  }
  for (auto form : {spec::AttnResImpl::Plain, spec::AttnResImpl::Recompute, spec::AttnResImpl::Fused})
    if (form != base.attn_res) {
      auto v = base;
      v.attn_res = form;
      variants.push_back({std::string("attn-res ") + spec::to_string(form), v});
    }
  for (auto form : {spec::KdaImpl::Recurrent, spec::KdaImpl::Chunked, spec::KdaImpl::Fused})
    if (form != base.kda) {
      auto v = base;
      v.kda = form;
      variants.push_back({std::string("kda ") + spec::to_string(form), v});
    }
  std::set<std::string> seen;  // one pair of transports per pipeline shape, whatever its cache
  for (const auto& l : layouts) {
    const std::string shape = std::to_string(l.opts.pp) + "x" + std::to_string(l.opts.vp) + " " +
                              spec::to_string(l.opts.schedule_or_default()) + " " + l.opts.split;
    if (!seen.insert(shape).second) continue;
    for (auto cache : {spec::Cache::On, spec::Cache::Off}) {
      auto v = l.opts;
      v.dtype = dtype;
      v.cache = cache;
      variants.push_back({"pipelined pp=" + std::to_string(v.pp) + ",vp=" + std::to_string(v.vp) +
                              (v.split.empty() ? "" : ",split=" + v.split) +
                              (cache == spec::Cache::On ? " cached" : " naive"),
                          v});
    }
  }
  const size_t n = truth.layout.size();
  const h5::DType ud = ulp_dtype_of(dtype);
  Floor f;
  f.per_tensor.resize(n);
  for (size_t i = 0; i < n; ++i) f.per_tensor[i] = compare::rounding_floor(truth.grads.values[i], ud);
  f.loss = truth.loss != 0 ? compare::spacing_at(ud, std::fabs(truth.loss)) / std::sqrt(12.0) /
                                 std::fabs(truth.loss)
                           : 0;
  for (size_t k = 0; k < variants.size(); ++k) {
    const auto t0 = Clock::now();
    const auto s = run_step1(variants[k].o);
    std::vector<double> d(n);
    for (size_t i = 0; i < n; ++i) {
      d[i] = compare::relative_distance(s.grads.values[i], truth.grads.values[i]);
      if (!std::isfinite(d[i]))
        throw std::runtime_error("the floor's variant '" + variants[k].label + "' has a "
                                 "non-finite or misplaced gradient in " + truth.layout.names[i] +
                                 "; the step cannot be measured in " + spec::to_string(dtype));
      f.per_tensor[i] = std::max(f.per_tensor[i], d[i]);
    }
    f.loss = std::max(f.loss, compare::relative_scalar(s.loss, truth.loss));
    auto sorted = d;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<long>(n / 2), sorted.end());
    f.variants.push_back({variants[k].label, sorted[n / 2]});
    progress.say(std::string("floor ") + spec::to_string(dtype) + " [" + std::to_string(k + 1) +
                 "/" + std::to_string(variants.size()) + "] " + variants[k].label + ": " +
                 std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()) + " s");
  }
  return f;
}

// The deposits worth trying for a run, most likely first, computed one at a time in fp64: the
// difference dropping one deposit makes to its micro-batch's gradients (the micro-batch alone,
// on the run's layout, scaled to the whole step's normalisation).
class DepositSearch {
 public:
  DepositSearch(const Truth& truth, const Layout& layout, int max_terms, Progress& progress)
      : truth_(truth), layout_(layout), max_terms_(max_terms), progress_(progress) {}

  std::optional<compare::Term> next(const std::vector<size_t>& beyond,
                                    const GradSet& residual) {
    if (!started_) start(beyond, residual);
    while (cursor_ < order_.size()) {
      if (computed_ >= max_terms_) {
        if (!told_) progress_.say("deposit search stopped at --max-terms " + std::to_string(max_terms_));
        told_ = true;
        return std::nullopt;
      }
      const auto [block, stage, mb] = order_[cursor_++];
      return term(block, stage, mb);
    }
    return std::nullopt;
  }

 private:
  struct Candidate {
    int block, stage, mb;
  };

  void start(const std::vector<size_t>& beyond, const GradSet& residual) {
    started_ = true;
    const auto& m = truth_.model;
    if (layout_.opts.cache != spec::Cache::On) return;
    // Block b (b >= 1) sums layers (b-1)*lpb .. b*lpb-1 and block 0 is the embedding's output;
    // a deposit of block b moves the tensors of blocks b and below, nothing above. Per block,
    // the share of its tensors beyond every variant: the highest block where a quarter or more
    // are is tried first, then the others by that share (a bf16 run's noise puts some tensors
    // of every block beyond).
    const int nb = m.n_blocks();
    std::vector<double> total(static_cast<size_t>(nb) + 1, 0), hit(total);
    auto block_of = [&](const std::string& fqn) {
      const int u = unit_of(fqn, m.n_layers);
      return u < 0 ? 0 : u >= m.n_layers ? -1 : std::min(nb, u / m.layers_per_block + 1);
    };
    for (const auto& name : truth_.layout.names) {
      const int b = block_of(name);
      if (b >= 0) total[static_cast<size_t>(b)] += 1;
    }
    for (size_t i : beyond) {
      const int b = block_of(truth_.layout.names[i]);
      if (b >= 0) hit[static_cast<size_t>(b)] += 1;
    }
    std::vector<std::pair<double, int>> share;
    int first = -1;
    for (int b = 0; b <= nb; ++b) {
      const double s = total[static_cast<size_t>(b)] > 0 ? hit[static_cast<size_t>(b)] / total[static_cast<size_t>(b)] : 0;
      if (s >= 0.25) first = b;
      share.push_back({s, b});
    }
    std::stable_sort(share.begin(), share.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    std::vector<int> blocks;
    if (first >= 0) blocks.push_back(first);
    for (const auto& [s, b] : share)
      if (b != first && s > 0) blocks.push_back(b);
    // Micro-batches by how little of the embedding's residual falls outside their tokens.
    const int M = static_cast<int>(truth_.per_microbatch.size());
    std::vector<std::pair<double, int>> mbs;
    const auto emb = std::find(truth_.layout.names.begin(), truth_.layout.names.end(),
                               std::string(kernels::kEmbeddingFqn));
    for (int mb = 0; mb < M; ++mb) {
      double outside = 0;
      if (emb != truth_.layout.names.end()) {
        const size_t e = static_cast<size_t>(emb - truth_.layout.names.begin());
        const auto& shape = truth_.layout.shapes[e];
        const int64_t rows = shape.at(0), dim = shape.size() > 1 ? shape[1] : 1;
        std::vector<char> mine(static_cast<size_t>(rows), 0);
        for (int64_t id : truth_.mb_token_ids[static_cast<size_t>(mb)])
          if (id >= 0 && id < rows) mine[static_cast<size_t>(id)] = 1;
        for (int64_t r = 0; r < rows; ++r)
          if (!mine[static_cast<size_t>(r)])
            for (int64_t k = 0; k < dim; ++k) {
              const double x = residual.values[e][static_cast<size_t>(r * dim + k)];
              outside += x * x;
            }
      }
      mbs.push_back({outside, mb});
    }
    std::stable_sort(mbs.begin(), mbs.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    const auto split = pipelined::make_split(m, pipeline_config(layout_.opts));
    const auto tables = pipelined::make_routing_tables(m.n_layers, m.layers_per_block, split,
                                                       layout_.opts.pp);
    for (int b : blocks)
      for (const auto& [outside, mb] : mbs)
        for (size_t s = 0; s < tables.stages.size(); ++s) {
          const auto& dep = tables.stages[s].deposits;
          if (std::find(dep.begin(), dep.end(), b) != dep.end())
            order_.push_back({b, static_cast<int>(s), mb});
        }
  }

  compare::Term term(int block, int stage, int mb) {
    const auto t0 = Clock::now();
    RunOptions o = layout_.opts;
    o.dtype = spec::Precision::FP64;
    o.microbatches = 1;
    o.reverse_microbatches = false;
    // One micro-batch: 1f1b wants M >= pp. The deposits do not depend on the schedule (the
    // routing tables come from the split), and the interleaved one runs any M.
    o.schedule = spec::ScheduleKind::Interleaved1F1B;
    auto rows = microbatch_rows_of(*truth_.rows, static_cast<int>(truth_.per_microbatch.size()),
                                   o.rows, mb);
    auto& base = base_[mb];
    if (base.values.empty()) base = run_step1(o, rows).grads;
    o.inject = {"drop-deposit:block=" + std::to_string(block) + ",stage=" + std::to_string(stage)};
    auto dropped = run_step1(o, rows).grads;
    const double k = 1.0 / static_cast<double>(truth_.per_microbatch.size());
    compare::Term t;
    t.name = "deposit of block " + std::to_string(block) + " read by stage " +
             std::to_string(stage) + ", micro-batch " + std::to_string(mb);
    t.contribution.values.resize(base.values.size());
    for (size_t i = 0; i < base.values.size(); ++i) {
      auto& c = t.contribution.values[i];
      c.resize(base.values[i].size());
      for (size_t j = 0; j < c.size(); ++j) c[j] = (base.values[i][j] - dropped.values[i][j]) * k;
    }
    ++computed_;
    progress_.say("term [" + std::to_string(computed_) + "] " + t.name + ": " +
                  std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()) + " s");
    return t;
  }

  const Truth& truth_;
  const Layout& layout_;
  int max_terms_;
  Progress& progress_;
  bool started_ = false, told_ = false;
  std::vector<Candidate> order_;
  size_t cursor_ = 0;
  int computed_ = 0;
  std::map<int, GradSet> base_;  // per micro-batch: its fp64 gradients on the layout
};

struct Judged {
  const Run* run;
  compare::RunJudgement j;
  std::optional<TruthVerdict> loss_verdict;
  double loss_distance = 0, loss_floor = 0;
  const Floor* floor;
  bool ok() const {
    return j.wrong == 0 && j.suspect == 0 && (!loss_verdict || *loss_verdict == TruthVerdict::Consistent);
  }
};

std::string num(double v) {
  if (std::isinf(v)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

nlohmann::json finite_or_text(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(std::isnan(v) ? "nan" : "inf");
}

std::string run_summary(const Judged& r) {
  return std::to_string(r.j.consistent) + " CONSISTENT, " + std::to_string(r.j.wrong) +
         " WRONG, " + std::to_string(r.j.suspect) + " SUSPECT";
}

// A checkpoint of another writer (a torch.save or safetensors state dict, a DCP directory),
// imported as `parity init --from` does into a temporary seed checkpoint, removed with this.
class ImportedCheckpoint {
 public:
  ImportedCheckpoint(const std::string& path, spec::Flavor flavor, uint64_t seed) {
    const bool dir = std::filesystem::is_directory(path);
    const auto kind = dir ? dumps::FileKind::Dcp : dumps::detect_kind(path);
    if (kind != dumps::FileKind::TorchSave && kind != dumps::FileKind::Safetensors &&
        kind != dumps::FileKind::Dcp)
      return;  // a parity checkpoint, or a file the run's own check refuses
    const auto cfg = kernels::flavor(flavor);
    auto sd = dumps::params_from_state_dict(path, cfg);
    path_ = (std::filesystem::temp_directory_path() /
             ("parity-truth-" + std::to_string(::getpid()) + ".h5")).string();
    dumps::register_temp_file(path_);
    dumps::write_checkpoint(path_, cfg, seed, sd.params, sd.buffers, git_sha());
  }
  ~ImportedCheckpoint() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove(path_, ec);
    dumps::unregister_temp_file(path_);
  }
  ImportedCheckpoint(const ImportedCheckpoint&) = delete;
  ImportedCheckpoint& operator=(const ImportedCheckpoint&) = delete;
  const std::string& path() const { return path_; }  // "" when nothing was imported

 private:
  std::string path_;
};

}  // namespace

void apply_layout(const std::string& layout, RunOptions& o) {
  o.trainer = spec::Trainer::Pipelined;
  const std::string usage = "; write pp=P,vp=V[,cache=on|off][,schedule=K][,split=SPEC]";
  std::string rest = layout;
  bool have_pp = false;
  while (!rest.empty()) {
    std::string item;
    if (rest.rfind("split=", 0) == 0) {
      item = rest;
      rest.clear();
    } else {
      const auto comma = rest.find(',');
      item = rest.substr(0, comma);
      rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    }
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    const std::string where = "--layout '" + spec::printable(layout, 200) + "'";
    if (eq == std::string::npos || value.empty())
      throw UsageError(where + ": cannot read '" + spec::printable(item, 80) + "'" + usage);
    if (key == "pp" || key == "vp") {
      const auto problem = spec::integer_problem(value, 1, key == "pp" ? 64 : 16);
      if (!problem.empty()) throw UsageError(where + ": " + key + " " + problem);
      (key == "pp" ? o.pp : o.vp) = std::stoi(value);
      have_pp |= key == "pp";
    } else if (key == "cache") {
      o.cache = spec::caches().parse(value, where + " cache");
    } else if (key == "schedule") {
      o.schedule = spec::schedules().parse(value, where + " schedule");
    } else if (key == "split") {
      o.split = value;
    } else {
      throw UsageError(where + ": unknown key '" + spec::printable(key, 40) + "'" + usage);
    }
  }
  if (!have_pp) throw UsageError("--layout '" + spec::printable(layout, 200) + "' names no pp" + usage);
}

int truth_command(const TruthOptions& o) {
  Progress progress(o.quiet);
  if (o.runs.empty()) throw UsageError("give at least one run's step-1 gradients");
  if (o.layouts.size() > 1 && o.layouts.size() != o.runs.size())
    throw UsageError("--layout given " + std::to_string(o.layouts.size()) + " times for " +
                     std::to_string(o.runs.size()) + " runs; give one for every run, or one "
                     "for all");
  if (!o.logs.empty() && o.logs.size() != o.runs.size())
    throw UsageError("--log given " + std::to_string(o.logs.size()) + " times for " +
                     std::to_string(o.runs.size()) + " runs; give one per run ('' for none)");
  if (!o.junit.empty()) check_output_file("--junit", o.junit);
  if (!o.markdown.empty()) check_output_file("--markdown", o.markdown);
  const auto t_start = Clock::now();

  // The step, checked once: flavor, checkpoint, batch, shape.
  RunOptions step = o.run;
  std::unique_ptr<ImportedCheckpoint> imported;
  if (!step.init_path.empty() && std::filesystem::exists(step.init_path)) {
    imported = std::make_unique<ImportedCheckpoint>(step.init_path, step.flavor, step.seed);
    if (!imported->path().empty()) step.init_path = imported->path();
  }
  step.trainer = spec::Trainer::Reference;
  step.steps = 1;
  step.dp = 1;
  step.pp = step.vp = 1;
  step.inject.clear();
  step.reverse_microbatches = false;
  RunOptions truth_opts = step;
  truth_opts.dtype = spec::Precision::FP64;
  const PreparedRun prepared = validate_run(truth_opts);
  Truth truth;
  truth.model = prepared.cfg.model;
  truth.rows = prepared.rows;
  truth.layout.names = prepared.init.names();
  for (const auto& t : prepared.init.tensors()) truth.layout.shapes.push_back(t.sizes().vec());

  std::vector<Layout> layouts;
  for (const auto& text : o.layouts) {
    Layout l{text, step};
    if (!text.empty()) {
      apply_layout(text, l.opts);
      try {
        validate_run(l.opts);  // refuses a layout that does not fit the flavor or the shape
        pipelined::make_schedule(l.opts.schedule_or_default(), l.opts.pp, l.opts.vp,
                                 l.opts.microbatches);
      } catch (const spec::BadInput& e) {
        throw UsageError("--layout '" + spec::printable(text, 200) + "': " + e.what());
      }
    }
    layouts.push_back(std::move(l));
  }

  // The runs, read and checked before anything is computed.
  const dumps::NameMap names = o.map.empty() ? dumps::NameMap{} : dumps::read_name_map(o.map);
  std::vector<Run> runs;
  for (size_t r = 0; r < o.runs.size(); ++r) {
    Run run = read_run_grads(o.runs[r], truth.layout, names, o);
    const std::string lt = o.layouts.empty() ? "" : o.layouts.size() == 1 ? o.layouts[0] : o.layouts[r];
    if (!lt.empty()) {
      run.layout = layouts[o.layouts.size() == 1 ? 0 : r];
      check_layout_against_dump(o.runs[r], *run.layout, truth.model, names);
    }
    if (!o.logs.empty() && !o.logs[r].empty()) {
      const auto log = dumps::read_training_log(o.logs[r]);
      if (log.steps.empty() || log.steps[0].step != 1)
        throw UsageError("--log '" + spec::printable(o.logs[r], 200) + "' has no step 1");
      run.loss = log.steps[0].loss;
      run.loss_from = "--log";
    }
    runs.push_back(std::move(run));
  }
  std::vector<Layout> used_layouts;
  for (const auto& l : layouts)
    if (!l.text.empty()) used_layouts.push_back(l);

  // The truth and its per-micro-batch terms.
  {
    const auto t0 = Clock::now();
    Step1 s;
    run_prepared(truth_opts, prepared, s);
    truth.grads = std::move(s.grads);
    truth.loss = s.loss;
    progress.say("truth (fp64 reference): " +
                 std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()) + " s");
  }
  const int M = step.microbatches;
  for (int m = 0; m < M; ++m) {
    const auto t0 = Clock::now();
    auto rows = microbatch_rows_of(*truth.rows, M, step.rows, m);
    std::vector<int64_t> ids;
    for (int64_t r = 0; r < rows->num_rows(); ++r)
      ids.insert(ids.end(), rows->row(r), rows->row(r) + rows->seq_len());
    truth.mb_token_ids.push_back(std::move(ids));
    RunOptions one = truth_opts;
    one.microbatches = 1;
    auto g = run_step1(one, rows).grads;
    // Micro-batch m alone is normalised by its own tokens, B*T; the step by M*B*T.
    scale(g, 1.0 / M);
    truth.per_microbatch.push_back(std::move(g));
    progress.say("truth of micro-batch " + std::to_string(m) + ": " +
                 std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()) + " s");
  }
  // The terms must add up to the truth: the check that the micro-batches were cut as the step
  // cuts them (an fp64 sum of M terms in another order: a few fp64 ulps).
  double worst_sum = 0;
  for (size_t i = 0; i < truth.layout.size(); ++i) {
    std::vector<double> sum(truth.grads.values[i].size(), 0);
    for (const auto& c : truth.per_microbatch)
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += c.values[i][k];
    worst_sum = std::max(worst_sum, compare::relative_distance(sum, truth.grads.values[i]));
  }
  if (!(worst_sum < 1e-10))
    throw std::runtime_error("the per-micro-batch truths do not add up to the truth (relative " +
                             num(worst_sum) + "): the step's normalisation is not per token");

  // The floor of every dtype the runs hold.
  std::map<spec::Precision, Floor> floors;
  for (const auto& run : runs)
    if (!floors.count(run.dtype))
      floors[run.dtype] = measure_floor(step, run.dtype, truth, used_layouts, progress);

  // The verdicts.
  std::vector<Judged> judged;
  for (const auto& run : runs) {
    const Floor& f = floors.at(run.dtype);
    compare::OracleInputs in;
    in.layout = &truth.layout;
    in.truth = &truth.grads;
    in.floor = f.per_tensor;
    in.per_microbatch = &truth.per_microbatch;
    in.margin = o.margin;
    std::unique_ptr<DepositSearch> search;
    compare::TermSource terms;
    if (run.layout) {
      search = std::make_unique<DepositSearch>(truth, *run.layout, o.max_terms, progress);
      terms = [&search](const std::vector<size_t>& beyond, const GradSet& residual) {
        return search->next(beyond, residual);
      };
    }
    Judged j{&run, compare::judge_run(in, run.grads, terms), std::nullopt, 0, 0, &f};
    const h5::DType ud = ulp_dtype_of(run.dtype);
    for (size_t i = 0; i < truth.layout.size(); ++i)
      j.j.tensors[i].scale_ulps = compare::scale_ulps(run.grads.values[i], truth.grads.values[i], ud);
    if (run.loss) {
      j.loss_distance = compare::relative_scalar(*run.loss, truth.loss);
      j.loss_floor = f.loss;
      j.loss_verdict = j.loss_distance <= o.margin * f.loss ? TruthVerdict::Consistent : TruthVerdict::Suspect;
    }
    judged.push_back(std::move(j));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  const bool all_ok = std::all_of(judged.begin(), judged.end(), [](const Judged& j) { return j.ok(); });

  // Outputs.
  if (!o.junit.empty()) {
    std::vector<dumps::JunitCase> cases;
    for (const auto& j : judged) {
      dumps::JunitCase c{"parity.truth", "run " + j.run->path, 0, dumps::JunitCase::Passed, "", ""};
      if (!j.ok()) {
        c.outcome = dumps::JunitCase::Failed;
        c.message = run_summary(j);
        for (const auto& d : j.j.defects)
          c.detail += "WRONG: " + d.text + " (fit " + num(d.fit) + ", " +
                      std::to_string(d.tensors.size()) + " tensors)\n";
        for (const auto& t : j.j.tensors)
          if (t.verdict == TruthVerdict::Suspect)
            c.detail += "SUSPECT: " + t.name + " at " + num(t.ratio) + " x its floor\n";
        if (j.loss_verdict && *j.loss_verdict != TruthVerdict::Consistent)
          c.detail += "SUSPECT: the step-1 loss at " + num(j.loss_distance / j.loss_floor) +
                      " x its floor\n";
      }
      cases.push_back(std::move(c));
    }
    dumps::write_junit(o.junit, {{"parity.truth", cases}});
  }
  if (!o.markdown.empty()) {
    std::string md = std::string("**parity truth**: ") + std::to_string(judged.size()) +
                     " run(s) against the fp64 truth: **" + (all_ok ? "CONSISTENT" : "NOT CONSISTENT") +
                     "**\n\n| run | dtype | verdicts | defects |\n|---|---|---|---|\n";
    for (const auto& j : judged) {
      std::string defects;
      for (const auto& d : j.j.defects) defects += (defects.empty() ? "" : "<br>") + d.text;
      md += "| `" + j.run->path + "` | " + spec::to_string(j.run->dtype) + " | " + run_summary(j) +
            " | " + defects + " |\n";
    }
    dumps::write_file_atomically(o.markdown, md);
  }
  if (o.json) {
    nlohmann::json out;
    out["truth"] = {{"loss", truth.loss}, {"microbatches", M}, {"tensors", truth.layout.size()},
                    {"terms_sum_relative", worst_sum}};
    out["margin"] = o.margin;
    out["floors"] = nlohmann::json::object();
    for (const auto& [dt, f] : floors) {
      nlohmann::json v = nlohmann::json::array();
      for (const auto& [label, med] : f.variants) v.push_back({{"variant", label}, {"median_distance", med}});
      out["floors"][spec::to_string(dt)] = {{"median_tensor_floor", median_of(f.per_tensor)},
                                            {"worst_tensor_floor", *std::max_element(f.per_tensor.begin(), f.per_tensor.end())},
                                            {"loss", f.loss},
                                            {"variants", v}};
    }
    out["runs"] = nlohmann::json::array();
    for (const auto& j : judged) {
      nlohmann::json r;
      r["path"] = j.run->path;
      r["dtype"] = spec::to_string(j.run->dtype);
      r["layout"] = j.run->layout ? j.run->layout->text : "";
      r["consistent"] = j.j.consistent;
      r["wrong"] = j.j.wrong;
      r["suspect"] = j.j.suspect;
      r["pass"] = j.ok();
      r["microbatch_weights"] = j.j.mb_weights;
      r["notes"] = j.j.notes;
      r["defects"] = nlohmann::json::array();
      for (const auto& d : j.j.defects)
        r["defects"].push_back({{"kind", d.kind}, {"text", d.text}, {"fit", d.fit}, {"tensors", d.tensors}});
      if (j.loss_verdict)
        r["loss"] = {{"value", *j.run->loss}, {"from", j.run->loss_from},
                     {"distance", finite_or_text(j.loss_distance)}, {"floor", j.loss_floor},
                     {"verdict", compare::to_string(*j.loss_verdict)}};
      r["tensors"] = nlohmann::json::array();
      for (const auto& t : j.j.tensors) {
        nlohmann::json tj = {{"name", t.name}, {"numel", t.numel},
                             {"distance", finite_or_text(t.distance)}, {"floor", t.floor},
                             {"ratio", finite_or_text(t.ratio)},
                             {"scale_ulps", finite_or_text(t.scale_ulps)},
                             {"verdict", compare::to_string(t.verdict)}};
        if (t.defect >= 0) tj["defect"] = j.j.defects[static_cast<size_t>(t.defect)].text;
        if (!t.mb_weights.empty()) tj["microbatch_weights"] = t.mb_weights;
        r["tensors"].push_back(std::move(tj));
      }
      out["runs"].push_back(std::move(r));
    }
    out["seconds"] = seconds;
    out["pass"] = all_ok;
    std::cout << out.dump(2) << "\n";
    return all_ok ? 0 : 1;
  }
  std::printf("# parity truth: flavor %s, %d micro-batches x %d rows x %lld tokens; truth (fp64) "
              "loss %.9g; margin %g x the floor\n",
              spec::to_string(step.flavor), M, step.rows, static_cast<long long>(step.seq_len),
              truth.loss, o.margin);
  std::printf("# per-micro-batch truths add up to the truth within %s (relative)\n", num(worst_sum).c_str());
  for (const auto& [dt, f] : floors) {
    std::printf("# floor %s: median tensor %s, worst %s, loss %s; from the rounding of the truth and %zu variants:\n",
                spec::to_string(dt), num(median_of(f.per_tensor)).c_str(),
                num(*std::max_element(f.per_tensor.begin(), f.per_tensor.end())).c_str(),
                num(f.loss).c_str(), f.variants.size());
    for (const auto& [label, med] : f.variants)
      std::printf("#   %-40s median distance %s\n", label.c_str(), num(med).c_str());
  }
  for (const auto& j : judged) {
    std::vector<double> ratios;
    size_t worst = 0;
    for (size_t i = 0; i < j.j.tensors.size(); ++i) {
      ratios.push_back(j.j.tensors[i].ratio);
      if (!(j.j.tensors[i].ratio <= j.j.tensors[worst].ratio)) worst = i;
    }
    std::printf("\nrun %s (%s%s): %s; distance / floor: median %s, worst %s (%s)\n",
                spec::printable(j.run->path, 200).c_str(), spec::to_string(j.run->dtype),
                j.run->layout ? (", layout " + j.run->layout->text).c_str() : "",
                run_summary(j).c_str(), num(median_of(ratios)).c_str(),
                num(j.j.tensors[worst].ratio).c_str(), j.j.tensors[worst].name.c_str());
    if (!j.j.mb_weights.empty()) {
      std::string w;
      for (double x : j.j.mb_weights) w += (w.empty() ? "" : ", ") + num(x);
      std::printf("  micro-batch weights: %s\n", w.c_str());
    }
    if (j.loss_verdict)
      std::printf("  loss (%s) %.9g: distance %s, floor %s: %s\n", j.run->loss_from.c_str(),
                  *j.run->loss, num(j.loss_distance).c_str(), num(j.loss_floor).c_str(),
                  compare::to_string(*j.loss_verdict));
    for (const auto& d : j.j.defects)
      std::printf("  WRONG: %s (fit %.6f; %zu tensors)\n", d.text.c_str(), d.fit, d.tensors.size());
    for (const auto& n : j.j.notes) std::printf("  note: %s\n", n.c_str());
    int shown = 0;
    for (const auto& t : j.j.tensors) {
      if (t.verdict == TruthVerdict::Consistent) continue;
      if (++shown > 20) {
        std::printf("  ... %d more beyond the floor (see --json)\n",
                    j.j.wrong + j.j.suspect - 20);
        break;
      }
      std::printf("  %-10s %-46s distance %-9s floor %-9s x%-9s %s\n", compare::to_string(t.verdict),
                  t.name.c_str(), num(t.distance).c_str(), num(t.floor).c_str(),
                  num(t.ratio).c_str(),
                  t.defect >= 0 ? j.j.defects[static_cast<size_t>(t.defect)].text.c_str() : "");
    }
  }
  std::printf("\n%s: %zu run(s) in %.1f s\n", all_ok ? "CONSISTENT" : "NOT CONSISTENT", judged.size(),
              seconds);
  return all_ok ? 0 : 1;
}

}  // namespace parity::harness
