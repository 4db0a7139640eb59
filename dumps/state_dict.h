// Seed checkpoints from a state dict (`parity init --from FILE`): a torch.save or safetensors
// file holding a model's parameters under torchtitan's names (kernels/params.h), checked key by
// key against the flavor and converted to parity's fp32 master parameters.
#pragma once

#include <string>
#include <vector>

#include "kernels/config.h"
#include "kernels/params.h"

namespace parity::dumps {

struct StateDictImport {
  kernels::NamedTensors params;        // fp32 CPU tensors in the model's FQN order
  std::vector<std::string> buffers;    // the model's buffers found in the file, skipped
  std::vector<std::string> vision;     // vision_encoder.* tensors, skipped (not modelled)
  std::vector<std::string> rounded;    // fp64 parameters rounded to fp32
};

// Every parameter of `cfg` must be in the file with its shape and a float dtype (bf16, fp16 and
// fp32 convert exactly; fp64 rounds to nearest). A missing, extra or mis-shaped key throws
// CheckpointError listing the first few of each kind and the remedy.
StateDictImport params_from_state_dict(const std::string& path, const kernels::ModelConfig& cfg);

}  // namespace parity::dumps
