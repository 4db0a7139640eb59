// `parity localise A B`, the command: the verdicts of two --ledger dumps (compare/localise.h)
// as JSON, or as the text table (counts, WRONG blocks and findings, one row per tensor that is
// not EXACT, the first divergence and the verdict line), and the exit code.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "compare/localise.h"

namespace parity::harness {

struct LocaliseJob {
  std::string a, b;       // the two dumps (directories or files made with --ledger)
  bool json = false;      // machine-readable output
  bool all_rows = false;  // list the EXACT tensors too
  int threads = 2;
};

// Prints the verdicts on stdout; 0 when nothing is WRONG, 1 otherwise.
int localise_command(const LocaliseJob& job);

nlohmann::json to_json(const compare::LocaliseReport& r);

// On stdout. all_rows: the EXACT tensors too, and the updated parameters that are ORDER-ONLY
// only through the norm and the update.
void print_text(const compare::LocaliseReport& r, bool all_rows);

}  // namespace parity::harness
