// Judging a matrix run's cells: each against its reference at step 1 (every scalar and
// tensor with compare, the EXACT / ORDER-ONLY / WRONG verdicts with localise when both record
// a ledger), then each cell's gate (reports/matrix.h, Gate), which holds a cell with a twin
// bitwise against the twin instead.
#pragma once

#include <filesystem>
#include <string>

#include "reports/results.h"

namespace parity::matrix {

// Fills every non-reference cell's step1, verdicts and gate from the dumps under
// cells_dir/<name>/dump. A cell or reference that did not finish gets the reason instead;
// its gate fails.
void judge_cells(reports::MatrixResult& r, const std::filesystem::path& cells_dir);

// The same for one cell, its reference and twin found in `r`. The runner judges each cell as
// soon as it, its reference and its twin have ended.
void judge_cell(reports::CellResult& c, const reports::MatrixResult& r,
                const std::filesystem::path& cells_dir);

// A cell whose judging could not finish (`why`): no comparison, no verdicts, and its gate, if it
// has one, fails saying so.
void judging_failed(reports::CellResult& c, const reports::MatrixResult& r, const std::string& why);

}  // namespace parity::matrix
