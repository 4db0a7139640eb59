#include "compare/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "compare/float_formats.h"

namespace parity::compare {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// How far a fitted weight may sit from the value it is named by (0, 1, 2, M, a common k):
// the fit averages the run's rounding over every tensor, so a correct run's weights land within
// a few times its relative floor (below 1e-2 even in bf16) of the truth's.
constexpr double kWeightSlack = 0.05;

// How far a term's fitted coefficient may sit from +-1 to be named missing or duplicated.
constexpr double kTermSlack = 0.1;

double sq_norm(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return s;
}

double dot(const std::vector<double>& x, const std::vector<double>& y) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

// Each tensor counts relative to its own truth: 1 / ||t||^2, 0 for an all-zero truth.
std::vector<double> tensor_weights(const GradSet& truth) {
  std::vector<double> w;
  w.reserve(truth.values.size());
  for (const auto& t : truth.values) {
    const double n = sq_norm(t);
    w.push_back(n > 0 ? 1 / n : 0);
  }
  return w;
}

// Solves A x = b (n x n, row-major) by Gaussian elimination with partial pivoting; empty when a
// pivot falls below 1e-12 of the largest diagonal entry (the terms are not independent).
std::vector<double> solve(std::vector<double> A, std::vector<double> b) {
  const size_t n = b.size();
  double diag = 0;
  for (size_t i = 0; i < n; ++i) diag = std::max(diag, std::fabs(A[i * n + i]));
  if (!(diag > 0)) return {};
  for (size_t k = 0; k < n; ++k) {
    size_t p = k;
    for (size_t i = k + 1; i < n; ++i)
      if (std::fabs(A[i * n + k]) > std::fabs(A[p * n + k])) p = i;
    if (!(std::fabs(A[p * n + k]) > 1e-12 * diag)) return {};
    if (p != k) {
      for (size_t j = 0; j < n; ++j) std::swap(A[k * n + j], A[p * n + j]);
      std::swap(b[k], b[p]);
    }
    for (size_t i = k + 1; i < n; ++i) {
      const double f = A[i * n + k] / A[k * n + k];
      for (size_t j = k; j < n; ++j) A[i * n + j] -= f * A[k * n + j];
      b[i] -= f * b[k];
    }
  }
  std::vector<double> x(n);
  for (size_t k = n; k-- > 0;) {
    double s = b[k];
    for (size_t j = k + 1; j < n; ++j) s -= A[k * n + j] * x[j];
    x[k] = s / A[k * n + k];
  }
  return x;
}

std::string fixed(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Share of the relative discrepancy of `tensors` a model accounts for (Defect::fit).
double fit_of(const std::vector<size_t>& tensors, const GradSet& run, const GradSet& truth,
              const std::vector<std::vector<double>>& model, const std::vector<double>& w) {
  double before = 0, after = 0;
  for (size_t i : tensors) {
    const double wi = w[i] > 0 ? w[i] : 1;
    double b = 0, a = 0;
    for (size_t k = 0; k < run.values[i].size(); ++k) {
      const double g = run.values[i][k];
      b += (g - truth.values[i][k]) * (g - truth.values[i][k]);
      a += (g - model[i][k]) * (g - model[i][k]);
    }
    before += wi * b;
    after += wi * a;
  }
  return before > 0 ? 1 - after / before : 1;
}

}  // namespace

double relative_distance(const std::vector<double>& g, const std::vector<double>& t) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return kInf;
    diff += (g[i] - t[i]) * (g[i] - t[i]);
    ref += t[i] * t[i];
  }
  if (ref == 0) return diff == 0 ? 0 : kInf;
  return std::sqrt(diff / ref);
}

double rounding_floor(const std::vector<double>& t, h5::DType dtype) {
  double var = 0, ref = 0;
  for (double v : t) {
    const double s = spacing_at(dtype, std::fabs(v));
    var += s * s / 12;
    ref += v * v;
  }
  return ref > 0 ? std::sqrt(var / ref) : 0;
}

