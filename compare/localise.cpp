#include "compare/localise.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "compare/dump_compare.h"
#include "compare/exact_math.h"
#include "spec/limits.h"
#include "compare/predicted.h"
#include "dumps/dump.h"
#include "dumps/ledger_dump.h"
#include "kernels/config.h"
#include "kernels/params.h"
#include "pipelined/routing.h"
#include "pipelined/split.h"

namespace parity::compare {

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::Exact: return "EXACT";
    case Verdict::OrderOnly: return "ORDER-ONLY";
    case Verdict::Wrong: return "WRONG";
  }
  return "?";
}

int LocaliseReport::count(Verdict v) const {
  return static_cast<int>(std::count_if(tensors.begin(), tensors.end(),
                                        [v](const TensorVerdict& t) { return t.verdict == v; }));
}

bool LocaliseReport::ok() const {
  if (!findings.empty()) return false;
  for (const auto& b : blocks)
    if (b.verdict == Verdict::Wrong) return false;
  return count(Verdict::Wrong) == 0;
}

namespace {

std::vector<double> values(const h5::Array& a) {
  const int64_t n = a.numel();
  std::vector<double> out(static_cast<size_t>(n));
  const unsigned char* p = a.bytes.data();
  for (int64_t i = 0; i < n; ++i) {
    switch (a.dtype) {
      case h5::DType::BF16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        const uint32_t w = static_cast<uint32_t>(h) << 16;
        float f;
        std::memcpy(&f, &w, 4);
        out[i] = f;
        break;
      }
      case h5::DType::F32: {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        out[i] = f;
        break;
      }
      case h5::DType::F64: std::memcpy(&out[i], p + 8 * i, 8); break;
      default: throw dumps::DumpError("ledger: a tensor of non-float dtype");
    }
  }
  return out;
}

int significand_bits(h5::DType t) {
  return t == h5::DType::BF16 ? 8 : t == h5::DType::F32 ? 24 : 53;
}

// gamma_k = k u / (1 - k u), u = 2^-p.
double gamma(int k, int p) {
  const double ku = k * std::ldexp(1.0, -p);
  return ku / (1.0 - ku);
}

// What one run is: its model shape, split and routing.
struct RunShape {
  kernels::ModelConfig model;
  pipelined::Split split;
  bool pipelined = false, cache = false;
  int pp = 1;
  std::map<std::string, int> unit_of;  // FQN -> unit

  int stage_of(int unit) const { return split.stage_of_unit(unit); }
};

RunShape run_shape(const dumps::Dump& d) {
  RunShape r;
  r.model = kernels::flavor(d.meta.at("flavor"));
  for (const auto& s : kernels::param_specs(r.model)) r.unit_of[s.fqn] = s.unit;
  const std::string& text = d.meta.at("config");
  nlohmann::json cfg = spec::json_depth(text) > spec::kMaxJsonDepth
                           ? nlohmann::json()
                           : nlohmann::json::parse(text, nullptr, false);
  r.pipelined = cfg.is_object() && cfg.value("trainer", "") == "pipelined";
  if (r.pipelined) {
    r.pp = std::stoi(cfg.value("pp", "1"));
    r.cache = cfg.value("cache", "off") == "on";
    r.split = pipelined::parse_split(cfg.value("split", ""), r.model.n_layers);
  } else {
    std::vector<int> all{pipelined::kEmbUnit};
    for (int l = 0; l <= r.model.n_layers; ++l) all.push_back(l);
    r.split = pipelined::Split(r.model.n_layers, {all});
  }
  return r;
}

// The blocks some stage reads from its rank's store: their deposits are the only sums whose
// order the cached transport changes.
// The blocks the run's stages read from their ranks' stores (none without the cache).
std::set<int> run_deposits(const RunShape& r) {
  if (!r.pipelined || !r.cache) return {};
  return deposited_blocks(r.model.n_layers, r.model.layers_per_block, r.split, r.pp);
}

// One side's block gradient against its own contributions.
struct SelfCheck {
  bool present = false, ok = true;
  double excess = 0;              // max over elements of |G - S| / bound (inf if bound is 0)
  std::vector<double> residual;   // G - S, elementwise
  std::vector<double> abs_sum;    // sum_i |c_i|, elementwise
  int n = 0;
};

