#include "harness/compare_command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>

#include "compare/dump_compare.h"
#include "compare/float_formats.h"
#include "compare/predicted.h"
#include "compare/tensor_compare.h"
#include "compare/truth.h"
#include "dumps/dump.h"
#include "dumps/external.h"
#include "dumps/junit.h"
#include "dumps/temp_files.h"
#include "spec/printable.h"

namespace parity::harness {

using namespace parity::compare;  // the comparisons this command reports

namespace {

// A tensor name (or a line built from one) as the text and Markdown reports print it: the name
// comes from the file, and its escape and control bytes would otherwise reach the terminal
// (a name could rewrite the screen or forge the report's last line).
std::string escaped(const std::string& s) { return spec::printable(s, 400); }

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
        const auto& ga = g ? sa.grads : sa.params;
        const auto& gb = g ? sb.grads : sb.params;
        if (!ga.count(fqn) || !gb.count(fqn)) continue;  // a row of its own already says so
        const auto& ta = ga.at(fqn);
        const auto& tb = gb.at(fqn);
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
                      escaped(name).c_str(), static_cast<unsigned long long>(ea.max_ulp), ea.mean_ulp,
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

nlohmann::json row_json(int64_t step, const TensorDiff& d, const Tolerance& tol) {
  return {{"step", step},
          {"tensor", d.name},
          {"dtype", d.dtype},
          {"ulp_dtype", d.ulp_dtype},
          {"numel", d.numel},
          {"bitwise", d.bitwise},
          {"within", within(d, tol)},
          {"wrong", d.wrong},
          {"max_ulp", d.max_ulp == kInfiniteUlp ? nlohmann::json("inf")
                                                          : nlohmann::json(d.max_ulp)},
          {"scale_ulps", d.scale_ulps},
          {"nmse", d.nmse},
          {"cosine", d.cosine},
          {"share_rel_below_1e-3", d.share_1e3},
          {"share_rel_below_5e-3", d.share_5e3},
          {"over_torch_tolerance", d.over_torch},
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

// "reference, bf16, single device" for a parity dump; "torch.save" for another writer's file.
std::string describe(const dumps::Dump& d) {
  if (!dumps::is_parity_dump(d)) return d.meta.count("kind") ? d.meta.at("kind") : "?";
  return d.meta.at("trainer") + ", " + d.meta.at("dtype") + ", " + d.meta.at("split");
}

std::string steps_text(const dumps::Dump& d) {
  std::string out;
  for (const auto& [s, _] : d.steps) out += (out.empty() ? "" : ", ") + std::to_string(s);
  return out;
}

// Keeps only `step` of a parity dump (refusing a step it lacks).
void keep_step(dumps::Dump& d, int64_t step) {
  if (!d.steps.count(step))
    throw dumps::DumpError("'" + d.source + "' holds no dump of step " + std::to_string(step) +
                           " (it holds " + steps_text(d) + "); give --step with one of them");
  auto s = std::move(d.steps.at(step));
  d.steps.clear();
  d.steps[step] = std::move(s);
}

// A file of another writer is one step: it stands for the parity dump's step asked for, or
// its only one. Two parity dumps keep every step unless --step picks one.
void align_steps(dumps::Dump& A, dumps::Dump& B, int64_t step) {
  const bool pa = dumps::is_parity_dump(A), pb = dumps::is_parity_dump(B);
  if (pa && pb) {
    if (step > 0) {
      keep_step(A, step);
      keep_step(B, step);
    }
    return;
  }
  if (!pa && !pb) return;
  dumps::Dump& parity = pa ? A : B;
  dumps::Dump& other = pa ? B : A;
  if (step == 0) {
    if (parity.steps.size() != 1)
      throw CompareError("'" + parity.source + "' holds steps " + steps_text(parity) + " and '" +
                         other.source + "' one: give --step N to say which step it stands for");
    step = parity.steps.begin()->first;
  }
  keep_step(parity, step);
  auto s = std::move(other.steps.begin()->second);
  s.step = step;
  other.steps.clear();
  other.steps[step] = std::move(s);
}

Tolerance tolerance_of(const CompareOptions& o) {
  if (o.max_ulp) {
    if (o.tol != "bitwise")
      throw CompareError("--max-ulp " + std::to_string(*o.max_ulp) + " and --tol " + o.tol +
                         " both set the tolerance; give one (--max-ulp K is --tol ulp:K)");
    return Tolerance{Tolerance::Ulp, *o.max_ulp, o.allow_nonfinite};
  }
  auto t = parse_tolerance(o.tol);
  if (!t) throw CompareError(tolerance_kinds().unknown_message(tolerance_kinds().option(), o.tol));
  t->allow_nonfinite = o.allow_nonfinite;
  return *t;
}

// The group of a tensor: the first component of its name ("grads", "params"), "" for none.
std::string group_of(const std::string& name) {
  const auto slash = name.find('/');
  return slash == std::string::npos ? "" : name.substr(0, slash);
}

// What the --junit and --markdown files say, from what the text and JSON say.
struct Findings {
  const std::vector<std::pair<int64_t, TensorDiff>>& rows;
  const Tolerance& tol;
  const std::vector<std::string>& outside;
  const std::vector<std::string>& vacuous;
  const std::vector<std::string>& nonfinite;
  bool nonfinite_allowed;
  int64_t first_loss_diff;
  bool prediction;
  bool failed;
};

std::string row_note(const TensorDiff& d) {
  if (!d.problem.empty()) return d.problem;
  return std::to_string(d.wrong) + " of " + std::to_string(d.numel) + " elements differ, max " +
         ulp_text(d.max_ulp) + " ulp" + (d.ulp_dtype.empty() ? "" : " " + d.ulp_dtype);
}

std::vector<dumps::JunitCase> junit_cases(const Findings& f) {
  std::vector<dumps::JunitCase> cases;
  std::map<std::pair<int64_t, std::string>, std::vector<const TensorDiff*>> groups;
  for (const auto& [step, d] : f.rows) groups[{step, group_of(d.name)}].push_back(&d);
  for (const auto& [key, diffs] : groups) {
    dumps::JunitCase jc;
    jc.classname = "parity.compare";
    jc.name = "step " + std::to_string(key.first) + " " + (key.second.empty() ? "(top)" : key.second);
    int bad = 0;
    std::string first;
    for (const TensorDiff* d : diffs) {
      const bool out = std::find(f.outside.begin(), f.outside.end(), d->name) != f.outside.end();
      if (within(*d, f.tol) && !out) continue;
      if (bad++ == 0) first = d->name + ": " + row_note(*d) + (out ? ", outside the prediction" : "");
      jc.detail += d->name + ": " + row_note(*d) + (out ? " (OUTSIDE THE PREDICTION)" : "") + "\n";
    }
    if (bad > 0) {
      jc.outcome = dumps::JunitCase::Failed;
      jc.message = std::to_string(bad) + " of " + std::to_string(diffs.size()) +
                   " tensors disagree under --tol " + to_string(f.tol) + "; first " + first;
    }
    cases.push_back(jc);
  }
  dumps::JunitCase metrics{"parity.compare", "every-step loss and grad norm", 0,
                           dumps::JunitCase::Passed, "", ""};
  if (f.first_loss_diff > 0 && f.tol.kind == Tolerance::Bitwise) {
    metrics.outcome = dumps::JunitCase::Failed;
    metrics.message = "loss or grad norm first differs at step " + std::to_string(f.first_loss_diff);
  }
  cases.push_back(metrics);
  dumps::JunitCase vac{"parity.compare", "agreement is not vacuous", 0, dumps::JunitCase::Passed,
                       "", ""};
  if (!f.vacuous.empty()) {
    vac.outcome = dumps::JunitCase::Failed;
    vac.message = "vacuous agreement: " + f.vacuous[0];
    for (const auto& v : f.vacuous) vac.detail += v + "\n";
  }
  cases.push_back(vac);
  dumps::JunitCase fin{"parity.compare", "every value is finite", 0, dumps::JunitCase::Passed,
                       "", ""};
  if (!f.nonfinite.empty()) {
    fin.outcome = f.nonfinite_allowed ? dumps::JunitCase::Passed : dumps::JunitCase::Failed;
    fin.message = std::string(f.nonfinite_allowed ? "allowed by --allow-nonfinite: " : "") +
                  "non-finite: " + f.nonfinite[0];
    for (const auto& v : f.nonfinite) fin.detail += v + "\n";
  }
  cases.push_back(fin);
  if (f.prediction) {
    dumps::JunitCase pred{"parity.compare", "differences within the predicted set", 0,
                          dumps::JunitCase::Passed, "", ""};
    if (!f.outside.empty()) {
      pred.outcome = dumps::JunitCase::Failed;
      pred.message = std::to_string(f.outside.size()) +
                     " differing gradient(s) outside the predicted set; first " + f.outside[0];
      for (const auto& n : f.outside) pred.detail += n + "\n";
    }
    cases.push_back(pred);
  }
  return cases;
}

std::string markdown_summary(const CompareOptions& o, const Findings& f) {
  int differing = 0;
  for (const auto& [step, d] : f.rows) differing += !d.bitwise;
  std::string md = "**parity compare** `" + o.a + "` vs `" + o.b + "` (tolerance " +
                   to_string(f.tol) + "): " + std::to_string(f.rows.size()) + " tensors, " +
                   std::to_string(differing) + " differ: **" + (f.failed ? "FAILED" : "OK") + "**\n\n";
  for (const auto& v : f.vacuous) md += "- vacuous agreement: " + v + "\n";
  for (const auto& v : f.nonfinite)
    md += std::string("- non-finite") + (f.nonfinite_allowed ? " (allowed)" : "") + ": " + v + "\n";
  if (f.first_loss_diff > 0)
    md += "- loss or grad norm first differs at step " + std::to_string(f.first_loss_diff) + "\n";
  if (f.prediction)
    md += "- " + std::to_string(f.outside.size()) + " differing gradient(s) outside the predicted set\n";
  if (differing == 0) return md;
  md += "\n| step | tensor | dtype | #wrong | max ulp | ulps of scale | cosine | note |\n"
        "|---|---|---|---|---|---|---|---|\n";
  int shown = 0;
  for (const auto& [step, d] : f.rows) {
    if (d.bitwise) continue;
    if (++shown > 50) {
      md += "| | ... " + std::to_string(differing - 50) + " more | | | | | | |\n";
      break;
    }
    const bool out = std::find(f.outside.begin(), f.outside.end(), d.name) != f.outside.end();
    char nums[96];
    std::snprintf(nums, sizeof nums, "%.3g | %.6f", d.scale_ulps, d.cosine);
    md += "| " + std::to_string(step) + " | `" + escaped(d.name) + "` | " + d.dtype + " | " +
          std::to_string(d.wrong) + " | " + ulp_text(d.max_ulp) +
          (d.ulp_dtype.empty() ? "" : " " + d.ulp_dtype) + " | " + nums + " | " +
          (!d.problem.empty() ? d.problem
                              : std::string(within(d, f.tol) ? "" : "outside the tolerance") +
                                    (out ? " **outside the prediction**" : "")) +
          " |\n";
  }
  return md;
}

}  // namespace

int compare_command(const CompareOptions& o) {
  const Tolerance tol = tolerance_of(o);
  UlpChoice ulp;
  ulp.forced = o.ulp_dtype;
  std::optional<Prediction> prediction;
  if (!o.layout.empty()) prediction = predict(parse_layout(o.layout));
  const dumps::NameMap names = o.map.empty() ? dumps::NameMap{} : dumps::read_name_map(o.map);
  auto A = dumps::read_run(o.a, names);
  auto B = dumps::read_run(o.b, names);
  align_steps(A, B, o.step);
  std::vector<std::pair<int64_t, TensorDiff>> rows;
  for (auto& r : compare_dumps(A, B, o.threads, ulp)) rows.push_back({r.step, std::move(r.diff)});

  // The predicted set: every differing gradient must lie inside it.
  std::vector<std::string> outside;
  int named = 0;
  if (prediction)
    for (const auto& [step, d] : rows) {
      if (d.name.rfind("grads/", 0) != 0) continue;
      const std::string fqn = d.name.substr(6);
      named += unit_of_name(fqn, prediction->layers) < prediction->layers;
      if (!d.bitwise && !prediction->predicts(fqn)) outside.push_back(d.name);
    }

  // Verdict and guards against vacuous agreement.
  int differing = 0;
  uint64_t worst = 0;
  bool failed = false;
  for (const auto& [step, d] : rows) {
    if (!within(d, tol)) failed = true;
    if (d.bitwise) continue;
    ++differing;
    worst = std::max(worst, d.max_ulp);
  }
  if (!outside.empty()) failed = true;
  std::vector<std::string> vacuous;
  int grads = 0, zero_grads = 0;
  for (const auto& [step, d] : rows)
    if (d.name.rfind("grads/", 0) == 0) {
      ++grads;
      zero_grads += d.all_zero;
    }
  if (grads > 0 && zero_grads == grads) vacuous.push_back("every gradient is zero in both runs");
  int tensors = 0;
  for (const auto& [step, d] : rows)
    tensors += d.name.find('/') != std::string::npos && d.problem.empty();
  if (tensors == 0) vacuous.push_back("the runs share no tensor name (see --map)");
  auto flat = [](const std::vector<double>& l) {
    return l.size() > 1 && std::all_of(l.begin(), l.end(), [&](double x) { return x == l[0]; });
  };
  if (flat(A.losses) && flat(B.losses)) vacuous.push_back("the loss is flat in both runs");
  auto dead = [](const std::vector<double>& l) {
    return !l.empty() && std::all_of(l.begin(), l.end(), [](double x) { return !std::isfinite(x); });
  };
  if (dead(A.losses) && dead(B.losses)) vacuous.push_back("both runs are dead (non-finite loss)");
  if (!vacuous.empty()) failed = true;
  // A non-finite loss or norm never agrees, not even with itself (unless allowed).
  std::vector<std::string> nonfinite;
  for (const auto* run : {&A, &B})
    for (size_t i = 0; i < run->losses.size() || i < run->grad_norms.size(); ++i) {
      const bool bad = (i < run->losses.size() && !std::isfinite(run->losses[i])) ||
                       (i < run->grad_norms.size() && !std::isfinite(run->grad_norms[i]));
      if (!bad) continue;
      nonfinite.push_back(std::string(run == &A ? "a" : "b") + ": the loss or grad norm of step " +
                          std::to_string(i + 1) + " is not finite");
      break;
    }
  for (const auto& [step, d] : rows)
    if (d.nonfinite() > 0 && d.problem.empty())
      nonfinite.push_back(d.name + " (step " + std::to_string(step) + ") holds " +
                          std::to_string(d.nan_a + d.nan_b) + " NaN and " +
                          std::to_string(d.inf_a + d.inf_b) + " Inf across the two runs");
  if (!nonfinite.empty() && !o.allow_nonfinite) failed = true;

  // Every step's loss and norm, from the metrics.
  int64_t first_loss_diff = -1;
  for (size_t i = 0; i < std::min(A.losses.size(), B.losses.size()); ++i)
    if (std::memcmp(&A.losses[i], &B.losses[i], 8) != 0 ||
        std::memcmp(&A.grad_norms[i], &B.grad_norms[i], 8) != 0) {
      first_loss_diff = static_cast<int64_t>(i) + 1;
      break;
    }
  if (first_loss_diff > 0 && tol.kind == Tolerance::Bitwise) failed = true;

  std::unique_ptr<dumps::Dump> truth;
  if (!o.truth.empty()) {
    truth = std::make_unique<dumps::Dump>(dumps::read_run(o.truth, names));
    dumps::Dump& lead = dumps::is_parity_dump(A) ? A : B;
    if (!dumps::is_parity_dump(*truth) && lead.steps.size() == 1) {
      auto st = std::move(truth->steps.begin()->second);
      truth->steps.clear();
      truth->steps[lead.steps.begin()->first] = std::move(st);
    }
  }

  const Findings findings{rows, tol, outside, vacuous, nonfinite, o.allow_nonfinite, first_loss_diff, prediction.has_value(),
                          failed};
  if (!o.junit.empty()) dumps::write_junit(o.junit, {{"parity.compare", junit_cases(findings)}});
  if (!o.markdown.empty())
    dumps::write_file_atomically(o.markdown, markdown_summary(o, findings));

  if (o.json) {
    nlohmann::json j;
    if (truth) j["truth"] = truth_table(A, B, *truth, false);
    j["a"] = o.a;
    j["b"] = o.b;
    j["tolerance"] = to_string(tol);
    j["rows"] = nlohmann::json::array();
    for (const auto& [step, d] : rows) {
      auto r = row_json(step, d, tol);
      if (prediction && d.name.rfind("grads/", 0) == 0)
        r["predicted"] = prediction->predicts(d.name.substr(6));
      j["rows"].push_back(std::move(r));
    }
    j["summary"] = {{"tensors", rows.size()},
                    {"differing", differing},
                    {"max_ulp", worst == kInfiniteUlp ? nlohmann::json("inf")
                                                                : nlohmann::json(worst)},
                    {"first_step_loss_or_norm_differs", first_loss_diff},
                    {"vacuous", vacuous},
                    {"nonfinite", nonfinite},
                    {"nonfinite_allowed", o.allow_nonfinite},
                    {"pass", !failed}};
    if (prediction)
      j["prediction"] = {{"layout", o.layout},
                         {"deposited_blocks", prediction->deposited},
                         {"describe", prediction->describe()},
                         {"outside", outside}};
    std::cout << j.dump(2) << "\n";
    return failed ? 1 : 0;
  }
  std::printf("# parity compare (tolerance %s)\n#   a: %s (%s)\n#   b: %s (%s)\n",
              to_string(tol).c_str(), o.a.c_str(), describe(A).c_str(), o.b.c_str(),
              describe(B).c_str());
  std::printf("%5s  %-46s %-8s %9s %7s %9s %11s %9s %10s %9s %7s %7s %12s  %s\n", "step", "tensor",
              "dtype", "numel", "bitwise", "#wrong", "max_ulp", "scale_ulp", "nmse", "cosine",
              "<0.1%", "<0.5%", "max_abs", "at index: a vs b");
  for (const auto& [step, d] : rows) {
    const bool out = std::find(outside.begin(), outside.end(), d.name) != outside.end();
    if (d.bitwise && d.nonfinite() == 0 && !o.all_rows) continue;
    if (!d.problem.empty()) {
      std::printf("%5lld  %-46s %s\n", static_cast<long long>(step), escaped(d.name).c_str(),
                  escaped(d.problem).c_str());
      continue;
    }
    const std::string ulps = ulp_text(d.max_ulp) + (d.ulp_dtype.empty() ? "" : " " + d.ulp_dtype);
    std::printf("%5lld  %-46s %-8s %9lld %7s %9lld %11s %9.3g %10.3e %9.6f %7.4f %7.4f %12.4e  "
                "%lld: %.9g vs %.9g%s%s%s\n",
                static_cast<long long>(step), escaped(d.name).c_str(), d.dtype.c_str(),
                static_cast<long long>(d.numel), d.bitwise ? "yes" : "no",
                static_cast<long long>(d.wrong), ulps.c_str(), d.scale_ulps, d.nmse, d.cosine,
                d.share_1e3, d.share_5e3, d.max_abs, static_cast<long long>(d.max_abs_index),
                d.max_abs_a, d.max_abs_b,
                d.nan_mismatch ? "  NaN/Inf mismatch" : d.nonfinite() ? "  NaN/Inf" : "",
                within(d, tol) ? "" : "  (outside the tolerance)",
                out ? "  OUTSIDE THE PREDICTION" : "");
  }
  if (first_loss_diff > 0)
    std::printf("# every-step metrics: loss or grad norm first differs at step %lld\n",
                static_cast<long long>(first_loss_diff));
  for (const auto& v : vacuous) std::printf("# vacuous agreement: %s\n", escaped(v).c_str());
  for (const auto& v : nonfinite)
    std::printf("# non-finite%s: %s\n", o.allow_nonfinite ? " (allowed by --allow-nonfinite)" : "",
                escaped(v).c_str());
  if (prediction) {
    std::printf("# prediction (--layout %s): %s\n", o.layout.c_str(),
                prediction->describe().c_str());
    if (named == 0)
      std::printf("# prediction: no gradient is named tok_embeddings.* or layers.<l>.*; map the "
                  "run's names with --map\n");
    std::printf("# prediction: %zu differing gradient(s) outside the predicted set%s\n",
                outside.size(), outside.empty() ? "" : " (listed above)");
  }
  if (truth) truth_table(A, B, *truth, true);
  std::printf("# %zu tensors compared, %zu bitwise equal, %d differ (max %s ulp); %s\n",
              rows.size(), rows.size() - differing, differing, ulp_text(worst).c_str(),
              failed ? "FAILED" : "OK");
  return failed ? 1 : 0;
}

}  // namespace parity::harness
