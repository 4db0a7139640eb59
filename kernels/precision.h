// Precision modes (docs/design.md section 3).
//
//   fp32:        master parameters fp32, compute fp32.
//   bf16:        torchtitan's training.dtype = "bfloat16": parameters, gradients and AdamW
//                states in bf16, no fp32 copy (the seed's tables).
//   bf16-master: fp32 master parameters; bf16 compute copies made once per step (what FSDP
//                mixed precision does).
//   fp64:        everything fp64 (the truth run).
// In both bf16 modes the numerically delicate parts (RMSNorm statistics, AttnRes internals,
// the KDA recurrence and gate, the router, SiTU-GLU, the loss) run in fp32 and cast back to
// the stream dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "spec/options.h"

namespace parity::kernels {

// The modes and their names: spec/options.h (spec::precisions() parses and prints them).
using spec::Precision;
using spec::to_string;

at::ScalarType compute_dtype(Precision p);  // the stream dtype
at::ScalarType master_dtype(Precision p);   // the parameters' own dtype
bool is_bf16(Precision p);                  // bf16 compute (either bf16 mode)

// The dtype the "fp32 internals" of an op run in for a stream of dtype `t`:
// bf16 and fp32 -> fp32, fp64 -> fp64.
at::ScalarType accum_dtype(at::ScalarType t);

}  // namespace parity::kernels
