#include "harness/localise_command.h"

#include <cstdio>
#include <iostream>

namespace parity::harness {

using namespace parity::compare;  // the verdicts this command reports

nlohmann::json to_json(const LocaliseReport& r) {
  nlohmann::json blocks = nlohmann::json::array(), tensors = nlohmann::json::array(),
                 findings = nlohmann::json::array();
  for (const auto& b : r.blocks)
    blocks.push_back({{"step", b.step}, {"mb", b.mb}, {"block", b.block}, {"stage", b.stage},
                      {"verdict", to_string(b.verdict)}, {"contributions", b.contributions},
                      {"excess_a", b.excess_a}, {"excess_b", b.excess_b}, {"why", b.why}});
  for (const auto& t : r.tensors)
    tensors.push_back({{"step", t.step}, {"tensor", t.name}, {"verdict", to_string(t.verdict)},
                       {"predicted", t.predicted}, {"wrong", t.wrong}, {"max_ulp", t.max_ulp},
                       {"nmse", t.nmse}, {"why", t.why}});
  for (const auto& f : r.findings)
    findings.push_back({{"run", f.run}, {"step", f.step}, {"mb", f.mb}, {"block", f.block},
                        {"stage", f.stage}, {"what", f.what}});
  nlohmann::json first = nullptr;
  if (r.first.found)
    first = {{"step", r.first.step}, {"mb", r.first.mb}, {"stage", r.first.stage},
             {"hop", r.first.hop}, {"tensor", r.first.tensor}};
  return {{"steps", r.steps},
          {"predicted", r.predicted},
          {"counts",
           {{"EXACT", r.count(Verdict::Exact)},
            {"ORDER-ONLY", r.count(Verdict::OrderOnly)},
            {"WRONG", r.count(Verdict::Wrong)}}},
          {"blocks", blocks},
          {"tensors", tensors},
          {"findings", findings},
          {"first_divergence", first},
          {"ok", r.ok()}};
}

void print_text(const LocaliseReport& r, bool all_rows) {
  int bc[3] = {0, 0, 0};
  for (const auto& b : r.blocks) ++bc[static_cast<int>(b.verdict)];
  std::printf("# predicted set (upstream of a block read from a rank's store): %zu tensors\n",
              r.predicted.size());
  std::printf("# block gradients: %d EXACT, %d ORDER-ONLY, %d WRONG\n", bc[0], bc[1], bc[2]);
  for (const auto& b : r.blocks)
    if (b.verdict == Verdict::Wrong)
      std::printf("  WRONG step %lld micro-batch %d block %d (producer stage %d): %s\n",
                  static_cast<long long>(b.step), b.mb, b.block, b.stage, b.why.c_str());
  for (const auto& f : r.findings)
    std::printf("  run %s, step %lld, micro-batch %d, block %d, stage %d: %s\n", f.run.c_str(),
                static_cast<long long>(f.step), f.mb, f.block, f.stage, f.what.c_str());
  std::printf("%5s  %-46s %-10s %-9s %8s %8s %10s  %s\n", "step", "tensor", "verdict", "predicted",
              "#wrong", "max_ulp", "nmse", "why");
  int hidden = 0;
  for (const auto& t : r.tensors) {
    if (!all_rows && t.verdict == Verdict::Exact) continue;
    if (!all_rows && t.verdict == Verdict::OrderOnly && t.name.rfind("params/", 0) == 0) {
      ++hidden;  // every parameter moves with the order-only norm: listed with --all
      continue;
    }
    std::printf("%5lld  %-46s %-10s %-9s %8lld %8llu %10.3g  %s\n", static_cast<long long>(t.step),
                t.name.c_str(), to_string(t.verdict), t.predicted ? "yes" : "no",
                static_cast<long long>(t.wrong), static_cast<unsigned long long>(t.max_ulp),
                t.nmse, t.why.c_str());
  }
  if (hidden > 0)
    std::printf("# (%d updated parameters ORDER-ONLY through the norm and the update; --all "
                "lists them)\n",
                hidden);
  if (r.first.found)
    std::printf("# first divergence: step %lld, micro-batch %d, stage %d, %s: %s\n",
                static_cast<long long>(r.first.step), r.first.mb, r.first.stage,
                r.first.hop.c_str(), r.first.tensor.c_str());
  else
    std::printf("# first divergence: none (every recorded read, hop and block gradient equal)\n");
  std::printf("# %zu tensors: %d EXACT, %d ORDER-ONLY, %d WRONG; %s\n", r.tensors.size(),
              r.count(Verdict::Exact), r.count(Verdict::OrderOnly), r.count(Verdict::Wrong),
              r.ok() ? "OK: every difference is reduction order" : "FAILED");
}

int localise_command(const LocaliseJob& o) {
  const auto r = localise(o.a, o.b, o.threads);
  if (o.json)
    std::cout << to_json(r).dump(2) << "\n";
  else
    print_text(r, o.all_rows);
  return r.ok() ? 0 : 1;
}

}  // namespace parity::harness
