#include "harness/bench.h"

#include <ATen/ATen.h>
#include <sys/resource.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compare/dump_compare.h"
#include "dumps/dump.h"
#include "harness/errors.h"
#include "harness/run.h"
#include "harness/validate.h"
#include "kernels/host_allocator.h"
#include "kernels/kda.h"
#include "kernels/model.h"
#include "kernels/op_family.h"
#include "kernels/ops.h"
#include "kernels/params.h"
#include "kernels/precision.h"
#include "kernels/threads.h"
#include "kernels/vector_kernels.h"
#include "pipelined/trainer.h"
#include "reference/trainer.h"

namespace parity::harness {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;  // ru_maxrss is in KiB on Linux
}

using Families = std::array<double, kernels::kOpFamilies>;

class StepTimes : public kernels::StepObserver {
 public:
  void on_step(const kernels::StepRecord& r) override {
    seconds.push_back(r.seconds);
    tokens = r.tokens;
    if (clock) families.push_back(clock->seconds());
    std::fprintf(stderr, "  %sstep %lld: %.1f ms", label.c_str(), static_cast<long long>(r.step),
                 r.seconds * 1e3);
    if (probe) {
      // Between the steps, outside their clocks: the step's own time and families exclude it.
      peaks.push_back(probe());
      std::fprintf(stderr, " (fp32 GEMM peak after it %.1f GFLOP/s)", peaks.back());
      if (clock) resumed.push_back(clock->seconds());
    }
    std::fprintf(stderr, "\n");
  }
  // The families' seconds charged during step s (0-based).
  Families step_families(size_t s) const {
    Families d = families[s];
    if (s > 0) {
      const Families& before = resumed.size() >= s ? resumed[s - 1] : families[s - 1];
      for (int f = 0; f < kernels::kOpFamilies; ++f) d[f] -= before[f];
    }
    return d;
  }
  std::string label;  // before "step" in the progress lines: whose step (paired benches)
  std::vector<double> seconds;
  int64_t tokens = 0;
  const kernels::FamilyClock* clock = nullptr;  // --breakdown: the clock read at each step
  std::vector<Families> families;               // the clock at each step's end
  // --breakdown: the machine's fp32 GEMM rate measured right after each step (GFLOP/s), so
  // that each step is held against the rate of its own moment (a virtual machine's speed
  // drifts by tens of percent between seconds); the clock is read again after the probe.
  std::function<double()> probe;
  std::vector<double> peaks;
  std::vector<Families> resumed;
};

// The model's FLOPs per step by op family, counted from its shapes: a linear map of an
// [out, in] weight is 2 out in per token (grouped and depthwise weights alike, routed experts
// times top_k / n_experts); MLA's attention 2 H (qk + v) (T + 1) / 2 per token (causal); the
// KDA recurrence 7 H K V per token (decay, S'^T k, the rank-1 update, S^T q); an AttnRes
// read 4 D per stack entry per token (scores and the weighted sum). The backward is counted
// as twice the forward; AdamW as 12 per parameter. Norms and element-wise ops are not
// counted (they are memory-bound: their time shows without FLOPs).
Families step_gflops(const kernels::ModelConfig& c, int64_t tokens, int64_t seq_len) {
  Families fwd{};
  auto add = [&](kernels::OpFamily f, double per_token) {
    fwd[static_cast<int>(f)] += per_token * double(tokens);
  };
  auto family_of = [&](const std::string& fqn) {
    using F = kernels::OpFamily;
    if (fqn.find(".delta_attention.") != std::string::npos) return F::Kda;
    if (fqn.find(".attention.") != std::string::npos) return F::Mla;
    if (fqn.find(".moe.") != std::string::npos || fqn.find(".feed_forward.") != std::string::npos)
      return F::MoeFfn;
    if (fqn.rfind("lm_head", 0) == 0) return F::HeadLoss;
    return F::Other;
  };
  double n_params = 0;
  for (const auto& spec : kernels::param_specs(c)) {
    n_params += double(spec.numel());
    if (spec.shape.size() < 2) continue;
    const auto f = family_of(spec.fqn);
    if (f == kernels::OpFamily::Other) continue;  // the embedding (a gather), res projections
    double flops = 2.0 * double(spec.numel());
    if (spec.fqn.find("routed_experts") != std::string::npos)
      flops *= double(c.top_k) / double(c.n_experts);
    add(f, flops);
  }
  int entries = 0;  // AttnRes: the reads of each layer (one in layer 0) and the head's one
  for (int l = 0; l <= c.n_layers; ++l) {
    const int stack = std::min(l / c.layers_per_block + 1, c.n_blocks());
    entries += (l == c.n_layers || l == 0 ? 1 : 2) * (stack + 1);
  }
  add(kernels::OpFamily::AttnRes, 4.0 * c.dim * entries);
  for (int l = 0; l < c.n_layers; ++l) {
    if (c.mixer(l) == kernels::MixerKind::MLA)
      add(kernels::OpFamily::Mla,
          2.0 * c.n_heads * (c.qk_nope + c.qk_rope + c.v_head) * double(seq_len + 1) / 2);
    else
      add(kernels::OpFamily::Kda, 7.0 * c.n_heads * double(c.kda_head) * c.kda_head);
  }
  Families step{};
  for (int f = 0; f < kernels::kOpFamilies; ++f) step[f] = 3.0 * fwd[f] / 1e9;
  step[static_cast<int>(kernels::OpFamily::Optimizer)] = 12.0 * n_params / 1e9;
  return step;
}

