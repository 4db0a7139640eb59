// The harness's error for bad input from the user: the CLI prints it as one line and exits 2.
#pragma once

#include <stdexcept>

namespace parity::harness {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace parity::harness