double scale_ulps(const std::vector<double>& g, const std::vector<double>& t, h5::DType dtype) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return kInf;
    worst = std::max(worst, std::fabs(g[i] - t[i]));
    scale = std::max(scale, std::fabs(t[i]));
  }
  if (worst == 0) return 0;
  const double ulp = spacing_at(dtype, scale);
  return ulp > 0 ? worst / ulp : kInf;
}

double relative_scalar(double x, double t) {
  if (!std::isfinite(x)) return kInf;
  if (t == 0) return x == 0 ? 0 : kInf;
  return std::fabs(x - t) / std::fabs(t);
}

const char* to_string(TruthVerdict v) {
  switch (v) {
    case TruthVerdict::Consistent: return "CONSISTENT";
    case TruthVerdict::Wrong: return "WRONG";
    case TruthVerdict::Suspect: return "SUSPECT";
  }
  return "?";
}

std::vector<double> microbatch_weights(const OracleInputs& in, const GradSet& g,
                                       const std::vector<size_t>& use) {
  if (!in.per_microbatch || in.per_microbatch->empty()) return {};
  const auto& c = *in.per_microbatch;
  const size_t M = c.size();
  const auto w = tensor_weights(*in.truth);
  std::vector<size_t> all;
  if (use.empty())
    for (size_t i = 0; i < in.layout->size(); ++i) all.push_back(i);
  const auto& tensors = use.empty() ? all : use;
  std::vector<double> A(M * M, 0), b(M, 0);
  for (size_t i : tensors) {
    if (w[i] == 0) continue;
    for (size_t m = 0; m < M; ++m) {
      b[m] += w[i] * dot(c[m].values[i], g.values[i]);
      for (size_t n = m; n < M; ++n) A[m * M + n] += w[i] * dot(c[m].values[i], c[n].values[i]);
    }
  }
  for (size_t m = 0; m < M; ++m)
    for (size_t n = 0; n < m; ++n) A[m * M + n] = A[n * M + m];
  return solve(A, b);
}

std::string name_weights(const std::vector<double>& w, double slack, std::vector<double>& named) {
  const size_t M = w.size();
  named.assign(M, 1);
  if (std::all_of(w.begin(), w.end(), [&](double x) { return std::fabs(x - 1) <= slack; }))
    return "";
  double mean = 0;
  for (double x : w) mean += x / static_cast<double>(M);
  const bool common = M > 1 && std::all_of(w.begin(), w.end(), [&](double x) {
                        return std::fabs(x - mean) <= slack * std::max(1.0, std::fabs(mean));
                      });
  if (common) {
    const double m = static_cast<double>(M);
    double k = mean;
    std::string why;
    if (std::fabs(mean - m) <= slack * m) {
      k = m;
      why = " (the micro-batch count)";
    } else if (std::fabs(mean - 1 / m) <= slack / m) {
      k = 1 / m;
      why = " (one over the micro-batch count)";
    } else if (std::fabs(mean - std::round(mean)) <= slack * std::fabs(mean)) {
      k = std::round(mean);
    }
    named.assign(M, k);
    return "all gradients x " + fixed(k) + why;
  }
  std::vector<std::string> missing, twice, other;
  for (size_t m = 0; m < M; ++m) {
    const std::string id = std::to_string(m);
    if (std::fabs(w[m]) <= slack) {
      named[m] = 0;
      missing.push_back(id);
    } else if (std::fabs(w[m] - 2) <= slack) {
      named[m] = 2;
      twice.push_back(id);
    } else if (std::fabs(w[m] - 1) > slack) {
      named[m] = w[m];
      other.push_back(id + " weighted " + fixed(w[m]));
    }
  }
  auto list = [](const std::vector<std::string>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + ids[i];
    return s;
  };
  std::string text;
  auto add = [&](const std::string& part) { text += (text.empty() ? "" : "; ") + part; };
  if (!missing.empty())
    add(std::string(missing.size() == 1 ? "micro-batch " : "micro-batches ") + list(missing) +
        " missing" + (M > 2 && missing.size() + 1 == M && twice.empty() && other.empty()
                          ? " (only micro-batch " + std::to_string([&] {
                              for (size_t m = 0; m < M; ++m)
                                if (named[m] == 1) return m;
                              return size_t{0};
                            }()) + " kept)"
                          : ""));
  if (!twice.empty())
    add(std::string(twice.size() == 1 ? "micro-batch " : "micro-batches ") + list(twice) +
        " counted twice");
  for (const auto& o : other) add("micro-batch " + o);
  return text;
}

