#include "spec/numbers.h"

#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace parity::spec {

namespace {

// The whole text as a decimal integer; false for anything else (a sign alone, spaces, hex,
// a fraction, an exponent, overflow).
bool parse_integer(const std::string& s, long long& v) {
  if (s.empty()) return false;
  const size_t digits_from = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (digits_from == s.size()) return false;
  for (size_t i = digits_from; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  errno = 0;
  char* end = nullptr;
  v = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && end == s.c_str() + s.size();
}

std::string range_text(int64_t lo, int64_t hi) {
  return "give an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
}

std::string shown(const std::string& s) { return s.empty() ? "an empty value" : "'" + s + "'"; }

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

}  // namespace

std::string integer_problem(const std::string& s, int64_t lo, int64_t hi) {
  long long v = 0;
  if (!parse_integer(s, v)) {
    // Digits that do not fit are out of range, not "not a number".
    bool all_digits = !s.empty();
    for (size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0; i < s.size(); ++i)
      all_digits = all_digits && s[i] >= '0' && s[i] <= '9';
    if (all_digits && s.size() > 1) return s + " is out of range; " + range_text(lo, hi);
    return shown(s) + " is not an integer; " + range_text(lo, hi);
  }
  if (v < lo || v > hi) return s + " is out of range; " + range_text(lo, hi);
  return {};
}

std::string unsigned_problem(const std::string& s) {
  bool digits = !s.empty();
  for (char c : s) digits = digits && c >= '0' && c <= '9';
  const std::string most = std::to_string(std::numeric_limits<uint64_t>::max());
  if (!digits) return shown(s) + " is not an unsigned integer; give one from 0 to " + most;
  errno = 0;
  char* end = nullptr;
  std::strtoull(s.c_str(), &end, 10);
  if (errno != 0) return s + " is out of range; give an integer from 0 to " + most;
  return {};
}

std::string real_problem(const std::string& s, double lo, double hi, bool lo_open) {
  const std::string range = std::string("give a finite number ") + (lo_open ? "above " : "from ") +
                            num(lo) + (lo_open ? " and up to " : " to ") + num(hi);
  errno = 0;
  char* end = nullptr;
  const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || std::isspace(static_cast<unsigned char>(s[0])))
    return shown(s) + " is not a number; " + range;
  if (!std::isfinite(v)) return s + " is not finite; " + range;
  if ((lo_open ? v <= lo : v < lo) || v > hi) return s + " is out of range; " + range;
  return {};
}

std::string path_problem(const std::string& s) {
  if (s.empty()) return "the path is empty (an unset shell variable?); give a file or directory";
  return {};
}

std::string shortest_text(double v) {
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace parity::spec