SelfCheck self_check(const dumps::LedgerBlock& b) {
  SelfCheck sc;
  if (!b.has_grad) return sc;
  sc.present = true;
  const auto g = values(b.grad);
  const int64_t E = static_cast<int64_t>(g.size());
  std::vector<double> c;
  if (!b.contributions.bytes.empty()) c = values(b.contributions);
  sc.n = E > 0 ? static_cast<int>(c.size() / E) : 0;
  const int p = significand_bits(b.grad.dtype);
  const double gam = gamma(std::max(sc.n - 1, 0), p);
  sc.residual.resize(E);
  sc.abs_sum.assign(E, 0.0);
  for (int64_t e = 0; e < E; ++e) {
    Dyadic s = 0;
    for (int i = 0; i < sc.n; ++i) {
      const double v = c[static_cast<size_t>(i) * E + e];
      s += Dyadic::from_double(v);
      sc.abs_sum[e] += std::fabs(v);
    }
    const Dyadic diff = Dyadic::from_double(g[e]) - s;
    const double r = diff.to_double();
    sc.residual[e] = r;
    // The bound in double carries its own rounding: allow it a relative 2^-40.
    const double bound = gam * sc.abs_sum[e] * (1 + std::ldexp(1.0, -40));
    if (diff.is_zero()) continue;
    const double x = bound > 0 ? std::fabs(r) / bound : INFINITY;
    sc.excess = std::max(sc.excess, x);
    if (std::fabs(r) > bound) sc.ok = false;
  }
  return sc;
}

struct Side {
  std::string name;
  const RunShape* shape;
  dumps::StepLedger ledger;
  std::map<std::pair<int, int>, SelfCheck> checks;
};

// Sum of the contributions to block `block` of micro-batch mb read on `stage`.
std::vector<double> stage_terms(const Side& s, int mb, int block, int stage, int64_t E) {
  std::vector<double> d(E, 0.0);
  auto it = s.ledger.blocks.find({mb, block});
  if (it == s.ledger.blocks.end() || it->second.contributions.bytes.empty()) return d;
  const auto c = values(it->second.contributions);
  for (size_t row = 0; row < it->second.reads.size(); ++row) {
    const auto& r = s.ledger.reads[it->second.reads[row]];
    if (s.shape->stage_of(r.unit) != stage) continue;
    for (int64_t e = 0; e < E; ++e) {
      d[e] += c[row * E + e];
    }
  }
  return d;
}

