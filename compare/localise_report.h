// `parity localise A B`'s output: a LocaliseReport (compare/localise.h) as JSON, or as the
// text table (counts, WRONG blocks and findings, one row per tensor that is not EXACT, the
// first divergence and the verdict line).
#pragma once

#include <nlohmann/json.hpp>

#include "compare/localise.h"

namespace parity::compare {

nlohmann::json to_json(const LocaliseReport& r);

// On stdout. all_rows: the EXACT tensors too, and the updated parameters that are ORDER-ONLY
// only through the norm and the update.
void print_text(const LocaliseReport& r, bool all_rows);

}  // namespace parity::compare
