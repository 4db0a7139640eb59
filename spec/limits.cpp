#include "spec/limits.h"

#include <algorithm>
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

int64_t json_depth(std::string_view text, int64_t stop_after) {
  int64_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > stop_after) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

int64_t max_file_bytes() {
  constexpr int64_t kDefault = int64_t{1} << 33;
  const char* env = std::getenv("PARITY_MAX_FILE_BYTES");
  if (env && integer_problem(env, 1, INT64_MAX).empty()) return std::stoll(env);
  return kDefault;
}

int64_t max_tensor_bytes() {
  constexpr int64_t kDefault = int64_t{1} << 31;
  const char* env = std::getenv("PARITY_MAX_TENSOR_BYTES");
  if (env && integer_problem(env, 1, INT64_MAX).empty()) return std::stoll(env);
  return kDefault;
}

}  // namespace parity::spec