// Seconds per call of f: the median of `measured` calls after `warmup` unmeasured ones.
double median_seconds(int warmup, int measured, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < warmup + measured; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    if (i >= warmup)
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(t);
}

// The GEMM rate the model's products reach here, now: GFLOP/s of n x n normal products in
// dtype dt through project() (parity's product in fp32 on CPU, at::matmul otherwise).
double gemm_gflops(at::ScalarType dt, int64_t n, int warmup, int measured, at::Generator& gen) {
  auto a = at::empty({n, n}).normal_(0, 1, gen).to(dt);
  auto w = at::empty({n, n}).normal_(0, 1, gen).to(dt);
  at::NoGradGuard no_grad;
  const double s = median_seconds(warmup, measured, [&] { kernels::project(a, w); });
  return 2.0 * double(n) * n * n / s / 1e9;
}

void print_breakdown(const BenchOptions& o, const StepTimes& times) {
  const auto cfg = kernels::flavor(o.run.flavor);
  const size_t first = static_cast<size_t>(o.warmup_steps);
  const size_t n = times.families.size() - first;
  Families mean{};
  for (size_t s = first; s < times.families.size(); ++s) {
    const Families d = times.step_families(s);
    for (int f = 0; f < kernels::kOpFamilies; ++f) mean[f] += d[f] / double(n);
  }
  double total = 0;
  for (double v : mean) total += v;
  const auto gflops = step_gflops(cfg, times.tokens, o.run.seq_len);
  double total_gflop = 0;
  for (double v : gflops) total_gflop += v;
  const auto dt = kernels::compute_dtype(o.run.dtype);
  auto gen = at::detail::createCPUGenerator(o.run.seed);
  const double peak32 = gemm_gflops(at::kFloat, 1024, 2, 5, gen),
               peak256 = gemm_gflops(dt, 256, 2, 5, gen),
               peak_dt = dt == at::kFloat ? peak32 : gemm_gflops(dt, 1024, 2, 5, gen);
  std::printf("\nbreakdown: the mean of %zu measured steps, by op family (forward, and the "
              "backward nodes each one's forward made)\n", n);
  std::printf("%-12s %10s %7s %12s %10s\n", "family", "ms/step", "share", "GFLOP/step",
              "GFLOP/s");
  for (int f = 0; f < kernels::kOpFamilies; ++f) {
    std::printf("%-12s %10.1f %6.1f%% %12.2f", kernels::op_family_name(kernels::OpFamily(f)),
                mean[f] * 1e3, 100.0 * mean[f] / total, gflops[f]);
    if (gflops[f] > 0 && mean[f] > 0)
      std::printf(" %10.1f\n", gflops[f] / mean[f]);
    else
      std::printf(" %10s\n", "-");
  }
  std::printf("%-12s %10.1f %6.1f%% %12.2f %10.1f\n", "step", total * 1e3, 100.0, total_gflop,
              total_gflop / total);
  std::printf("GEMM peak here (project(), %d thread(s), %s; malloc %s): "
              "fp32 n=1024 %.1f GFLOP/s", o.run.threads, kernels::vector_kernels_text().c_str(),
              kernels::malloc_text().c_str(), peak32);
  if (dt != at::kFloat) std::printf(", %s n=1024 %.1f GFLOP/s", spec::to_string(o.run.dtype), peak_dt);
  std::printf(", %s n=256 %.1f GFLOP/s\n", spec::to_string(o.run.dtype), peak256);
  std::printf("step: %.1f GFLOP at %.1f GFLOP/s = %.0f%% of the n=1024 peak", total_gflop,
              total_gflop / total, 100.0 * total_gflop / total / peak_dt);
  if (dt != at::kFloat)
    std::printf(" (%.0f%% of the fp32 one)", 100.0 * total_gflop / total / peak32);
  std::printf(" (FLOPs counted from the shapes: 2 per weight per token, x3 for the backward, "
              "MLA and KDA cores, AdamW)\n");
  if (times.peaks.size() == times.seconds.size() && n > 0) {
    // Each measured step against the fp32 peak measured right after it.
    std::vector<double> shares;
    std::printf("each step against the fp32 peak measured right after it:");
    for (size_t s = first; s < times.seconds.size(); ++s) {
      shares.push_back(100.0 * total_gflop / times.seconds[s] / times.peaks[s]);
      std::printf(" %.0f%%", shares.back());
    }
    const auto [lo, hi] = std::minmax_element(times.peaks.begin() + long(first), times.peaks.end());
    std::printf(" (peaks %.1f to %.1f GFLOP/s): median %.0f%%\n", *lo, *hi, median(shares));
  }
  if (o.what != spec::BenchTarget::Pipelined &&
      reference::side_by_side_lanes(train_config(o.run)) > 1)
    std::printf("note: the per-family clock runs the micro-batches one after the other (the "
                "reference trainer runs them side by side only without it), so this is not "
                "the %d-thread step: measure that without --breakdown\n", o.run.threads);
  std::fflush(stdout);
}

