#include "cli/version.h"

#include <torch/version.h>

#include "parity_git_sha.h"  // generated at build time

namespace parity::cli {

std::string git_sha() { return PARITY_GIT_SHA; }

std::string version_text() {
  return std::string("parity ") + PARITY_VERSION + " (git " + PARITY_GIT_SHA + "), libtorch " +
         TORCH_VERSION + ", trainers: reference, pipelined; executors: in-process";
}

}  // namespace parity::cli
