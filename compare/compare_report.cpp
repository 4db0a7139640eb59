#include "compare/compare_report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>

#include "compare/dump_compare.h"
#include "compare/tensor_compare.h"
#include "compare/truth.h"
#include "dumps/dump.h"

namespace parity::compare {

namespace {

// Each run's per-tensor error against the fp64 truth dump, in the run's own ulps.
nlohmann::json truth_table(const dumps::Dump& A, const dumps::Dump& B, const dumps::Dump& T,
                           bool print) {
  nlohmann::json rows = nlohmann::json::array();
  int a_closer = 0, b_closer = 0, ties = 0;
  if (print)
    std::printf("\n# error against the float64 truth %s, in each run's own ulps\n%5s  %-46s %10s %10s"
                " %10s %10s  %s\n", T.source.c_str(), "step", "tensor", "a max", "a mean",
                "b max", "b mean", "closer");
  for (const auto& [step, sa] : A.steps) {
    if (!T.steps.count(step) || !B.steps.count(step))
      throw dumps::DumpError("the truth dump lacks step " + std::to_string(step) +
                               "; dump the same --dump-steps in the fp64 run");
    const auto& st = T.steps.at(step);
    const auto& sb = B.steps.at(step);
    for (const auto& fqn : sa.fqns) {
      for (const char* kind : {"grads", "params"}) {
        const bool g = std::string(kind) == "grads";
        const auto& ta = (g ? sa.grads : sa.params).at(fqn);
        const auto& tb = (g ? sb.grads : sb.params).at(fqn);
        const auto& tt = (g ? st.grads : st.params);
        if (!tt.count(fqn)) throw dumps::DumpError("the truth dump lacks " + fqn);
        const std::string name = std::string(kind) + "/" + fqn;
        auto ea = error_vs_truth(name, ta, tt.at(fqn));
        auto eb = error_vs_truth(name, tb, tt.at(fqn));
        if (!ea.problem.empty() || !eb.problem.empty())
          throw dumps::DumpError(name + ": " + (ea.problem.empty() ? eb.problem : ea.problem) +
                                   "; the truth must be an fp64 run of the same cell");
        const char* closer = ea.mean_ulp < eb.mean_ulp ? "a" : eb.mean_ulp < ea.mean_ulp ? "b" : "=";
        (closer[0] == 'a' ? a_closer : closer[0] == 'b' ? b_closer : ties)++;
        if (print && ea.mean_ulp != eb.mean_ulp)
          std::printf("%5lld  %-46s %10llu %10.3f %10llu %10.3f  %s\n", static_cast<long long>(step),
                      name.c_str(), static_cast<unsigned long long>(ea.max_ulp), ea.mean_ulp,
                      static_cast<unsigned long long>(eb.max_ulp), eb.mean_ulp, closer);
        rows.push_back({{"step", step}, {"tensor", name}, {"a_max_ulp", ea.max_ulp},
                        {"a_mean_ulp", ea.mean_ulp}, {"b_max_ulp", eb.max_ulp},
                        {"b_mean_ulp", eb.mean_ulp}, {"closer", closer}});
      }
    }
  }
  if (print)
    std::printf("# closer to the truth: a on %d tensors, b on %d, equally close on %d\n", a_closer,
                b_closer, ties);
  return {{"rows", rows}, {"a_closer", a_closer}, {"b_closer", b_closer}, {"ties", ties}};
}

std::string ulp_text(uint64_t u) {
  return u == kInfiniteUlp ? "inf" : std::to_string(u);
}

nlohmann::json row_json(int64_t step, const TensorDiff& d) {
  return {{"step", step},
          {"tensor", d.name},
          {"dtype", d.dtype},
          {"numel", d.numel},
          {"bitwise", d.bitwise},
          {"wrong", d.wrong},
          {"max_ulp", d.max_ulp == kInfiniteUlp ? nlohmann::json("inf")
                                                          : nlohmann::json(d.max_ulp)},
          {"nmse", d.nmse},
          {"max_abs", {{"diff", d.max_abs}, {"index", d.max_abs_index}, {"a", d.max_abs_a},
                       {"b", d.max_abs_b}}},
          {"max_rel", {{"diff", d.max_rel}, {"index", d.max_rel_index}, {"a", d.max_rel_a},
                       {"b", d.max_rel_b}}},
          {"first_diff", d.first_diff},
          {"nan", {d.nan_a, d.nan_b}},
          {"inf", {d.inf_a, d.inf_b}},
          {"nan_mismatch", d.nan_mismatch},
          {"signed_zero_diff", d.signed_zero_diff},
          {"problem", d.problem}};
}

}  // namespace

int compare_command(const CompareOptions& o) {
  const auto A = dumps::read_dump(o.a);
  const auto B = dumps::read_dump(o.b);
  std::vector<std::pair<int64_t, TensorDiff>> rows;
  for (auto& r : compare_dumps(A, B, o.threads)) rows.push_back({r.step, std::move(r.diff)});

  // Verdict and guards against vacuous agreement.
  int differing = 0;
  uint64_t worst = 0;
  bool failed = false;
  for (const auto& [step, d] : rows) {
    if (d.bitwise) continue;
    ++differing;
    worst = std::max(worst, d.max_ulp);
    if (!d.problem.empty() || d.nan_mismatch > 0 || d.max_ulp > o.max_ulp) failed = true;
  }
  std::vector<std::string> vacuous;
  bool all_grads_zero = true;
  for (const auto& [step, d] : rows)
    if (d.name.rfind("grads/", 0) == 0 && !d.all_zero) all_grads_zero = false;
  if (all_grads_zero) vacuous.push_back("every gradient is zero in both runs");
  auto flat = [](const std::vector<double>& l) {
    return l.size() > 1 && std::all_of(l.begin(), l.end(), [&](double x) { return x == l[0]; });
  };
  if (flat(A.losses) && flat(B.losses)) vacuous.push_back("the loss is flat in both runs");
  auto dead = [](const std::vector<double>& l) {
    return !l.empty() && std::all_of(l.begin(), l.end(), [](double x) { return !std::isfinite(x); });
  };
  if (dead(A.losses) && dead(B.losses)) vacuous.push_back("both runs are dead (non-finite loss)");
  if (!vacuous.empty()) failed = true;

  // Every step's loss and norm, from the metrics.
  int64_t first_loss_diff = -1;
  for (size_t i = 0; i < std::min(A.losses.size(), B.losses.size()); ++i)
    if (std::memcmp(&A.losses[i], &B.losses[i], 8) != 0 ||
        std::memcmp(&A.grad_norms[i], &B.grad_norms[i], 8) != 0) {
      first_loss_diff = static_cast<int64_t>(i) + 1;
      break;
    }
  if (first_loss_diff > 0 && o.max_ulp == 0) failed = true;

  std::unique_ptr<dumps::Dump> truth;
  if (!o.truth.empty()) truth = std::make_unique<dumps::Dump>(dumps::read_dump(o.truth));

  if (o.json) {
    nlohmann::json j;
    if (truth) j["truth"] = truth_table(A, B, *truth, false);
    j["a"] = o.a;
    j["b"] = o.b;
    j["rows"] = nlohmann::json::array();
    for (const auto& [step, d] : rows) j["rows"].push_back(row_json(step, d));
    j["summary"] = {{"tensors", rows.size()},
                    {"differing", differing},
                    {"max_ulp", worst == kInfiniteUlp ? nlohmann::json("inf")
                                                                : nlohmann::json(worst)},
                    {"first_step_loss_or_norm_differs", first_loss_diff},
                    {"vacuous", vacuous},
                    {"pass", !failed}};
    std::cout << j.dump(2) << "\n";
    return failed ? 1 : 0;
  }
  std::printf("# parity compare\n#   a: %s (%s, %s, %s)\n#   b: %s (%s, %s, %s)\n", o.a.c_str(),
              A.meta.at("trainer").c_str(), A.meta.at("dtype").c_str(), A.meta.at("split").c_str(),
              o.b.c_str(), B.meta.at("trainer").c_str(), B.meta.at("dtype").c_str(),
              B.meta.at("split").c_str());
  std::printf("%5s  %-46s %-8s %9s %7s %9s %7s %10s %12s  %s\n", "step", "tensor", "dtype",
              "numel", "bitwise", "#wrong", "max_ulp", "nmse", "max_abs", "at index: a vs b");
  for (const auto& [step, d] : rows) {
    if (d.bitwise && !o.all_rows) continue;
    if (!d.problem.empty()) {
      std::printf("%5lld  %-46s %s\n", static_cast<long long>(step), d.name.c_str(),
                  d.problem.c_str());
      continue;
    }
    std::printf("%5lld  %-46s %-8s %9lld %7s %9lld %7s %10.3e %12.4e  %lld: %.9g vs %.9g%s\n",
                static_cast<long long>(step), d.name.c_str(), d.dtype.c_str(),
                static_cast<long long>(d.numel), d.bitwise ? "yes" : "no",
                static_cast<long long>(d.wrong), ulp_text(d.max_ulp).c_str(), d.nmse, d.max_abs,
                static_cast<long long>(d.max_abs_index), d.max_abs_a, d.max_abs_b,
                d.nan_mismatch ? "  NaN/Inf mismatch" : "");
  }
  if (first_loss_diff > 0)
    std::printf("# every-step metrics: loss or grad norm first differs at step %lld\n",
                static_cast<long long>(first_loss_diff));
  for (const auto& v : vacuous) std::printf("# vacuous agreement: %s\n", v.c_str());
  if (truth) truth_table(A, B, *truth, true);
  std::printf("# %zu tensors compared, %zu bitwise equal, %d differ (max %s ulp); %s\n",
              rows.size(), rows.size() - differing, differing, ulp_text(worst).c_str(),
              failed ? "FAILED" : "OK");
  return failed ? 1 : 0;
}

}  // namespace parity::compare
