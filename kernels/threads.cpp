#include "kernels/threads.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <cstdlib>

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

void use_deterministic_cuda() {
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

}  // namespace parity::kernels
