// `parity drift REF CELL...`: the seed's drift table from training logs (dumps/training_log.h):
// torchtitan or Megatron-LM console logs, loss_compare's loss files, Megatron-Core golden values
// or parity's metrics, in any mix of files. Rows, `identical` / signed % strings and the
// bitwise-identical-step counts are those of `parity report` (reports/drift.h).
//
// Exit codes: 0 every cell logs every step the reference does, 1 some cell lacks steps (one
// line on stderr per such cell names them; the table shows n/a), 2 bad input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/options.h"

namespace parity::harness {

struct DriftJob {
  std::string reference;
  std::vector<std::string> cells;
  std::vector<int64_t> steps;          // empty: 1, 10, 50, 100 up to the reference's last step
  std::vector<std::string> labels;     // one per log, the reference first; empty: file names
  std::vector<std::string> footnotes;  // printed under the table as [1], [2], ...
  spec::ReportFormat format = spec::ReportFormat::Txt;
  std::string out;                     // "" = standard output
  std::string junit;                   // a JUnit XML file: one testcase per cell
};

int drift_command(const DriftJob& job);

// "1-3, 7, 9-12": steps (ascending) in ranges.
std::string step_ranges(const std::vector<int64_t>& steps);

}  // namespace parity::harness
