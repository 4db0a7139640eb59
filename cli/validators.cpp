#include "cli/validators.h"

#include "spec/limits.h"
#include "spec/numbers.h"

namespace parity::cli {

// Each check is the specification's (spec/numbers.h), so that a flag and the same field read
// from a command line by spec::parse_args refuse a value in the same words.

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return CLI::Validator([lo, hi](std::string& s) { return spec::integer_problem(s, lo, hi); },
                        "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                        "integer_in");
}

CLI::Validator unsigned_integer() {
  return CLI::Validator([](std::string& s) { return spec::unsigned_problem(s); }, "UINT",
                        "unsigned_integer");
}

CLI::Validator real_in(double lo, double hi, bool lo_open) {
  return CLI::Validator(
      [lo, hi, lo_open](std::string& s) { return spec::real_problem(s, lo, hi, lo_open); },
      "NUMBER", "real_in");
}

CLI::Validator non_empty_path() {
  return CLI::Validator([](std::string& s) { return spec::path_problem(s); }, "PATH",
                        "non_empty_path");
}

CLI::Validator threads() {
  return integer_in(1, spec::max_threads());
}

}  // namespace parity::cli