double norm2(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

// Why a block gradient lies outside its bound. The residual R = G - (exact sum of its terms)
// is matched against k * D for k = +-1 and D one stage's terms to one block of the same
// micro-batch (or all the deposited terms together). Candidates that remove most of R are
// then told apart by the protocol's deposit events: at step 1 of the real model (zero
// pseudo-queries) every column of a read gets the same gradient, so the numbers alone cannot
// say which block a deposit belonged to, but the events can.
std::string explain(const Side& s, int mb, int block, const SelfCheck& sc) {
  const int64_t E = static_cast<int64_t>(sc.residual.size());
  const int stages = s.shape->split.num_stages();
  const int owner = s.shape->stage_of(s.ledger.blocks.at({mb, block}).unit);
  auto deposits = [&](int stage, int blk) {
    int n = 0;
    for (const auto& ev : s.ledger.events)
      if (ev.kind == "deposit" && ev.mb == mb && ev.block == blk && ev.stage == stage) ++n;
    return n;
  };
  struct Candidate {
    double score;
    int k, stage, block;  // stage -1: every depositor together
  };
  std::vector<Candidate> cands;
  auto consider = [&](const std::vector<double>& d, int k, int stage, int blk) {
    if (norm2(d) == 0) return;
    std::vector<double> rest(E);
    for (int64_t e = 0; e < E; ++e) rest[e] = sc.residual[e] - k * d[e];
    cands.push_back({norm2(rest) / std::max(norm2(sc.residual), 1e-300), k, stage, blk});
  };
  std::set<int> blocks;
  for (const auto& [key, b] : s.ledger.blocks)
    if (key.first == mb) blocks.insert(key.second);
  int depositors = 0;
  std::vector<double> all(E, 0.0);
  for (int st = 0; st < stages; ++st)
    for (int other : blocks) {
      auto d = stage_terms(s, mb, other, st, E);
      if (other != block) {
        consider(d, +1, st, other);
        continue;
      }
      consider(d, -1, st, other);
      consider(d, +1, st, other);
      if (deposits(st, block) > 0) {
        ++depositors;
        for (int64_t e = 0; e < E; ++e) all[e] += d[e];
      }
    }
  if (depositors > 1) consider(all, -1, -1, block);
  double best = INFINITY;
  for (const auto& c : cands) best = std::min(best, c.score);
  if (best > 0.5) return "the gradient is not the sum of its recorded contributions in any order";

  // Among the near-best, the one the events agree with.
  auto agrees = [&](const Candidate& c) {
    if (c.stage < 0) return true;
    if (c.k < 0) return true;  // lacking: dropped (no deposit) or not collected (deposited)
    if (c.block == block) return deposits(c.stage, block) >= 2;
    return deposits(c.stage, c.block) == 0 && deposits(c.stage, block) >= 1;
  };
  const Candidate* pick = nullptr;
  for (const auto& c : cands)
    if (c.score <= best + 0.05 && (!pick || (agrees(c) && !agrees(*pick)))) pick = &c;
  const auto& c = *pick;
  const std::string b = "block " + std::to_string(block);
  if (c.stage < 0)
    return "the gradient lacks every deposit: the owner (stage " + std::to_string(owner) +
           ") skipped collecting " + b;
  const std::string st = "stage " + std::to_string(c.stage);
  if (c.k < 0)
    return deposits(c.stage, block) == 0
               ? "the gradient lacks " + st + "'s contribution, and " + st +
                     " deposited nothing for " + b + ": a dropped deposit"
               : "the gradient lacks " + st + "'s contribution though " + st + " deposited it: " +
                     "the owner (stage " + std::to_string(owner) + ") skipped collecting " + b;
  if (c.block == block)
    return "the gradient holds " + st + "'s contribution twice (" + st + " deposited " + b + " " +
           std::to_string(deposits(c.stage, block)) + " times): a duplicated deposit";
  return "the gradient holds " + st + "'s contribution to block " + std::to_string(c.block) +
         ", which " + st + " never deposited there: a deposit misrouted from block " +
         std::to_string(c.block) + " to " + b;
}

// One record of the execution, for the first divergence: its order and what it is.
struct Record {
  // step, phase (0 forward, 1 backward), stage (ascending forward, descending backward),
  // micro-batch, kind, its sub-order, name
  std::tuple<int64_t, int, int, int, int, int, std::string> order;
  int mb = 0, stage = 0;
  std::string hop, tensor;
};

using BlockKey = std::pair<int, int>;  // (mb, block)

// The dumped steps with a ledger on both sides, ascending; throws when there is none.
std::vector<int64_t> common_steps(const dumps::Dump& a, const dumps::Dump& b,
                                  const std::string& a_path, const std::string& b_path) {
  std::vector<int64_t> steps;
  for (const auto& [step, _] : a.steps)
    if (b.steps.count(step) && dumps::has_ledger(a_path, step) && dumps::has_ledger(b_path, step))
      steps.push_back(step);
  if (steps.empty())
    throw dumps::DumpError("'" + a_path + "' and '" + b_path +
                    "' share no dumped step with a ledger on both sides; rerun both with "
                    "`parity train ... --ledger --dump DIR --dump-steps N`");
  return steps;
}

// The predicted set: the FQNs upstream of a block that either run reads from a rank's store.
std::set<std::string> predicted_set(const RunShape& sa, const RunShape& sb) {
  std::set<int> deposited = run_deposits(sa);
  for (int blk : run_deposits(sb)) deposited.insert(blk);
  std::set<std::string> predicted;
  for (const auto& [fqn, unit] : sa.unit_of)
    for (int blk : deposited)
      if (feeds(unit, blk, sa.model.layers_per_block)) predicted.insert(fqn);
  return predicted;
}

// The blocks of one side outside their bound, in block order; fills s.checks for every block.
std::vector<Finding> check_blocks(Side& s, int64_t step) {
  std::vector<Finding> out;
  for (const auto& [key, blk] : s.ledger.blocks) {
    auto sc = self_check(blk);
    if (sc.present && !sc.ok)
      out.push_back({s.name, step, key.first, key.second, s.shape->stage_of(blk.unit),
                     explain(s, key.first, key.second, sc)});
    s.checks[key] = std::move(sc);
  }
  return out;
}

// The reads of one side that did not read what was committed for their micro-batch, in order.
std::vector<Finding> check_reads(const Side& s, int64_t step) {
  std::vector<Finding> out;
  for (const auto& r : s.ledger.reads) {
    auto it = s.ledger.blocks.find({r.mb, r.block});
    if (it == s.ledger.blocks.end() || it->second.hash == r.hash) continue;
    std::string from = "a value no micro-batch committed";
    for (const auto& [key, other] : s.ledger.blocks)
      if (key.second == r.block && other.hash == r.hash)
        from = "micro-batch " + std::to_string(key.first) + "'s copy: a stale block";
    out.push_back({s.name, step, r.mb, r.block, s.shape->stage_of(r.unit),
                   r.reader + " read block " + std::to_string(r.block) + " of micro-batch " +
                       std::to_string(r.mb) + " as " + from});
  }
  return out;
}

// Whether every read of run A has the same value in run B; the differing ones go to diverged.
bool forward_reads_same(const Side& A, const Side& B, int64_t step, std::vector<Record>& diverged) {
  bool same = true;
  std::map<std::tuple<int, int, std::string>, std::string> read_hash_b;
  for (const auto& r : B.ledger.reads) read_hash_b[{r.mb, r.block, r.reader}] = r.hash;
  for (const auto& r : A.ledger.reads) {
    auto it = read_hash_b.find({r.mb, r.block, r.reader});
    if (it == read_hash_b.end() || it->second == r.hash) continue;
    same = false;
    const int st = A.shape->stage_of(r.unit);
    diverged.push_back({{step, 0, st, r.mb, 0, r.unit, r.reader}, r.mb, st, "forward read",
                        "block " + std::to_string(r.block) + " read by " + r.reader});
  }
  return same;
}

// Whether every forward hop is bitwise equal (true when the splits differ); the differing hops,
// forward and backward, go to diverged.
bool forward_hops_same(const Side& A, const Side& B, int64_t step, std::vector<Record>& diverged) {
  if (A.shape->split.spec() != B.shape->split.spec()) return true;
  bool same = true;
  std::map<std::tuple<int, int, int, bool>, std::string> hop_b;
  for (const auto& h : B.ledger.hops) hop_b[{h.mb, h.from, h.to, h.forward}] = h.hash;
  for (const auto& h : A.ledger.hops) {
    auto it = hop_b.find({h.mb, h.from, h.to, h.forward});
    if (it == hop_b.end() || it->second == h.hash) continue;
    if (h.forward) same = false;
    // Within a stage: forward reads before the send, backward block gradients before it.
    const int phase = h.forward ? 0 : 1, stage = h.forward ? h.from : -h.from;
    diverged.push_back({{step, phase, stage, h.mb, 1, 0, h.tensor}, h.mb, h.from,
                        std::string(h.forward ? "forward" : "backward") + " hop " +
                            std::to_string(h.from) + "->" + std::to_string(h.to),
                        h.tensor});
  }
  return same;
}

// The readers of one side's block gradient, sorted: its contributions as a multiset.
std::vector<std::string> sorted_readers(const Side& s, const dumps::LedgerBlock& blk) {
  std::vector<std::string> out;
  for (size_t i : blk.reads) out.push_back(s.ledger.reads[i].reader);
  std::sort(out.begin(), out.end());
  return out;
}

// The verdict on one block gradient of a step, from both sides' ledgers and self-checks.
BlockVerdict block_verdict(const Side& A, const Side& B, int64_t step, const BlockKey& key) {
  BlockVerdict bv;
  bv.step = step;
  bv.mb = key.first;
  bv.block = key.second;
  auto ia = A.ledger.blocks.find(key), ib = B.ledger.blocks.find(key);
  if (ia == A.ledger.blocks.end() || ib == B.ledger.blocks.end()) {
    bv.verdict = Verdict::Wrong;
    bv.why = std::string("only in run ") + (ia == A.ledger.blocks.end() ? "B" : "A");
    return bv;
  }
  const auto& ba = ia->second;
  const auto& bb = ib->second;
  bv.stage = A.shape->stage_of(ba.unit);
  const auto& ca = A.checks.at(key);
  const auto& cb = B.checks.at(key);
  bv.contributions = ca.n;
  bv.excess_a = ca.excess;
  bv.excess_b = cb.excess;
  const auto ra = sorted_readers(A, ba), rb = sorted_readers(B, bb);
  if (!ba.has_grad && !bb.has_grad) {
    bv.verdict = Verdict::Exact;  // nothing trainable upstream (a frozen embedding)
  } else if (ba.has_grad != bb.has_grad) {
    bv.verdict = Verdict::Wrong;
    bv.why = "a gradient on one side only";
  } else if (ra != rb) {
    bv.verdict = Verdict::Wrong;
    bv.why = "different readers: " + std::to_string(ra.size()) + " contributions against " +
             std::to_string(rb.size());
  } else if (ba.grad.bytes == bb.grad.bytes) {
    bv.verdict = Verdict::Exact;
  } else if (!ca.ok || !cb.ok) {
    bv.verdict = Verdict::Wrong;
    bv.why = std::string("run ") + (!ca.ok ? "A" : "B") +
             "'s gradient is outside the bound of its own contributions";
  } else {
    bv.verdict = Verdict::OrderOnly;
  }
  if (bv.verdict == Verdict::Exact && ca.present && (!ca.ok || !cb.ok)) {
    bv.verdict = Verdict::Wrong;  // equal, and equally wrong
    bv.why = "both runs' gradients are outside the bound of their contributions";
  }
  return bv;
}

// Whether a block gradient is on both sides and differs bitwise.
bool gradients_differ(const Side& A, const Side& B, const BlockKey& key) {
  auto ia = A.ledger.blocks.find(key), ib = B.ledger.blocks.find(key);
  if (ia == A.ledger.blocks.end() || ib == B.ledger.blocks.end()) return false;
  const auto& ba = ia->second;
  const auto& bb = ib->second;
  return ba.has_grad && bb.has_grad && ba.grad.bytes != bb.grad.bytes;
}

// The verdicts on a step's block gradients by key; each is appended to blocks in key order and
// each differing gradient goes to diverged.
std::map<BlockKey, Verdict> block_verdicts(const Side& A, const Side& B, int64_t step,
                                           std::vector<BlockVerdict>& blocks,
                                           std::vector<Record>& diverged) {
  std::set<BlockKey> keys;
  for (const auto& [k, _] : A.ledger.blocks) keys.insert(k);
  for (const auto& [k, _] : B.ledger.blocks) keys.insert(k);
  std::map<BlockKey, Verdict> verdicts;
  for (const auto& key : keys) {
    const BlockVerdict bv = block_verdict(A, B, step, key);
    if (gradients_differ(A, B, key))
      // A stage's backward delivers its later blocks' gradients first.
      diverged.push_back({{step, 1, -bv.stage, key.first, 0, -key.second, ""}, key.first, bv.stage,
                          "backward block gradient", "block " + std::to_string(key.second)});
    verdicts[key] = bv.verdict;
    blocks.push_back(bv);
  }
  return verdicts;
}

// What a step's tensor verdicts are judged against.
struct StepContext {
  const RunShape& shape;  // run A's
  const std::set<std::string>& predicted;
  bool forward_same;
  const std::map<BlockKey, Verdict>& blocks;
};

// Sets tv's verdict and reason for a differing gradient of unit `unit`, from the blocks it feeds.
void judge_gradient(TensorVerdict& tv, int unit, const StepContext& ctx) {
  bool wrong_upstream = false, any_differs = false;
  for (const auto& [key, v] : ctx.blocks) {
    if (!feeds(unit, key.second, ctx.shape.model.layers_per_block)) continue;
    wrong_upstream = wrong_upstream || v == Verdict::Wrong;
    any_differs = any_differs || v != Verdict::Exact;
  }
  if (wrong_upstream) {
    tv.verdict = Verdict::Wrong;
    tv.why = "a block gradient it depends on is WRONG";
  } else if (!tv.predicted) {
    tv.verdict = Verdict::Wrong;
    tv.why = "differs outside the predicted set";
  } else if (!any_differs) {
    tv.verdict = Verdict::Wrong;
    tv.why = "differs though every block gradient it depends on is bitwise equal";
  } else {
    tv.verdict = Verdict::OrderOnly;
    tv.why = "inherits ORDER-ONLY block gradients";
  }
}

// The verdict on one compared tensor; grad_norm and parameters stay ORDER-ONLY until settled.
TensorVerdict tensor_verdict(const TensorDiff& d, int64_t step, const StepContext& ctx) {
  TensorVerdict tv;
  tv.step = step;
  tv.name = d.name;
  tv.wrong = d.wrong;
  tv.max_ulp = d.max_ulp;
  tv.nmse = d.nmse;
  const bool is_grad = d.name.rfind("grads/", 0) == 0;
  const bool is_param = d.name.rfind("params/", 0) == 0;
  const std::string fqn = is_grad ? d.name.substr(6) : is_param ? d.name.substr(7) : "";
  tv.predicted = !fqn.empty() && ctx.predicted.count(fqn);
  if (!d.problem.empty()) {
    tv.verdict = Verdict::Wrong;
    tv.why = d.problem;
  } else if (d.bitwise) {
    tv.verdict = Verdict::Exact;
  } else if (d.nan_mismatch > 0) {
    tv.verdict = Verdict::Wrong;
    tv.why = "NaN or Inf on one side only";
  } else if (d.name == "loss" || d.name == "mb_losses") {
    tv.verdict = Verdict::Wrong;
    tv.why = "the forward differs (losses must be bitwise equal)";
  } else if (!ctx.forward_same) {
    tv.verdict = Verdict::Wrong;
    tv.why = "the forward diverged (see the first divergence)";
  } else if (d.name.rfind("buffers/", 0) == 0) {
    tv.verdict = Verdict::Wrong;
    tv.why = "the expert bias comes from the forward's routing alone, and the forward is "
             "bitwise equal";
  } else if (is_grad) {
    judge_gradient(tv, ctx.shape.unit_of.at(fqn), ctx);
  } else {
    tv.verdict = Verdict::OrderOnly;  // grad_norm and params: settled by tensor_verdicts
  }
  return tv;
}

// The verdicts on a step's compared tensors, in the rows' order.
std::vector<TensorVerdict> tensor_verdicts(const std::vector<CompareRow>& rows, int64_t step,
                                           const StepContext& ctx) {
  bool all_grads_explained = true;
  std::vector<TensorVerdict> out;
  for (const auto& row : rows) {
    if (row.step != step) continue;
    out.push_back(tensor_verdict(row.diff, step, ctx));
    if (row.diff.name.rfind("grads/", 0) == 0 && out.back().verdict == Verdict::Wrong)
      all_grads_explained = false;
  }
  for (auto& tv : out) {
    const bool derived = tv.name == "grad_norm" || tv.name.rfind("params/", 0) == 0;
    if (derived && tv.verdict == Verdict::OrderOnly) {
      if (!all_grads_explained) {
        tv.verdict = Verdict::Wrong;
        tv.why = "derived from WRONG gradients";
      } else {
        tv.why = "derived from the gradients (the norm, clipping and the update)";
      }
    }
  }
  return out;
}

// The earliest differing record in execution order (found false when there is none).
Divergence first_divergence(const std::vector<Record>& diverged) {
  if (diverged.empty()) return {};
  auto earlier = [](const Record& x, const Record& y) { return x.order < y.order; };
  const auto& r = *std::min_element(diverged.begin(), diverged.end(), earlier);
  return {true, std::get<0>(r.order), r.mb, r.stage, r.hop, r.tensor};
}

// Moves the elements of `from` to the end of `to`.
template <class T>
void append(std::vector<T>& to, std::vector<T>&& from) {
  for (auto& x : from) to.push_back(std::move(x));
}

}  // namespace

