#include "kernels/threads.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <vector>

namespace parity::kernels {

void pin_threads(int n) {
  at::set_num_threads(n);
  // OpenBLAS keeps a thread pool of its own, sized from the environment at load time. It runs
  // on one thread whatever n is: its threads spin between calls and take the cores from the
  // intra-op threads (debugmodel at 2 threads, measured: MLA, whose attention products are
  // OpenBLAS's, 482 ms a step with a pool of 2, 118 with 1), and one thread makes its products
  // independent of n.
  using SetThreads = void (*)(int);
  if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    fn(1);
}

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body) {
#ifndef _OPENMP
#error "kernels/threads.cpp must be compiled with OpenMP, or parallel_for runs on one thread"
#endif
  at::parallel_for(begin, end, grain, body);
}

int64_t parallel_threads() { return at::in_parallel_region() ? 1 : at::get_num_threads(); }

void run_lanes(int n, const std::function<void(int)>& body) {
  if (n <= 0) return;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  const auto lane = [&](int i) {
    try {
      body(i);
    } catch (...) {
      errors[static_cast<size_t>(i)] = std::current_exception();
    }
  };
  const int threads = static_cast<int>(std::min<int64_t>(parallel_threads(), n));
  if (threads <= 1) {
    for (int i = 0; i < n; ++i) lane(i);
  } else {
    // The caller's thread-local state (grad mode among it) in every lane, as on the caller.
    const at::ThreadLocalState state;
    // Inside the region ATen sees a parallel region: its loops and parallel_for run inline.
    // The runtime may give fewer threads than asked; each runs every threads-th lane.
#pragma omp parallel num_threads(threads)
    {
      const at::ThreadLocalStateGuard guard(state);
      for (int i = omp_get_thread_num(); i < n; i += omp_get_num_threads()) lane(i);
    }
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void use_deterministic_cuda() {
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

}  // namespace parity::kernels
