#include "harness/version.h"

#include <torch/version.h>

#include "kernels/host_allocator.h"
#include "parity_git_sha.h"  // generated at build time
#include "pipelined/comm.h"

namespace parity::harness {

std::string git_sha() { return PARITY_GIT_SHA; }

std::string version_text() {
  std::string transports = "in-process";
  for (const auto& b : pipelined::comm_backends()) transports += ", c10d " + b;
  return std::string("parity ") + PARITY_VERSION + " (git " + PARITY_GIT_SHA + "), libtorch " +
         TORCH_VERSION + ", trainers: reference, pipelined; transports: " + transports +
         "; malloc " + kernels::malloc_text();
}

}  // namespace parity::harness
