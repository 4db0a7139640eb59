// Precision modes (DESIGN.md section 3).
//
//   fp32: master parameters fp32, compute fp32.
//   bf16: master parameters fp32; bf16 compute copies made once per step; the numerically
//         delicate parts (RMSNorm statistics, AttnRes internals, the KDA recurrence, the MoE
//         router, cross-entropy) run in fp32 and cast back to the stream dtype.
//   fp64: everything fp64 (the truth run).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace parity::kernels {

enum class Precision { FP32, BF16, FP64 };

// "fp32" | "bf16" | "fp64"; throws ConfigError otherwise.
Precision parse_precision(const std::string& s);
const char* to_string(Precision p);

at::ScalarType compute_dtype(Precision p);  // the stream dtype
at::ScalarType master_dtype(Precision p);   // fp32, or fp64 in fp64 mode

// The dtype the "fp32 internals" of an op run in for a stream of dtype `t`:
// bf16 and fp32 -> fp32, fp64 -> fp64.
at::ScalarType accum_dtype(at::ScalarType t);

}  // namespace parity::kernels
