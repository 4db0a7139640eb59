// The harness's error for bad input from the user: the CLI prints it as one line and exits 2.
#pragma once

#include <stdexcept>

#include "spec/bad_input.h"

namespace parity::harness {

class UsageError : public spec::BadInput {
 public:
  using spec::BadInput::BadInput;
};

}  // namespace parity::harness
