// Pinning threads and deterministic algorithms (docs/design.md section 3, determinism).
#pragma once

namespace parity::kernels {

// Sets torch's intra-op threads and, when the process uses OpenBLAS, OpenBLAS's own pool to
// n, so the thread count a run records is the one every kernel used.
void pin_threads(int n);

// Deterministic algorithms on (an op without a deterministic CUDA kernel raises instead of
// silently varying) and CUBLAS_WORKSPACE_CONFIG=:4096:8 unless the user set it. Call before
// the first CUDA op of the process.
void use_deterministic_cuda();

}  // namespace parity::kernels