// The median of the steps after the warm-up ones, in ms.
double measured_ms(const BenchOptions& o, const StepTimes& times) {
  return median({times.seconds.begin() + o.warmup_steps, times.seconds.end()}) * 1e3;
}

void print_bench(const BenchOptions& o, bool pipe, const std::string& shape,
                 const StepTimes& times, const pipelined::PipelineStats& stats) {
  const double ms = measured_ms(o, times);
  std::printf("%-12s %-6s %-24s %12s %12s %12s", "flavor", "dtype", "trainer", "ms/step",
              "tokens/s", "peak RSS MiB");
  if (pipe) std::printf(" %14s %14s", "fwd B/mb", "bwd B/mb");
  std::printf("\n%-12s %-6s %-24s %12.1f %12.1f %12.1f", spec::to_string(o.run.flavor),
              spec::to_string(o.run.dtype), (pipe ? "pipelined " + shape : shape).c_str(), ms,
              times.tokens / (ms / 1e3), peak_rss_mib());
  if (pipe && !stats.bytes_forward_per_mb.empty())
    std::printf(" %14lld %14lld", static_cast<long long>(stats.bytes_forward_per_mb[0]),
                static_cast<long long>(stats.bytes_backward_per_mb[0]));
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int bench_trainer(BenchOptions o) {
  if (o.breakdown && o.run.nproc > 0)
    throw UsageError("--breakdown times one process: drop --nproc (the in-process pipeline "
                     "runs every rank on this thread)");
  o.run.steps = o.warmup_steps + o.measured_steps;
  const bool pipe = o.what == spec::BenchTarget::Pipelined;
  std::string shape = "reference";
  if (pipe)
    shape = "pp" + std::to_string(o.run.pp) + "xvp" + std::to_string(o.run.vp) + " cache " +
            spec::to_string(o.run.cache);
  std::fprintf(stderr, "bench %s: %s %s, %d x %d x %lld tokens, %d warm-up + %d measured "
               "steps, %d thread(s), %s\n", shape.c_str(), spec::to_string(o.run.flavor),
               spec::to_string(o.run.dtype), o.run.microbatches, o.run.rows,
               static_cast<long long>(o.run.seq_len), o.warmup_steps, o.measured_steps,
               o.run.threads, kernels::vector_kernels_text().c_str());
  if (pipe && o.run.nproc > 0)
    shape += ", " + std::to_string(o.run.nproc) + " processes (" +
             std::string(spec::to_string(o.run.backend_or_default())) + ")";
  StepTimes times;
  std::unique_ptr<kernels::FamilyClock> clock;
  auto probe_gen = at::detail::createCPUGenerator(o.run.seed);
  if (o.breakdown) {
    clock = std::make_unique<kernels::FamilyClock>();
    times.clock = clock.get();
    if (!pipe) times.probe = [&] { return gemm_gflops(at::kFloat, 1024, 1, 3, probe_gen); };
  }
  // Printed by the process that ran rank 0 (a worker under --nproc).
  o.run.trainer = pipe ? spec::Trainer::Pipelined : spec::Trainer::Reference;
  run_trainer(o.run, times,
              [&](const pipelined::PipelineStats& stats) {
                print_bench(o, pipe, shape, times, stats);
                if (clock) print_breakdown(o, times);
              });
  return 0;
}

namespace {

// Two runs of one model to compare step by step (harness/bench.h, paired ratios).
struct Pair {
  std::string what;            // the third column: which pair
  std::string a_ms, b_ms;      // the time columns' heads
  std::string figure;          // the last column's head, and the summary line's name
  RunOptions a, b;
  double (*of)(double a_ms, double b_ms);
};

double b_over_a(double a, double b) { return b / a; }
double a_over_b(double a, double b) { return a / b; }

// A trainer of either kind (in this process), stepped from outside.
class Stepped {
 public:
  explicit Stepped(const RunOptions& o) : run_(validate_run(o)) {
    if (o.pipelined())
      pipe_ = std::make_unique<pipelined::PipelinedTrainer>(run_.cfg, run_.pc, run_.init,
                                                            *run_.rows);
    else
      ref_ = std::make_unique<reference::ReferenceTrainer>(run_.cfg, run_.init, *run_.rows);
  }
  const kernels::TrainConfig& config() const { return run_.cfg; }
  void step(int64_t s, kernels::StepObserver& obs) {
    kernels::pin_threads(run_.cfg.threads);  // the two may differ in their threads
    if (pipe_)
      pipe_->step(s, obs);
    else
      ref_->step(s, obs);
  }

 private:
  PreparedRun run_;  // before the trainers: they keep references into it
  std::unique_ptr<reference::ReferenceTrainer> ref_;
  std::unique_ptr<pipelined::PipelinedTrainer> pipe_;
};

// Two trainers built side by side and stepped in turns: step s of a and step s of b back to
// back (a first in odd steps, b first in even ones), so that the two steps of a pair are a
// second apart and a drift of the machine's speed weighs on both alike. Each step's own time
// (the trainer's clock); one row per measured step, then the median of the figures.
int interleaved_steps(const BenchOptions& o, const Pair& p) {
  Stepped a(p.a), b(p.b);
  kernels::prepare_run(a.config());
  kernels::prepare_run(b.config());
  // Room in the host cache for both trainers' freed blocks: with one trainer's cap, each step
  // would hand the other's blocks back to malloc and fault its own in again, timing the
  // allocator rather than the step.
  kernels::install_host_allocator(2 * kernels::kHostCacheCapBytes);
  StepTimes ta, tb;
  ta.label = p.a_ms.substr(0, p.a_ms.rfind(" ms")) + ": ";  // "none: step 3: ..."
  tb.label = p.b_ms.substr(0, p.b_ms.rfind(" ms")) + ": ";
  std::printf("%-12s %-6s %-24s %6s %14s %14s %8s\n", "flavor", "dtype", p.what.c_str(), "step",
              p.a_ms.c_str(), p.b_ms.c_str(), p.figure.c_str());
  std::vector<double> figures;
  const int64_t steps = o.warmup_steps + o.measured_steps;
  for (int64_t s = 1; s <= steps; ++s) {
    if (s % 2 == 1) {
      a.step(s, ta);
      b.step(s, tb);
    } else {
      b.step(s, tb);
      a.step(s, ta);
    }
    if (s <= o.warmup_steps) continue;
    const double a_ms = ta.seconds.back() * 1e3, b_ms = tb.seconds.back() * 1e3;
    figures.push_back(p.of(a_ms, b_ms));
    std::printf("%-12s %-6s %-24s %6lld %14.1f %14.1f %8.3f\n", spec::to_string(o.run.flavor),
                spec::to_string(o.run.dtype), p.what.c_str(), static_cast<long long>(s), a_ms,
                b_ms, figures.back());
    std::fflush(stdout);
  }
  std::printf("%s (median of %d steps): %.3f\n", p.figure.c_str(), o.measured_steps,
              median(figures));
  return 0;
}

void interleaved_progress(const BenchOptions& o, const std::string& what) {
  std::fprintf(stderr, "bench %s, %s %s, %d warm-up + %d measured steps of each, in turns, %s\n",
               what.c_str(), spec::to_string(o.run.flavor), spec::to_string(o.run.dtype),
               o.warmup_steps, o.measured_steps, kernels::vector_kernels_text().c_str());
}

}  // namespace

int bench_ratio(BenchOptions o) {
  if (o.run.nproc > 0)
    throw UsageError("--what ratio times the in-process pipeline against the reference: drop "
                     "--nproc");
  o.run.steps = o.warmup_steps + o.measured_steps;
  Pair p;
  p.what = "pp" + std::to_string(o.run.pp) + "xvp" + std::to_string(o.run.vp) + " cache " +
           spec::to_string(o.run.cache);
  interleaved_progress(o, "ratio: " + p.what + " / reference, " +
                              std::to_string(o.run.threads) + " thread(s)");
  // The reference reads the pipeline's shape only for the per-rank norm; it runs no schedule.
  p.a = o.run;
  p.a.trainer = spec::Trainer::Reference;
  p.a.schedule.reset();
  if (p.a.clip_order != spec::ClipOrder::PerRank) {
    p.a.pp = p.a.vp = 1;
    p.a.split.clear();
  }
  p.b = o.run;
  p.b.trainer = spec::Trainer::Pipelined;
  p.a_ms = "reference ms";
  p.b_ms = "pipelined ms";
  p.figure = "ratio";
  p.of = b_over_a;
  return interleaved_steps(o, p);
}

namespace {

// Two reference trainers on o's run, for --what `target`: both run in this process (no
// --nproc); o's steps set to its warm-up and measured ones.
Pair reference_pair(BenchOptions& o, const std::string& target) {
  if (o.run.nproc > 0)
    throw UsageError("--what " + target + " times the reference trainer in this process: drop "
                     "--nproc");
  o.run.steps = o.warmup_steps + o.measured_steps;
  Pair p;
  p.a = p.b = o.run;
  p.a.trainer = p.b.trainer = spec::Trainer::Reference;
  return p;
}

}  // namespace

int bench_ac_ratio(BenchOptions o) {
  Pair p = reference_pair(o, "ac-ratio");
  p.what = "ac layer / none";
  interleaved_progress(o, "ac-ratio: --ac layer / --ac none, reference, " +
                              std::to_string(o.run.threads) + " thread(s)");
  p.a.ac = spec::Checkpointing::None;
  p.b.ac = spec::Checkpointing::Layer;
  p.a_ms = "none ms";
  p.b_ms = "layer ms";
  p.figure = "ratio";
  p.of = b_over_a;
  return interleaved_steps(o, p);
}

int bench_threads_ratio(BenchOptions o) {
  Pair p = reference_pair(o, "threads-ratio");
  if (o.run.threads < 2)
    throw UsageError("--what threads-ratio times --threads N against one thread: give "
                     "--threads 2 or more");
  const std::string n = std::to_string(o.run.threads);
  p.what = n + " threads / 1";
  interleaved_progress(o, "threads-ratio: --threads " + n + " against 1, reference");
  p.a.threads = 1;
  p.a_ms = "1 thread ms";
  p.b_ms = n + " threads ms";
  p.figure = "speedup";
  p.of = a_over_b;
  return interleaved_steps(o, p);
}

// Reads two dumps (files in the page cache after the first read) and compares every tensor:
// the rate is bytes of tensor data per side over the comparison's wall time.
int bench_compare(const BenchOptions& o) {
  if (o.a.empty() || o.b.empty())
    throw UsageError("bench --what compare needs --a DUMP and --b DUMP (from train --dump)");
  for (int warm = 0; warm < 1; ++warm) dumps::read_dump(o.a);  // bring the files into cache
  dumps::read_dump(o.b);
  auto t0 = std::chrono::steady_clock::now();
  auto A = dumps::read_dump(o.a);
  auto B = dumps::read_dump(o.b);
  auto t1 = std::chrono::steady_clock::now();
  std::vector<double> times;
  size_t rows = 0;
  for (int i = 0; i < std::max(1, o.measured_steps); ++i) {
    auto c0 = std::chrono::steady_clock::now();
    rows = compare::compare_dumps(A, B, o.run.threads).size();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count());
  }
  const double read_s = std::chrono::duration<double>(t1 - t0).count();
  const double cmp_s = median(times);
  const double gb = compare::compared_bytes(A) / 1e9;
  std::printf("%-10s %8s %10s %12s %12s %14s %14s\n", "what", "threads", "tensors", "GB/side",
              "read s", "compare s", "compare GB/s");
  std::printf("%-10s %8d %10zu %12.3f %12.3f %14.3f %14.2f\n", "compare", o.run.threads, rows, gb,
              read_s, cmp_s, gb / cmp_s);
  return 0;
}

