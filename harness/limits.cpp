#include "harness/limits.h"

#include <thread>

namespace parity::harness {

int max_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return 4 * static_cast<int>(cores > 0 ? cores : 1);
}

}  // namespace parity::harness
