// `parity compare A B`: every tensor of two dumps, side by side (DESIGN.md section 6), with the
// guards against vacuous agreement (all-zero gradients, a flat loss, both runs dead) and, with
// a truth dump, each run's error against the fp64 truth in its own ulps.
#pragma once

#include <cstdint>
#include <string>

namespace parity::compare {

struct CompareOptions {
  std::string a, b;      // dump directories or files
  bool json = false;     // machine-readable output
  uint64_t max_ulp = 0;  // pass when every difference is within this many ulps
  bool all_rows = false;  // list the bitwise-equal tensors too
  int threads = 2;
  std::string truth;  // an fp64 dump of the same cell, or ""
};

// Prints the table (or JSON) on stdout. Returns 0 when every tensor is bitwise equal (or within
// max_ulp) and no guard fires, 1 otherwise; throws dumps::DumpError for an unreadable or
// incomparable dump.
int compare_command(const CompareOptions& o);

}  // namespace parity::compare
