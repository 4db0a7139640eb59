// Seed checkpoints from a state dict (`parity init --from PATH`): a torch.save or safetensors
// file, or a DCP checkpoint directory, holding a model's parameters under torchtitan's names
// (kernels/params.h), checked key by key against the flavor and converted to parity's fp32
// master parameters. Keys may carry the `model.` prefix of a whole training state.
#pragma once

#include <string>
#include <vector>

#include "kernels/config.h"
#include "kernels/params.h"

namespace parity::dumps {

struct StateDictImport {
  kernels::NamedTensors params;        // fp32 CPU tensors in the model's FQN order
  // The persistent buffers found in the file (each MoE layer's expert_bias_E), fp32, in
  // buffer_specs order; those absent (a state dict saved without them) are listed, and start
  // at zero.
  kernels::NamedTensors buffers;
  std::vector<std::string> absent_buffers;
  std::vector<std::string> skipped_buffers;  // non-persistent buffers found in the file
  std::vector<std::string> vision;     // vision_encoder.* tensors, skipped (not modelled)
  std::vector<std::string> rounded;    // fp64 parameters rounded to fp32
  // Entries of a whole training state beside its `model.` ones (optimizer, train state),
  // skipped.
  std::vector<std::string> outside_model;
};

// The prefix of a model's keys in a checkpoint of a whole training state (torchtitan before it
// saved model keys unprefixed).
inline constexpr const char* kModelPrefix = "model.";

// Every parameter of `cfg` must be in the file with its shape and a float dtype (bf16, fp16 and
// fp32 convert exactly; fp64 rounds to nearest); so must each persistent buffer the file holds,
// and its values must be finite. A missing, extra or mis-shaped key throws
// CheckpointError listing the first few of each kind and the remedy.
StateDictImport params_from_state_dict(const std::string& path, const kernels::ModelConfig& cfg);

}  // namespace parity::dumps