int bench_kda(const BenchOptions& o) {
  auto cfg = kernels::flavor(o.run.flavor);
  auto precision = o.run.dtype;
  const auto dt = kernels::compute_dtype(precision);
  kernels::pin_threads(o.run.threads);
  auto all = kernels::init_params(cfg, o.run.seed);
  int layer = 0;
  while (cfg.mixer(layer) != kernels::MixerKind::KDA) ++layer;
  std::vector<std::string> names;
  std::vector<at::Tensor> copies;
  for (size_t i = 0; i < all.size(); ++i) {
    names.push_back(all.names()[i]);
    copies.push_back(all[i].to(dt).requires_grad_(true));
  }
  const auto w = kernels::kda_weights(kernels::NamedTensors(names, copies), layer);
  auto gen = at::detail::createCPUGenerator(o.run.seed);
  auto x = at::empty({o.run.rows, o.run.seq_len, cfg.dim}).normal_(0, 1, gen).to(dt);
  x.requires_grad_(true);
  // The core alone, on inputs of the mixer's core shape in the dtype it runs in: q, k unit
  // rows (q scaled by K^-1/2), v ~ N(0,1), g ~ U(-5,0), beta ~ U(0,1).
  const int64_t B = o.run.rows, H = cfg.n_heads, T = o.run.seq_len, K = cfg.kda_head;
  const auto acc = kernels::accum_dtype(dt);
  auto unit = [](const at::Tensor& a) { return a / a.pow(2).sum(-1, true).sqrt(); };
  std::vector<at::Tensor> core{unit(at::randn({B, H, T, K}, gen)) / std::sqrt(double(K)),
                               unit(at::randn({B, H, T, K}, gen)), at::randn({B, H, T, K}, gen),
                               -5.0 * at::rand({B, H, T, K}, gen), at::rand({B, H, T}, gen)};
  for (auto& c : core) c = c.to(acc).requires_grad_(true);
  auto timed = [&](const std::function<void()>& f) {
    return median_seconds(o.warmup_steps, o.measured_steps, f) * 1e3;
  };
  std::printf("%-12s %-6s %-10s %6s %14s %14s\n", "flavor", "dtype", "kda", "T",
              "layer ms", "core ms");
  for (auto impl : {kernels::KdaImpl::Fused, kernels::KdaImpl::Chunked,
                    kernels::KdaImpl::Recurrent}) {
    const auto d = kernels::kda_dims(cfg, impl);
    const double layer = timed([&] { kernels::kda(x, w, d).sum().backward(); });
    const double core_ms = timed([&] {
      kernels::kda_form(impl, core[0], core[1], core[2], core[3], core[4], d.chunk)
          .sum()
          .backward();
    });
    std::printf("%-12s %-6s %-10s %6lld %14.2f %14.2f\n", cfg.name.c_str(), spec::to_string(o.run.dtype),
                spec::to_string(impl), static_cast<long long>(T), layer, core_ms);
    std::fflush(stdout);
  }
  return 0;
}

// The GEMM rate the kernels can reach on this machine, thread count and dtype: project() of
// two normal n x n matrices (the product every linear layer runs), the median of the
// measured products after the warm-up ones.
int bench_gemm(const BenchOptions& o) {
  const auto dt = kernels::compute_dtype(o.run.dtype);
  kernels::pin_threads(o.run.threads);
  auto gen = at::detail::createCPUGenerator(o.run.seed);
  std::fprintf(stderr, "bench gemm: %s\n", kernels::vector_kernels_text().c_str());
  std::printf("%-6s %8s %6s %12s %10s\n", "dtype", "threads", "n", "ms/product", "GFLOP/s");
  for (int64_t n : {256, 512, 1024, 2048}) {
    const double gflops = gemm_gflops(dt, n, o.warmup_steps, o.measured_steps, gen);
    std::printf("%-6s %8d %6lld %12.3f %10.2f\n", spec::to_string(o.run.dtype), o.run.threads,
                static_cast<long long>(n), 2.0 * double(n) * n * n / gflops / 1e6, gflops);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace parity::harness