LocaliseReport localise(const std::string& a_path, const std::string& b_path, int threads) {
  const dumps::Dump a = dumps::read_dump(a_path), b = dumps::read_dump(b_path);
  return localise(a, b, compare_dumps(a, b, threads), a_path, b_path);
}

LocaliseReport localise(const dumps::Dump& a, const dumps::Dump& b,
                        const std::vector<CompareRow>& rows, const std::string& a_path,
                        const std::string& b_path) {
  LocaliseReport rep;
  const RunShape sa = run_shape(a), sb = run_shape(b);
  rep.steps = common_steps(a, b, a_path, b_path);
  rep.predicted = predicted_set(sa, sb);
  std::vector<Record> diverged;
  for (int64_t step : rep.steps) {
    Side A{"A", &sa, dumps::read_ledger(a_path, step), {}};
    Side B{"B", &sb, dumps::read_ledger(b_path, step), {}};
    // Self-checks: every block within its bound, every read of what was committed.
    for (Side* s : {&A, &B}) {
      append(rep.findings, check_blocks(*s, step));
      append(rep.findings, check_reads(*s, step));
    }
    const bool reads_same = forward_reads_same(A, B, step, diverged);
    const bool hops_same = forward_hops_same(A, B, step, diverged);
    const auto blocks = block_verdicts(A, B, step, rep.blocks, diverged);
    const StepContext ctx{sa, rep.predicted, reads_same && hops_same, blocks};
    append(rep.tensors, tensor_verdicts(rows, step, ctx));
  }
  rep.first = first_divergence(diverged);
  return rep;
}

}  // namespace parity::compare
