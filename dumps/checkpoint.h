// Seed checkpoints: the fp32 master parameters of a model, by FQN, in HDF5.
//
// Schema (version 1):
//   /               attrs: schema = "parity-checkpoint", schema_version = 1, flavor, seed,
//                          git_sha, param_count
//   /params/<fqn>   float32 dataset of the parameter's shape, one per parameter, FQN order
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/config.h"
#include "kernels/params.h"

#include "spec/bad_input.h"

namespace parity::dumps {

// A checkpoint that cannot be used: unreadable, truncated, another schema or another model.
// The message names the file and says how to regenerate it. The CLI maps it to exit 2.
class CheckpointError : public spec::BadInput {
 public:
  using spec::BadInput::BadInput;
};

constexpr int64_t kCheckpointSchemaVersion = 1;

// Writes atomically (temp file + rename). params: fp32 CPU tensors in FQN order.
void write_checkpoint(const std::string& path, const kernels::ModelConfig& cfg, uint64_t seed,
                      const kernels::NamedTensors& params, const std::string& git_sha);

struct Checkpoint {
  std::string flavor;
  uint64_t seed = 0;
  kernels::NamedTensors params;  // fp32 CPU tensors in the model's FQN order
};

// Reads and validates against the model: every FQN present with its shape, nothing extra.
//
// Each call is counted (checkpoint_reads), and traced on stderr as
//   parity: trace: checkpoint read 'PATH' (pid N)
// when PARITY_TRACE=checkpoint-reads is set: a run reads its checkpoint once per process.
Checkpoint read_checkpoint(const std::string& path, const kernels::ModelConfig& cfg);
int64_t checkpoint_reads();

}  // namespace parity::dumps
