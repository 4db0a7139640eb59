// Seed checkpoints: a model's state dict, by FQN, in HDF5: the fp32 master parameters and the
// persistent buffers (each MoE layer's expert bias).
//
// Schema (version 2):
//   /               attrs: schema = "parity-checkpoint", schema_version = 2, flavor, seed,
//                          git_sha, param_count, buffer_count
//   /params/<fqn>   float32 dataset of the parameter's shape, one per parameter, FQN order
//   /buffers/<fqn>  float32 dataset, one per persistent buffer (kernels::buffer_specs)
// Version 1 (no /buffers) is still read; its buffers start at zero, as they did.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

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

constexpr int64_t kCheckpointSchemaVersion = 2;

// The buffers a checkpoint (and torchtitan's state dict) holds: the persistent ones of
// kernels::buffer_specs, in its order (each MoE layer's expert_bias_E).
std::vector<kernels::BufferSpec> persistent_buffers(const kernels::ModelConfig& cfg);

// Writes atomically (temp file + rename). params: fp32 CPU tensors in FQN order; buffers: the
// persistent buffers by FQN, any missing written as zeros.
void write_checkpoint(const std::string& path, const kernels::ModelConfig& cfg, uint64_t seed,
                      const kernels::NamedTensors& params, const kernels::NamedTensors& buffers,
                      const std::string& git_sha);

struct Checkpoint {
  std::string flavor;
  uint64_t seed = 0;
  kernels::NamedTensors params;   // fp32 CPU tensors in the model's FQN order
  kernels::NamedTensors buffers;  // the persistent buffers (fp32), in buffer_specs order
};

// Reads and validates against the model: every FQN present with its shape, finite, nothing
// extra.
//
// Each call is counted (checkpoint_reads), and traced on stderr as
//   parity: trace: checkpoint read 'PATH' (pid N)
// when PARITY_TRACE=checkpoint-reads is set: a run reads its checkpoint once per process.
Checkpoint read_checkpoint(const std::string& path, const kernels::ModelConfig& cfg);
int64_t checkpoint_reads();

}  // namespace parity::dumps
