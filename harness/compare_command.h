// `parity compare A B`, the command: reading the runs, the verdict and the exit code, and the
// outputs (text, JSON, JUnit, Markdown) on top of compare/'s functions. Every tensor of two
// runs, side by side (docs/design.md section 6), with the
// guards against vacuous agreement (all-zero gradients, a flat loss, both runs dead); with a
// truth dump, each run's error against the fp64 truth in its own ulps; with a layout, every
// differing gradient judged against the predicted set (compare/predicted.h).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "dumps/h5.h"

#include "spec/bad_input.h"

namespace parity::harness {

// Options of `parity compare` that cannot be used together: the CLI maps it to exit 2.
class CompareError : public spec::BadInput {
 public:
  using spec::BadInput::BadInput;
};

struct CompareOptions {
  std::string a, b;       // runs: parity dumps, torch.save, safetensors or HDF5 files, or
                          // directories of them (dumps/external.h)
  bool json = false;      // machine-readable output
  std::string tol = "bitwise";      // when two tensors agree: bitwise | ulp:K | torch
  std::optional<uint64_t> max_ulp;  // --max-ulp K, the same as --tol ulp:K
  std::optional<h5::DType> ulp_dtype;  // count ulps in this float dtype (none: the compute dtype)
  std::string map;        // a name map file (--map), or ""
  std::string layout;     // --layout spec for the predicted set, or ""
  int64_t step = 0;       // the parity dump's step a single-step file stands for (0: its only)
  bool all_rows = false;  // list the bitwise-equal tensors too
  int threads = 2;
  bool allow_nonfinite = false;  // NaN/Inf that match bit for bit count as agreeing
  std::string truth;  // an fp64 dump of the same cell, or ""
  std::string junit;     // JUnit XML: one testcase per step and tensor group, or ""
  std::string markdown;  // a Markdown summary (for a PR comment), or ""
};

// Prints the table (or JSON) on stdout. Returns 0 when every tensor agrees under the
// tolerance, no guard against vacuous agreement fires and (with --layout) no differing
// gradient lies outside the predicted set; 1 otherwise. Throws dumps::DumpError for an
// unreadable or incomparable run, CompareError or LayoutError for unusable options.
int compare_command(const CompareOptions& o);

}  // namespace parity::harness
