#include "spec/limits.h"

#include <thread>

namespace parity::spec {

int max_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return 4 * static_cast<int>(cores > 0 ? cores : 1);
}

}  // namespace parity::spec
