#include "compare/localise.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "compare/dump_compare.h"
#include "compare/exact_math.h"
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
  nlohmann::json cfg = nlohmann::json::parse(d.meta.at("config"), nullptr, false);
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
  const int lpb = sa.model.layers_per_block;

  for (const auto& [step, _] : a.steps)
    if (b.steps.count(step) && dumps::has_ledger(a_path, step) && dumps::has_ledger(b_path, step))
      rep.steps.push_back(step);
  if (rep.steps.empty())
    throw dumps::DumpError("'" + a_path + "' and '" + b_path +
                    "' share no dumped step with a ledger on both sides; rerun both with "
                    "`parity train ... --ledger --dump DIR --dump-steps N`");

  std::set<int> deposited = run_deposits(sa);
  for (int blk : run_deposits(sb)) deposited.insert(blk);
  for (const auto& [fqn, unit] : sa.unit_of)
    for (int blk : deposited)
      if (feeds(unit, blk, lpb)) rep.predicted.insert(fqn);

  std::vector<Record> diverged;
  for (int64_t step : rep.steps) {
    Side A{"A", &sa, dumps::read_ledger(a_path, step), {}};
    Side B{"B", &sb, dumps::read_ledger(b_path, step), {}};

    // Self-checks: every block within its bound, every read of what was committed.
    for (Side* s : {&A, &B}) {
      for (const auto& [key, blk] : s->ledger.blocks) {
        auto sc = self_check(blk);
        if (sc.present && !sc.ok)
          rep.findings.push_back({s->name, step, key.first, key.second,
                                  s->shape->stage_of(blk.unit), explain(*s, key.first, key.second, sc)});
        s->checks[key] = std::move(sc);
      }
      for (const auto& r : s->ledger.reads) {
        auto it = s->ledger.blocks.find({r.mb, r.block});
        if (it == s->ledger.blocks.end() || it->second.hash == r.hash) continue;
        std::string from = "a value no micro-batch committed";
        for (const auto& [key, other] : s->ledger.blocks)
          if (key.second == r.block && other.hash == r.hash)
            from = "micro-batch " + std::to_string(key.first) + "'s copy: a stale block";
        rep.findings.push_back({s->name, step, r.mb, r.block, s->shape->stage_of(r.unit),
                                r.reader + " read block " + std::to_string(r.block) +
                                    " of micro-batch " + std::to_string(r.mb) + " as " + from});
      }
    }

    // Forward: every read and every forward hop bitwise equal?
    bool forward_same = true;
    std::map<std::tuple<int, int, std::string>, std::string> read_hash_b;
    for (const auto& r : B.ledger.reads) read_hash_b[{r.mb, r.block, r.reader}] = r.hash;
    for (const auto& r : A.ledger.reads) {
      auto it = read_hash_b.find({r.mb, r.block, r.reader});
      if (it == read_hash_b.end() || it->second == r.hash) continue;
      forward_same = false;
      const int st = sa.stage_of(r.unit);
      diverged.push_back({{step, 0, st, r.mb, 0, r.unit, r.reader}, r.mb, st, "forward read",
                          "block " + std::to_string(r.block) + " read by " + r.reader});
    }
    const bool same_split = sa.split.spec() == sb.split.spec();
    if (same_split) {
      std::map<std::tuple<int, int, int, bool>, std::string> hop_b;
      for (const auto& h : B.ledger.hops) hop_b[{h.mb, h.from, h.to, h.forward}] = h.hash;
      for (const auto& h : A.ledger.hops) {
        auto it = hop_b.find({h.mb, h.from, h.to, h.forward});
        if (it == hop_b.end() || it->second == h.hash) continue;
        if (h.forward) forward_same = false;
        // Within a stage: forward reads before the send, backward block gradients before it.
        diverged.push_back({{step, h.forward ? 0 : 1, h.forward ? h.from : -h.from, h.mb, 1, 0, h.tensor},
                            h.mb, h.from,
                            std::string(h.forward ? "forward" : "backward") + " hop " +
                                std::to_string(h.from) + "->" + std::to_string(h.to),
                            h.tensor});
      }
    }

    // Block verdicts.
    std::map<std::pair<int, int>, Verdict> block_verdict;
    std::set<std::pair<int, int>> keys;
    for (const auto& [k, _] : A.ledger.blocks) keys.insert(k);
    for (const auto& [k, _] : B.ledger.blocks) keys.insert(k);
    for (const auto& key : keys) {
      BlockVerdict bv;
      bv.step = step;
      bv.mb = key.first;
      bv.block = key.second;
      auto ia = A.ledger.blocks.find(key), ib = B.ledger.blocks.find(key);
      if (ia == A.ledger.blocks.end() || ib == B.ledger.blocks.end()) {
        bv.verdict = Verdict::Wrong;
        bv.why = std::string("only in run ") + (ia == A.ledger.blocks.end() ? "B" : "A");
        rep.blocks.push_back(bv);
        block_verdict[key] = bv.verdict;
        continue;
      }
      const auto& ba = ia->second;
      const auto& bb = ib->second;
      bv.stage = sa.stage_of(ba.unit);
      const auto& ca = A.checks[key];
      const auto& cb = B.checks[key];
      bv.contributions = ca.n;
      bv.excess_a = ca.excess;
      bv.excess_b = cb.excess;
      std::vector<std::string> ra, rb;
      for (size_t i : ba.reads) ra.push_back(A.ledger.reads[i].reader);
      for (size_t i : bb.reads) rb.push_back(B.ledger.reads[i].reader);
      std::sort(ra.begin(), ra.end());
      std::sort(rb.begin(), rb.end());
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
      if (bv.verdict != Verdict::Exact && ba.has_grad && bb.has_grad &&
          ba.grad.bytes != bb.grad.bytes)
        // A stage's backward delivers its later blocks' gradients first.
        diverged.push_back({{step, 1, -bv.stage, key.first, 0, -key.second, ""}, key.first, bv.stage,
                            "backward block gradient", "block " + std::to_string(key.second)});
      if (bv.verdict == Verdict::Exact && ca.present && (!ca.ok || !cb.ok)) {
        bv.verdict = Verdict::Wrong;  // equal, and equally wrong
        bv.why = "both runs' gradients are outside the bound of their contributions";
      }
      block_verdict[key] = bv.verdict;
      rep.blocks.push_back(bv);
    }

    // Tensor verdicts.
    bool all_grads_explained = true;
    std::vector<TensorVerdict> step_tensors;
    for (const auto& row : rows) {
      if (row.step != step) continue;
      const auto& d = row.diff;
      TensorVerdict tv;
      tv.step = step;
      tv.name = d.name;
      tv.wrong = d.wrong;
      tv.max_ulp = d.max_ulp;
      tv.nmse = d.nmse;
      const bool is_grad = d.name.rfind("grads/", 0) == 0;
      const bool is_param = d.name.rfind("params/", 0) == 0;
      const std::string fqn = is_grad ? d.name.substr(6) : is_param ? d.name.substr(7) : "";
      tv.predicted = !fqn.empty() && rep.predicted.count(fqn);
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
      } else if (!forward_same) {
        tv.verdict = Verdict::Wrong;
        tv.why = "the forward diverged (see the first divergence)";
      } else if (d.name.rfind("buffers/", 0) == 0) {
        tv.verdict = Verdict::Wrong;
        tv.why = "the expert bias comes from the forward's routing alone, and the forward is "
                 "bitwise equal";
      } else if (is_grad) {
        const int unit = sa.unit_of.at(fqn);
        bool wrong_upstream = false, any_differs = false;
        for (const auto& [key, v] : block_verdict) {
          if (!feeds(unit, key.second, lpb)) continue;
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
      } else {
        tv.verdict = Verdict::OrderOnly;  // grad_norm and params: settled below
      }
      if (is_grad && tv.verdict == Verdict::Wrong) all_grads_explained = false;
      step_tensors.push_back(tv);
    }
    for (auto& tv : step_tensors) {
      const bool derived = tv.name == "grad_norm" || tv.name.rfind("params/", 0) == 0;
      if (derived && tv.verdict == Verdict::OrderOnly) {
        if (!all_grads_explained) {
          tv.verdict = Verdict::Wrong;
          tv.why = "derived from WRONG gradients";
        } else {
          tv.why = "derived from the gradients (the norm, clipping and the update)";
        }
      }
      rep.tensors.push_back(tv);
    }
  }

  if (!diverged.empty()) {
    const auto& r = *std::min_element(diverged.begin(), diverged.end(),
                                      [](const Record& x, const Record& y) { return x.order < y.order; });
    rep.first = {true, std::get<0>(r.order), r.mb, r.stage, r.hop, r.tensor};
  }
  return rep;
}

}  // namespace parity::compare
