// Training logs as users have them, read into every step's loss and grad norm: what
// `parity drift` builds the seed's drift table from. Torch-free.
//
// The kind of a file comes from its content:
//   torchtitan  its console or log file: the metrics line "step: N  loss: L  grad_norm: G ..."
//               (colour codes and the "[rank0]:[titan] <time> - root - INFO - " prefix allowed;
//               "validate step:" lines are not training steps);
//   megatron    Megatron-LM's console log: "iteration N/ M | ... | lm loss: L | ... |
//               grad norm: G |";
//   golden      Megatron-Core's golden values JSON: {"lm loss": {"start_step", "end_step",
//               "step_interval", "values": {"1": L, ...}}}, values keyed by step, or the older
//               list form where values[i] is iteration start_step + i * step_interval + 1; a
//               "grad-norm" entry, when there is one, gives the grad norm;
//   loss-file   torchtitan's loss_compare files: "STEP LOSS [GRAD_NORM]" per line;
//   parity      parity's own metrics JSONL (`parity train --metrics`), exact to the bit.
// A step logged twice with the same values is one step; with different values the file holds
// two runs, which is refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/bad_input.h"

namespace parity::dumps {

// A training log that cannot be read as one: names the file (and line) and the remedy; the
// CLI maps it to exit 2.
class LogError : public spec::BadInput {
 public:
  using spec::BadInput::BadInput;
};

struct LoggedStep {
  int64_t step = 0;
  double loss = 0;
  double grad_norm = 0;  // NaN when the log has none
  int64_t line = 0;      // where it was read (1-based; 0 for a JSON document)
};

struct TrainingLog {
  std::string path;
  std::string format;  // "torchtitan", "megatron", "golden", "loss-file", "parity"
  bool has_grad_norm = false;
  std::vector<LoggedStep> steps;  // ascending, one per step
};

// Throws LogError (exit 2) naming the file, the line and the remedy: unreadable, no steps,
// lines of two formats, a malformed line of a strict format, a step logged twice differently.
TrainingLog read_training_log(const std::string& path);

}  // namespace parity::dumps
