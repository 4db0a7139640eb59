#include "compare/dump_compare.h"

#include <atomic>
#include <set>
#include <thread>

#include "dumps/external.h"

namespace parity::compare {

namespace {
struct Job {
  int64_t step;
  std::string name;
  const dumps::StoredTensor* a;
  const dumps::StoredTensor* b;
  std::optional<h5::DType> ulp;
  std::string problem;  // set: the row is this problem (a tensor on one side only)
};

// A bf16-master run holds bf16 gradients in fp32 buffers.
bool bf16_grads_in_fp32(const dumps::Dump& d) {
  auto it = d.meta.find("dtype");
  return it != d.meta.end() && it->second == "bf16-master";
}

// Matches the tensors of one group by name: pairs in A's order, then B's leftovers.
void match_group(int64_t step, const std::string& group,
                 const std::map<std::string, dumps::StoredTensor>& a,
                 const std::map<std::string, dumps::StoredTensor>& b,
                 const std::vector<std::string>& order, std::optional<h5::DType> ulp,
                 const std::string& a_src, const std::string& b_src, std::vector<Job>& jobs) {
  // A group one side lacks altogether (a file of gradients alone) is not compared; the
  // command's guard catches runs that share nothing.
  if (a.empty() || b.empty()) return;
  std::set<std::string> done;
  auto one = [&](const std::string& fqn) {
    if (!done.insert(fqn).second) return;
    const bool in_a = a.count(fqn), in_b = b.count(fqn);
    if (in_a && in_b)
      jobs.push_back({step, group + fqn, &a.at(fqn), &b.at(fqn), ulp, ""});
    else if (in_a)
      jobs.push_back({step, group + fqn, &a.at(fqn), nullptr, ulp, "only in A (" + a_src + ")"});
    else if (in_b)
      jobs.push_back({step, group + fqn, nullptr, &b.at(fqn), ulp, "only in B (" + b_src + ")"});
  };
  for (const auto& fqn : order) one(fqn);
  for (const auto& [fqn, t] : a) one(fqn);
  for (const auto& [fqn, t] : b) one(fqn);
}

TensorDiff missing(const Job& j) {
  TensorDiff d;
  d.name = j.name;
  const auto* t = j.a ? j.a : j.b;
  d.dtype = h5::dtype_name(t->dtype);
  d.numel = t->numel();
  d.problem = j.problem;
  d.bitwise = false;
  d.all_zero = false;
  return d;
}

}  // namespace

std::vector<CompareRow> compare_dumps(const dumps::Dump& A, const dumps::Dump& B, int threads,
                                      const UlpChoice& ulp) {
  const bool both_parity = dumps::is_parity_dump(A) && dumps::is_parity_dump(B);
  const auto grad_ulp = ulp.forced ? ulp.forced
                        : (bf16_grads_in_fp32(A) || bf16_grads_in_fp32(B))
                            ? std::optional<h5::DType>(h5::DType::BF16)
                            : std::nullopt;
  if (both_parity && A.meta.at("flavor") != B.meta.at("flavor"))
    throw dumps::DumpError("the dumps are of different flavors (" + A.meta.at("flavor") + " and " +
                    B.meta.at("flavor") + "); compare runs of one model");
  if (both_parity && A.meta.at("fqns") != B.meta.at("fqns"))
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
                    (sb.empty() ? " none" : sb) + "); dump the same --dump-steps in both runs" +
                    (both_parity ? "" : ", or pick the parity dump's step with --step N"));
  }
  std::vector<Job> jobs;
  for (int64_t step : steps_a) {
    const auto& sa = A.steps.at(step);
    const auto& sb = B.steps.at(step);
    for (const auto& [k, v] : sa.scalars)
      if (sb.scalars.count(k)) jobs.push_back({step, k, &v, &sb.scalars.at(k), ulp.forced, ""});
    if (!both_parity) {
      match_group(step, "grads/", sa.grads, sb.grads, sa.fqns, grad_ulp, A.source, B.source, jobs);
      match_group(step, "params/", sa.params, sb.params, sa.fqns, ulp.forced, A.source, B.source,
                  jobs);
      match_group(step, "buffers/", sa.buffers, sb.buffers, {}, ulp.forced, A.source, B.source,
                  jobs);
      continue;
    }
    if (sa.grads.size() != sb.grads.size())
      throw dumps::DumpError("step " + std::to_string(step) + ": " + std::to_string(sa.grads.size()) +
                      " gradients against " + std::to_string(sb.grads.size()) +
                      "; one dump is missing a rank's file");
    for (const auto& fqn : sa.fqns) {
      if (!sb.grads.count(fqn) || !sb.params.count(fqn))
        throw dumps::DumpError("step " + std::to_string(step) + ": " + B.source + " lacks " + fqn);
      jobs.push_back({step, "grads/" + fqn, &sa.grads.at(fqn), &sb.grads.at(fqn), grad_ulp, ""});
      jobs.push_back({step, "params/" + fqn, &sa.params.at(fqn), &sb.params.at(fqn), ulp.forced, ""});
    }
    // The expert biases, where both dumps hold them (older dumps and models without MoE
    // have none).
    for (const auto& [fqn, a] : sa.buffers)
      if (sb.buffers.count(fqn))
        jobs.push_back({step, "buffers/" + fqn, &a, &sb.buffers.at(fqn), ulp.forced, ""});
  }
  std::vector<CompareRow> rows(jobs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();)
      rows[i] = {jobs[i].step, jobs[i].problem.empty()
                                   ? compare_arrays(jobs[i].name, *jobs[i].a, *jobs[i].b, jobs[i].ulp)
                                   : missing(jobs[i])};
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