RunJudgement judge_run(const OracleInputs& in, const GradSet& run, const TermSource& terms) {
  const GradLayout& L = *in.layout;
  const GradSet& truth = *in.truth;
  const size_t n = L.size();
  const auto w = tensor_weights(truth);
  RunJudgement r;
  r.tensors.resize(n);
  std::vector<double> threshold(n);
  for (size_t i = 0; i < n; ++i) {
    auto& t = r.tensors[i];
    t.name = L.names[i];
    t.numel = static_cast<int64_t>(truth.values[i].size());
    t.distance = relative_distance(run.values[i], truth.values[i]);
    t.floor = in.floor[i];
    t.ratio = t.floor > 0 ? t.distance / t.floor : (t.distance > 0 ? kInf : 0);
    threshold[i] = in.margin * t.floor;
  }
  auto open = [&](size_t i) { return r.tensors[i].defect < 0; };
  // A model explains tensor i when the run lies within the floor of it, closer than to the
  // truth, and the model moves the tensor by more than a tenth of its floor (a defect too
  // small to matter to a tensor leaves it alone). So a defect can be named below the margin
  // too: a bf16 run's floor is wide, and a missing micro-batch may hide inside 64 floors.
  auto explains = [&](size_t i, const std::vector<double>& model) {
    const double dm = relative_distance(run.values[i], model);
    return dm <= threshold[i] && dm < r.tensors[i].distance &&
           relative_distance(model, truth.values[i]) > 0.1 * r.tensors[i].floor;
  };
  auto explain = [&](Defect d, const std::vector<size_t>& tensors,
                     const std::vector<std::vector<double>>& model) {
    d.fit = fit_of(tensors, run, truth, model, w);
    const int id = static_cast<int>(r.defects.size());
    for (size_t i : tensors) {
      r.tensors[i].defect = id;
      d.tensors.push_back(L.names[i]);
    }
    r.defects.push_back(std::move(d));
  };
  // The tensors still unexplained that lie beyond the margin, and beyond every correct variant.
  auto beyond = [&](double factor) {
    std::vector<size_t> out;
    for (size_t i = 0; i < n; ++i)
      if (open(i) && !(r.tensors[i].distance <= factor * r.tensors[i].floor)) out.push_back(i);
    return out;
  };

  // Zeroed: an all-zero gradient where the truth has one (a frozen or dropped parameter).
  {
    std::vector<size_t> zeroed;
    std::vector<std::vector<double>> model(truth.values);
    for (size_t i = 0; i < n; ++i)
      if (w[i] > 0 && std::all_of(run.values[i].begin(), run.values[i].end(),
                                  [](double v) { return v == 0; })) {
        model[i].assign(model[i].size(), 0);
        if (explains(i, model[i])) zeroed.push_back(i);
      }
    if (!zeroed.empty())
      explain({"zeroed",
               zeroed.size() == 1 ? "gradient of " + L.names[zeroed[0]] + " zeroed"
                                  : std::to_string(zeroed.size()) + " gradients zeroed",
               0, {}},
              zeroed, model);
  }

  // Swapped: a gradient beyond every variant that holds another same-shaped tensor's truth,
  // and that tensor holds its truth, each at least 4x closer than to its own.
  for (size_t i : beyond(1)) {
    if (!open(i)) continue;
    for (size_t j = 0; j < n; ++j) {
      if (j == i || !open(j) || L.shapes[j] != L.shapes[i]) continue;
      const double sij = relative_distance(run.values[i], truth.values[j]);
      const double sji = relative_distance(run.values[j], truth.values[i]);
      if (!(4 * sij < r.tensors[i].distance && 4 * sji < r.tensors[j].distance)) continue;
      std::vector<std::vector<double>> model(truth.values);
      std::swap(model[i], model[j]);
      if (!explains(i, model[i]) || !explains(j, model[j])) continue;
      explain({"swapped", "gradients of " + L.names[i] + " and " + L.names[j] + " swapped", 0, {}},
              {i, j}, model);
      break;
    }
  }

  // Micro-batch weights, over every tensor not explained above. Named weights (0, 2, a common
  // k) make a model; it is a defect when it accounts for at least half of the (relative)
  // discrepancy of all those tensors.
  if (in.per_microbatch && !in.per_microbatch->empty()) {
    std::vector<size_t> use;
    for (size_t i = 0; i < n; ++i)
      if (open(i)) use.push_back(i);
    r.mb_weights = microbatch_weights(in, run, use);
    for (size_t i : beyond(in.margin)) r.tensors[i].mb_weights = microbatch_weights(in, run, {i});
    std::vector<double> named;
    const std::string text =
        r.mb_weights.empty() ? "" : name_weights(r.mb_weights, kWeightSlack, named);
    if (!text.empty()) {
      std::vector<std::vector<double>> model(n);
      for (size_t i = 0; i < n; ++i) {
        model[i].assign(truth.values[i].size(), 0);
        for (size_t m = 0; m < named.size(); ++m)
          for (size_t k = 0; k < model[i].size(); ++k)
            model[i][k] += named[m] * (*in.per_microbatch)[m].values[i][k];
      }
      std::vector<size_t> fits;
      for (size_t i : use)
        if (explains(i, model[i])) fits.push_back(i);
      if (!fits.empty() && fit_of(use, run, truth, model, w) >= 0.5)
        explain({"micro-batches", text, 0, {}}, fits, model);
    }
  } else if (!beyond(in.margin).empty()) {
    r.notes.push_back("no per-micro-batch truth: the micro-batch weights were not fitted");
  }

  // Terms (deposits), when a tensor lies beyond every correct variant. A term's coefficient a
  // (weighted least squares against the residual g - t) must be within 0.1 of -1 (missing) or
  // +1 (duplicated) and five standard errors from 0, the standard error from the floor taken as
  // each tensor's noise spread evenly over its elements.
  const auto looked = beyond(1);
  if (terms && !looked.empty()) {
    GradSet residual;
    residual.values.resize(n);
    for (size_t i = 0; i < n; ++i) {
      residual.values[i].resize(run.values[i].size());
      for (size_t k = 0; k < residual.values[i].size(); ++k)
        residual.values[i][k] = run.values[i][k] - truth.values[i][k];
    }
    auto wdot = [&](const GradSet& c, const GradSet& x) {
      double s = 0;
      for (size_t i = 0; i < n; ++i)
        if (w[i] > 0 && open(i)) s += w[i] * dot(c.values[i], x.values[i]);
      return s;
    };
    auto noise_sd = [&](const GradSet& c) {  // of <e, c>_w, e the run's rounding
      double v = 0;
      for (size_t i = 0; i < n; ++i) {
        if (!(w[i] > 0) || !open(i) || c.values[i].empty()) continue;
        const double per_element =
            r.tensors[i].floor * r.tensors[i].floor / w[i] / static_cast<double>(c.values[i].size());
        v += w[i] * w[i] * per_element * sq_norm(c.values[i]);
      }
      return std::sqrt(v);
    };
    auto sign_of = [](double a) {
      return std::fabs(a - 1) <= kTermSlack ? 1.0 : std::fabs(a + 1) <= kTermSlack ? -1.0 : 0.0;
    };
    const auto must = beyond(in.margin);  // what a set of terms must explain to end the search
    // The model truth + sum a_k c_k: the tensors it explains, when it leaves none of `must`
    // unexplained (or `partial`).
    auto try_set = [&](const std::vector<const Term*>& set, const std::vector<double>& a,
                       bool partial) {
      std::vector<std::vector<double>> model(truth.values);
      for (size_t s = 0; s < set.size(); ++s)
        for (size_t i = 0; i < n; ++i)
          for (size_t k = 0; k < model[i].size(); ++k)
            model[i][k] += a[s] * set[s]->contribution.values[i][k];
      std::vector<size_t> fits;
      for (size_t i = 0; i < n; ++i)
        if (open(i) && explains(i, model[i])) fits.push_back(i);
      size_t covered = 0;
      for (size_t i : must) covered += std::find(fits.begin(), fits.end(), i) != fits.end();
      if (fits.empty() || (!partial && covered != must.size())) return false;
      std::string text;
      for (size_t s = 0; s < set.size(); ++s)
        text += (text.empty() ? "" : "; ") + set[s]->name + (a[s] < 0 ? " missing" : " duplicated");
      explain({"deposits", text, 0, {}}, fits, model);
      return true;
    };
    struct Scored {
      double gain;
      double a;
      bool significant;
      Term term;
    };
    std::vector<Scored> best;  // the three that reduce the residual most, best first
    bool done = false;
    int tried = 0;
    while (auto t = terms(looked, residual)) {
      ++tried;
      const double cr = wdot(t->contribution, residual), cc = wdot(t->contribution, t->contribution);
      if (!(cc > 0)) continue;
      const double a = cr / cc;
      const bool significant = std::fabs(a) > 5 * noise_sd(t->contribution) / cc;
      if (significant && sign_of(a) != 0 && try_set({&*t}, {sign_of(a)}, false)) {
        done = true;
        break;
      }
      best.push_back({cr * cr / cc, a, significant, std::move(*t)});
      std::sort(best.begin(), best.end(), [](const Scored& x, const Scored& y) { return x.gain > y.gain; });
      if (best.size() > 3) best.pop_back();
    }
    // Two or three terms: their joint least-squares weights, each named -1 or +1.
    for (size_t size = 2; !done && size <= best.size(); ++size) {
      std::vector<size_t> pick(size);
      for (size_t k = 0; k < size; ++k) pick[k] = k;
      while (!done) {
        std::vector<double> A(size * size), b(size);
        for (size_t x = 0; x < size; ++x) {
          b[x] = wdot(best[pick[x]].term.contribution, residual);
          for (size_t y = 0; y < size; ++y)
            A[x * size + y] = wdot(best[pick[x]].term.contribution, best[pick[y]].term.contribution);
        }
        const auto a = solve(A, b);
        std::vector<double> named;
        std::vector<const Term*> set;
        bool all_significant = true;
        for (size_t x = 0; x < a.size(); ++x) {
          named.push_back(sign_of(a[x]));
          set.push_back(&best[pick[x]].term);
          all_significant &= best[pick[x]].significant;
        }
        if (!a.empty() && all_significant &&
            std::none_of(named.begin(), named.end(), [](double v) { return v == 0; }))
          done = try_set(set, named, false);
        size_t k = size;  // the next combination of `size` out of best.size()
        while (k > 0 && pick[k - 1] == best.size() - size + k - 1) --k;
        if (k == 0) break;
        ++pick[k - 1];
        for (size_t j = k; j < size; ++j) pick[j] = pick[j - 1] + 1;
      }
    }
    // Failing a full explanation: the best single term alone, when it is significant.
    if (!done && !best.empty() && best[0].significant && sign_of(best[0].a) != 0)
      done = try_set({&best[0].term}, {sign_of(best[0].a)}, true);
    if (tried == 0)
      r.notes.push_back("no deposit to try: the run has no cached pipeline layout, or no "
                        "deposit reaches the tensors beyond the floor");
    else if (!done)
      r.notes.push_back(std::to_string(tried) + " deposit(s) tried; none, missing or duplicated, "
                        "alone or with two others, explains the tensors beyond the floor");
  }

  for (auto& t : r.tensors) {
    const bool ok = t.distance <= in.margin * t.floor;
    t.verdict = t.defect >= 0 ? TruthVerdict::Wrong : ok ? TruthVerdict::Consistent : TruthVerdict::Suspect;
    (t.verdict == TruthVerdict::Consistent ? r.consistent
     : t.verdict == TruthVerdict::Wrong    ? r.wrong
                                           : r.suspect)++;
  }
  return r;
}

}  // namespace parity::compare
