// Checks on one option's text, run by CLI11 before it converts the value: every number is
// read strictly (the whole text, no overflow, no wrap of a negative into an unsigned), every
// real is finite, every path given is non-empty. A failure reads
//   parity: --steps: 0 is out of range; give an integer from 1 to 1000000 (see parity --help)
// which is CLI11's "<option>: <message>" with our message. Cross-option checks (a dump step
// past the last step, --split without a pipeline) are the harness's (harness/validate.h).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace parity::cli {

// An integer from lo to hi, written in decimal (a leading '-' only where lo < 0).
CLI::Validator integer_in(int64_t lo, int64_t hi);

// An unsigned integer from 0 to UINT64_MAX (a seed): "-1" is refused, not wrapped.
CLI::Validator unsigned_integer();

// A finite real x with lo < x <= hi (lo_open) or lo <= x <= hi.
CLI::Validator real_in(double lo, double hi, bool lo_open);

// A non-empty path ("" is what an unset shell variable gives).
CLI::Validator non_empty_path();

// Intra-op or comparison threads: 1 to spec::max_threads() (4 x this machine's cores).
CLI::Validator threads();

}  // namespace parity::cli
