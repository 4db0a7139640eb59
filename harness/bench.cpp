#include "harness/bench.h"

#include <ATen/ATen.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "compare/dump_compare.h"
#include "dumps/dump.h"
#include "harness/errors.h"
#include "harness/run.h"
#include "kernels/kda.h"
#include "kernels/model.h"
#include "kernels/params.h"
#include "kernels/threads.h"

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

class StepTimes : public kernels::StepObserver {
 public:
  void on_step(const kernels::StepRecord& r) override {
    seconds.push_back(r.seconds);
    tokens = r.tokens;
    std::fprintf(stderr, "  step %lld: %.1f ms\n", static_cast<long long>(r.step),
                 r.seconds * 1e3);
  }
  std::vector<double> seconds;
  int64_t tokens = 0;
};

void print_bench(const BenchOptions& o, bool pipe, const std::string& shape,
                 const StepTimes& times, const pipelined::PipelineStats& stats) {
  std::vector<double> measured(times.seconds.begin() + o.warmup_steps, times.seconds.end());
  const double ms = median(measured) * 1e3;
  std::printf("%-12s %-6s %-24s %12s %12s %12s", "flavor", "dtype", "trainer", "ms/step",
              "tokens/s", "peak RSS MiB");
  if (pipe) std::printf(" %14s %14s", "fwd B/mb", "bwd B/mb");
  std::printf("\n%-12s %-6s %-24s %12.1f %12.1f %12.1f", o.run.flavor.c_str(),
              o.run.dtype.c_str(), (pipe ? "pipelined " + shape : shape).c_str(), ms,
              times.tokens / (ms / 1e3), peak_rss_mib());
  if (pipe && !stats.bytes_forward_per_mb.empty())
    std::printf(" %14lld %14lld", static_cast<long long>(stats.bytes_forward_per_mb[0]),
                static_cast<long long>(stats.bytes_backward_per_mb[0]));
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int bench_trainer(BenchOptions o) {
  o.run.steps = o.warmup_steps + o.measured_steps;
  const bool pipe = o.what == "pipelined";
  std::string shape = "reference";
  if (pipe)
    shape = "pp" + std::to_string(o.run.pp) + "xvp" + std::to_string(o.run.vp) + " cache " +
            o.run.cache;
  std::fprintf(stderr, "bench %s: %s %s, %d x %d x %lld tokens, %d warm-up + %d measured "
               "steps, %d thread(s)\n", shape.c_str(), o.run.flavor.c_str(),
               o.run.dtype.c_str(), o.run.microbatches, o.run.rows,
               static_cast<long long>(o.run.seq_len), o.warmup_steps, o.measured_steps,
               o.run.threads);
  if (pipe && o.run.nproc > 0)
    shape += ", " + std::to_string(o.run.nproc) + " processes (" +
             (o.run.backend.empty() ? std::string("gloo") : o.run.backend) + ")";
  StepTimes times;
  // Printed by the process that ran rank 0 (a worker under --nproc).
  run_trainer(o.what, o.run, times, [&](const pipelined::PipelineStats& stats) {
    print_bench(o, pipe, shape, times, stats);
  });
  return 0;
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
  auto precision = kernels::parse_precision(o.run.dtype);
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
  std::printf("%-12s %-6s %-10s %6s %12s\n", "flavor", "dtype", "kda", "T", "ms fwd+bwd");
  for (auto impl : {kernels::KdaImpl::Chunked, kernels::KdaImpl::Recurrent}) {
    const auto d = kernels::kda_dims(cfg, impl);
    std::vector<double> t;
    for (int i = 0; i < o.warmup_steps + o.measured_steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      kernels::kda(x, w, d).sum().backward();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::vector<double> measured(t.begin() + o.warmup_steps, t.end());
    std::printf("%-12s %-6s %-10s %6lld %12.2f\n", cfg.name.c_str(), o.run.dtype.c_str(),
                impl == kernels::KdaImpl::Chunked ? "chunked" : "recurrent",
                static_cast<long long>(o.run.seq_len), median(measured) * 1e3);
  }
  return 0;
}

// The GEMM rate the kernels can reach on this machine, thread count and dtype: at::mm of two
// normal n x n matrices, the median of the measured products after the warm-up ones.
int bench_gemm(const BenchOptions& o) {
  const auto dt = kernels::compute_dtype(kernels::parse_precision(o.run.dtype));
  kernels::pin_threads(o.run.threads);
  auto gen = at::detail::createCPUGenerator(o.run.seed);
  std::printf("%-6s %8s %6s %12s %10s\n", "dtype", "threads", "n", "ms/product", "GFLOP/s");
  for (int64_t n : {256, 512, 1024, 2048}) {
    auto a = at::empty({n, n}).normal_(0, 1, gen).to(dt);
    auto b = at::empty({n, n}).normal_(0, 1, gen).to(dt);
    std::vector<double> t;
    for (int i = 0; i < o.warmup_steps + o.measured_steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      auto c = at::mm(a, b);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double s = median(std::vector<double>(t.begin() + o.warmup_steps, t.end()));
    std::printf("%-6s %8d %6lld %12.3f %10.2f\n", o.run.dtype.c_str(), o.run.threads,
                static_cast<long long>(n), s * 1e3, 2.0 * double(n) * n * n / s / 1e9);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace parity::harness
