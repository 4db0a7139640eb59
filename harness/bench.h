// `parity bench`: throughput figures, measured outside the test suite.
//
//   reference | pipelined   trainer steps: tokens/s, ms/step (median of the measured steps
//                           after warm-up), peak RSS; pipelined adds transport bytes per
//                           micro-batch. With breakdown: the time per op family
//                           (kernels/op_family.h), the step's FLOPs counted from the shapes,
//                           the achieved GFLOP/s and the GEMM peak measured in the same run
//   step                    the reference trainer's step (as reference)
//   ratio                   pipelined / reference step time, two trainers stepped in turns
//   ac-ratio                --ac layer / none step time, the same way
//   threads-ratio           one-thread / --threads N step time, the same way
//   kda                     one KDA mixer layer and its core alone, forward + backward,
//                           per form (fused, chunked, recurrent)
//   compare                 two dumps compared tensor by tensor: GB/s of tensor data per side
//   gemm                    square matrix products (n = 256, 512, 1024, 2048) in the compute
//                           dtype, through project() as every linear layer runs them:
//                           GFLOP/s (2 n^3 per product), the practical peak of the kernels
//   readers                 the file readers on the largest inputs users bring: a torchtitan
//                           log of --log-steps steps read, and drift over two; a safetensors
//                           file of --entries tensors read, and two compared
#pragma once

#include <cstdint>
#include <string>

#include "harness/run_options.h"

namespace parity::harness {

struct BenchOptions {
  RunOptions run;
  spec::BenchTarget what = spec::BenchTarget::Reference;
  int warmup_steps = 2;
  int measured_steps = 5;
  std::string a, b;  // what = compare: the two dumps
  bool breakdown = false;  // what = reference, step or pipelined (in-process)
  int64_t log_steps = 2'000'000;  // what = readers: steps per log
  int64_t entries = 200'000;      // what = readers: tensors per safetensors file
};

// Each prints its table on stdout (progress on stderr) and returns the exit code.
int bench_trainer(BenchOptions o);  // what = reference, step or pipelined
// Paired ratios: two trainers built in this process and stepped in turns (step s of one, then
// of the other, the order alternating each step), each step timed on its own, so that the
// machine's drift weighs on both alike: one row per measured step, then the median of the
// per-step figures.
// what = ratio: the in-process pipelined step / the reference step.
int bench_ratio(BenchOptions o);
// what = ac-ratio: the reference step with --ac layer / with --ac none (the --ac given is not
// read).
int bench_ac_ratio(BenchOptions o);
// what = threads-ratio: the reference step's speedup at --threads N (N >= 2) over one thread:
// the one-thread step's time / the N-thread one's.
int bench_threads_ratio(BenchOptions o);
int bench_kda(const BenchOptions& o);
int bench_compare(const BenchOptions& o);
int bench_gemm(const BenchOptions& o);
int bench_readers(const BenchOptions& o);  // harness/bench_readers.cpp

}  // namespace parity::harness
