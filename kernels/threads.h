// Pinning the intra-op thread count (DESIGN.md section 3, determinism).
#pragma once

namespace parity::kernels {

// Sets torch's intra-op threads and, when the process uses OpenBLAS, OpenBLAS's own pool to
// n, so the thread count a run records is the one every kernel used.
void pin_threads(int n);

}  // namespace parity::kernels
