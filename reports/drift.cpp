#include "reports/drift.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace parity::reports {

namespace {

// The kinds in footnote order (numbers are assigned over the whole report in this order).
const std::vector<std::string>& kind_order() {
  static const std::vector<std::string> k = {"reference", "naive",    "split",
                                             "stock",     "reversed", "repeat",
                                             "per-rank",  "multi-process", "fault"};
  return k;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Whether two printed values differ by exactly one unit in their last digit.
bool one_unit_apart(const std::string& a, const std::string& b, int decimals) {
  const double scale = std::pow(10.0, decimals);
  const double ia = std::llround(std::stod(a) * scale), ib = std::llround(std::stod(b) * scale);
  return std::fabs(ia - ib) == 1.0;
}

struct Metric {
  const char* name;
  int decimals;
  double StepPoint::*value;
  std::string StepPoint::*hex;
};
const Metric kLoss{"loss", 6, &StepPoint::loss, &StepPoint::loss_hex};
const Metric kNorm{"grad norm", 4, &StepPoint::grad_norm, &StepPoint::grad_norm_hex};

IdenticalSteps identical_steps(const CellResult& c, const CellResult& ref, const Metric& m) {
  IdenticalSteps out;
  std::vector<std::pair<const StepPoint*, const StepPoint*>> differ;
  for (const auto& s : c.steps) {
    const StepPoint* r = ref.at(s.step);
    if (!r) continue;
    ++out.compared;
    if (s.*m.hex == r->*m.hex)
      ++out.identical;
    else
      differ.push_back({&s, r});
  }
  if (out.compared == 0) {
    out.text = "no steps to compare";
    return out;
  }
  const std::string n = std::to_string(out.compared);
  if (differ.empty()) {
    out.text = out.compared == 1 ? "the one step identical" : "all " + n + " steps identical";
    return out;
  }
  const auto& [s, r] = differ.front();
  const std::string a = fixed(s->*m.value, m.decimals), b = fixed(r->*m.value, m.decimals);
  std::string how;
  if (a == b)
    how = "below the printed digits (" + a + ")";
  else if (one_unit_apart(a, b, m.decimals))
    how = "by one unit in the last printed digit (" + a + " vs " + b + ")";
  else
    how = "(" + a + " vs " + b + ")";
  out.text = std::to_string(out.identical) + " of " + n + " steps identical; " +
             (differ.size() == 1 ? "step " + std::to_string(s->step) + " differs "
                                 : "first differs at step " + std::to_string(s->step) + " ") +
             how;
  return out;
}

DriftValue drift_value(const CellResult& c, const CellResult* ref, int64_t step, const Metric& m) {
  DriftValue v;
  const StepPoint* s = c.at(step);
  if (!s) {
    v.change = "n/a";
    return v;
  }
  v.value = fixed(s->*m.value, m.decimals);
  if (!ref) return v;
  const StepPoint* r = ref->at(step);
  if (!r) {
    v.change = "n/a";
    return v;
  }
  const std::string rv = fixed(r->*m.value, m.decimals);
  v.change = v.value == rv ? "identical" : percent_change(s->*m.value, r->*m.value);
  return v;
}

std::string tokens_text(const Cell& c) {
  const int64_t tokens = int64_t(c.dp) * c.microbatches * c.rows * c.seq_len;
  return std::to_string(tokens) + " tokens per step (dp" + std::to_string(c.dp) + " x " +
         std::to_string(c.microbatches) + " micro-batches x " + std::to_string(c.rows) + " x " +
         std::to_string(c.seq_len) + ")";
}

}  // namespace

std::optional<double> relative_change_pct(double value, double reference) {
  if (reference == 0 || !std::isfinite(value) || !std::isfinite(reference)) return std::nullopt;
  return (value - reference) / std::fabs(reference) * 100.0;
}

std::string percent_change(double value, double reference) {
  const auto pct = relative_change_pct(value, reference);
  if (!pct) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%+.2f%%", *pct);
  return buf;
}

std::vector<std::string> row_kinds(const Cell& c, const Cell* ref) {
  std::set<std::string> k;
  if (!ref) k.insert("reference");
  if (c.pipelined() && c.cache == spec::Cache::Off && c.vp > 1) k.insert("naive");
  if (!c.split.empty()) k.insert("split");
  if (c.grad_accum == spec::GradAccum::FP32 && c.dtype != spec::Precision::FP32 &&
      c.dtype != spec::Precision::FP64)
    k.insert("stock");
  if (c.reverse_microbatches) k.insert("reversed");
  if (ref && c.train_args() == ref->train_args()) k.insert("repeat");
  if (c.clip_order == spec::ClipOrder::PerRank) k.insert("per-rank");
  if (c.nproc > 0) k.insert("multi-process");
  if (!c.inject.empty()) k.insert("fault");
  std::vector<std::string> out;
  for (const auto& kind : kind_order())
    if (k.count(kind)) out.push_back(kind);
  return out;
}

std::string footnote_text(const std::string& kind) {
  static const std::map<std::string, std::string> t = {
      {"reference",
       "reference: gradients accumulate over the micro-batches in order and are reduced once, "
       "after the last (as a pipeline stage does); the logged loss is the micro-batch losses "
       "summed in one reduction"},
      {"naive",
       "naive transport: the whole block stack on every hop (cache off); \"cached\" rows use "
       "the rank store, deltas on the wire and gradient deposits"},
      {"split", "the split spelled out (the cell's split key), not the even default"},
      {"stock",
       "stock accumulation: each micro-batch's gradients are added into fp32 right after its "
       "backward (a gradient sync on every micro-batch), the same data and checkpoint"},
      {"reversed",
       "the micro-batches in reverse order, the same data and checkpoint: the floor of a "
       "sum-order change"},
      {"repeat",
       "the same cell run a second time from the same checkpoint: the determinism check, "
       "identical on every step or something is nondeterministic"},
      {"per-rank",
       "per-rank clip order: each rank's squared norm, summed over ranks, then the root (the "
       "order torch's pipeline uses)"},
      {"multi-process", "one process per rank over torch c10d, not the in-process executor"},
      {"fault", "an injected routing fault: the comparison has to catch it"},
  };
  auto it = t.find(kind);
  return it == t.end() ? kind : it->second;
}

DriftRow drift_row(const CellResult& c, const CellResult* ref, const std::vector<int64_t>& steps) {
  DriftRow row;
  row.cell = c.cell.name;
  row.reference = ref == nullptr;
  row.label = c.cell.label;
  row.status = c.ok() ? "ok" : c.status + (c.error.empty() ? "" : ": " + c.error);
  for (auto step : steps) {
    row.loss.push_back(drift_value(c, ref, step, kLoss));
    row.grad_norm.push_back(drift_value(c, ref, step, kNorm));
  }
  if (ref) {
    row.loss_same = identical_steps(c, *ref, kLoss);
    row.grad_norm_same = identical_steps(c, *ref, kNorm);
  }
  return row;
}

std::vector<DriftTable> drift_tables(const MatrixResult& r) {
  // Footnote numbers over the whole report, in kind order, for the kinds that occur.
  std::set<std::string> used;
  for (const auto& c : r.cells) {
    const CellResult* ref = c.cell.reference.empty() ? nullptr : r.find(c.cell.reference);
    for (const auto& k : row_kinds(c.cell, ref ? &ref->cell : nullptr)) used.insert(k);
  }
  std::map<std::string, int> number;
  for (const auto& k : kind_order())
    if (used.count(k)) number[k] = int(number.size()) + 1;

  std::vector<DriftTable> tables;
  for (const auto& ref : r.cells) {
    if (!ref.cell.reference.empty()) continue;
    DriftTable t;
    t.reference = ref.cell.name;
    t.steps = r.report_steps;
    t.title = std::string(spec::to_string(ref.cell.flavor)) + ", " +
              spec::to_string(ref.cell.dtype) +
              (ref.cell.device == spec::Device::Cpu
                   ? std::string()
                   : std::string(" on ") + spec::to_string(ref.cell.device)) +
              ", " +
              tokens_text(ref.cell) + ", " +
              std::to_string(ref.cell.steps) + (ref.cell.steps == 1 ? " step" : " steps") +
              "; reference: " + ref.cell.label;
    std::set<int> marks;
    for (const auto& c : r.cells) {
      const bool is_ref = &c == &ref;
      if (!is_ref && c.cell.reference != ref.cell.name) continue;
      DriftRow row = drift_row(c, is_ref ? nullptr : &ref, r.report_steps);
      const auto kinds = row_kinds(c.cell, is_ref ? nullptr : &ref.cell);
      if (!kinds.empty()) row.label += " ";
      for (const auto& k : kinds) {
        row.label += "[" + std::to_string(number.at(k)) + "]";
        marks.insert(number.at(k));
      }
      t.rows.push_back(std::move(row));
    }
    for (const auto& [kind, n] : number)
      if (marks.count(n)) t.footnotes.push_back({n, footnote_text(kind)});
    std::sort(t.footnotes.begin(), t.footnotes.end(),
              [](const Footnote& a, const Footnote& b) { return a.number < b.number; });
    tables.push_back(std::move(t));
  }
  return tables;
}

std::string step1_verdict(const CellResult& c) {
  if (c.status == "not run") return "NOT RUN";
  if (!c.ok()) return "FAILED";
  if (c.cell.reference.empty()) return "REFERENCE";
  if (c.verdicts.have)
    return c.verdicts.wrong > 0 ? "WRONG" : c.verdicts.order_only > 0 ? "ORDER-ONLY" : "EXACT";
  if (c.step1.have) return c.step1.wrong_tensors == 0 && c.step1.scalars_equal ? "BITWISE" : "DIFFERS";
  return "n/a";
}

std::vector<SummaryRow> summary_rows(const MatrixResult& r) {
  std::vector<SummaryRow> out;
  for (const auto& c : r.cells) {
    SummaryRow s;
    s.cell = c.cell.name;
    s.verdict = step1_verdict(c);
    if (c.step1.have) {
      s.wrong = std::to_string(c.step1.wrong_tensors);
      s.max_ulp = c.step1.max_ulp == kUlpInfinite ? "inf" : std::to_string(c.step1.max_ulp);
    } else {
      s.wrong = s.max_ulp = "-";
    }
    if (c.verdicts.have) {
      s.exact = c.verdicts.exact;
      s.order_only = c.verdicts.order_only;
      s.wrong_verdicts = c.verdicts.wrong;
    }
    s.seconds_per_step = c.seconds_per_step;
    s.bytes_forward_per_mb = c.bytes_forward_per_mb;
    s.bytes_backward_per_mb = c.bytes_backward_per_mb;
    s.gate = c.gate.gate == Gate::None ? "-" : c.gate.passed ? "pass" : "FAIL";
    if (!c.ok())
      s.note = c.status + (c.error.empty() ? "" : ": " + c.error);
    else if (!c.gate.passed)
      s.note = c.gate.why;
    else if (c.verdicts.have && c.verdicts.wrong > 0)
      s.note = c.verdicts.first_wrong;
    else if (!c.warnings.empty())
      s.note = c.warnings.front();
    else if (!c.cell.twin.empty())
      s.note = "bitwise equal to its twin " + c.cell.twin;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace parity::reports
