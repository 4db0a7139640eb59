#include "spec/limits.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "spec/numbers.h"

namespace parity::spec {

int max_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return 4 * static_cast<int>(cores > 0 ? cores : 1);
}

int64_t max_tensor_bytes() {
  constexpr int64_t kDefault = int64_t{1} << 31;
  const char* env = std::getenv("PARITY_MAX_TENSOR_BYTES");
  if (env && integer_problem(env, 1, INT64_MAX).empty()) return std::stoll(env);
  return kDefault;
}

}  // namespace parity::spec
