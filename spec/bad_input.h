// The one exception for bad input: a flag, a key of a matrix file, or a file a user pointed
// parity at that cannot be used as given. `parity` and every worker of a multi-process run
// print its first line and exit 2. Libraries may derive their own kinds from it (to name their
// room in a catch), but never throw bad input as anything else. Torch-free.
#pragma once

#include <stdexcept>
#include <string>

namespace parity::spec {

class BadInput : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The exit status for bad input, the same for `parity` and for each worker it starts.
constexpr int kBadInputExit = 2;

// The first line of an error message: a library's message can carry a traceback after it.
inline std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace parity::spec
