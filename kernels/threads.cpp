#include "kernels/threads.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <cstdlib>

namespace parity::kernels {

void pin_threads(int n) {
  at::set_num_threads(n);
  // OpenBLAS keeps a thread pool of its own, sized from the environment at load time.
  using SetThreads = void (*)(int);
  if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    fn(n);
}

void use_deterministic_cuda() {
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

}  // namespace parity::kernels
