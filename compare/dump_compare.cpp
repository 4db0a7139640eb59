#include "compare/dump_compare.h"

#include <atomic>
#include <set>
#include <thread>

namespace parity::compare {

namespace {
struct Job {
  int64_t step;
  std::string name;
  const dumps::StoredTensor* a;
  const dumps::StoredTensor* b;
};
}  // namespace

std::vector<CompareRow> compare_dumps(const dumps::Dump& A, const dumps::Dump& B, int threads) {
  if (A.meta.at("flavor") != B.meta.at("flavor"))
    throw dumps::DumpError("the dumps are of different flavors (" + A.meta.at("flavor") + " and " +
                    B.meta.at("flavor") + "); compare runs of one model");
  if (A.meta.at("fqns") != B.meta.at("fqns"))
    throw dumps::DumpError("the dumps hold different parameter sets (FQN lists differ); compare runs "
                    "of one model");
  std::set<int64_t> steps_a, steps_b;
  for (const auto& s : A.steps) steps_a.insert(s.first);
  for (const auto& s : B.steps) steps_b.insert(s.first);
  if (steps_a != steps_b || steps_a.empty()) {
    std::string sa, sb;
    for (auto s : steps_a) sa += " " + std::to_string(s);
    for (auto s : steps_b) sb += " " + std::to_string(s);
    throw dumps::DumpError("the dumps hold different steps (" + A.source + ":" +
                    (sa.empty() ? " none" : sa) + "; " + B.source + ":" +
                    (sb.empty() ? " none" : sb) + "); dump the same --dump-steps in both runs");
  }
  std::vector<Job> jobs;
  for (int64_t step : steps_a) {
    const auto& sa = A.steps.at(step);
    const auto& sb = B.steps.at(step);
    for (const auto& [k, v] : sa.scalars)
      if (sb.scalars.count(k)) jobs.push_back({step, k, &v, &sb.scalars.at(k)});
    if (sa.grads.size() != sb.grads.size())
      throw dumps::DumpError("step " + std::to_string(step) + ": " + std::to_string(sa.grads.size()) +
                      " gradients against " + std::to_string(sb.grads.size()) +
                      "; one dump is missing a rank's file");
    for (const auto& fqn : sa.fqns) {
      if (!sb.grads.count(fqn) || !sb.params.count(fqn))
        throw dumps::DumpError("step " + std::to_string(step) + ": " + B.source + " lacks " + fqn);
      jobs.push_back({step, "grads/" + fqn, &sa.grads.at(fqn), &sb.grads.at(fqn)});
      jobs.push_back({step, "params/" + fqn, &sa.params.at(fqn), &sb.params.at(fqn)});
    }
    // The expert biases, where both dumps hold them (older dumps and models without MoE
    // have none).
    for (const auto& [fqn, a] : sa.buffers)
      if (sb.buffers.count(fqn)) jobs.push_back({step, "buffers/" + fqn, &a, &sb.buffers.at(fqn)});
  }
  std::vector<CompareRow> rows(jobs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();)
      rows[i] = {jobs[i].step, compare_arrays(jobs[i].name, *jobs[i].a, *jobs[i].b)};
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return rows;
}

int64_t compared_bytes(const dumps::Dump& a) {
  int64_t n = 0;
  for (const auto& [step, s] : a.steps) {
    for (const auto& [k, v] : s.scalars) n += static_cast<int64_t>(v.bytes.size());
    for (const auto& [k, v] : s.grads) n += static_cast<int64_t>(v.bytes.size());
    for (const auto& [k, v] : s.params) n += static_cast<int64_t>(v.bytes.size());
    for (const auto& [k, v] : s.buffers) n += static_cast<int64_t>(v.bytes.size());
  }
  return n;
}

}  // namespace parity::compare
