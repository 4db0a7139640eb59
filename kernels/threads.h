// Pinning threads, splitting loops between them, and deterministic algorithms (docs/design.md
// section 3, determinism).
#pragma once

#include <cstdint>
#include <functional>

namespace parity::kernels {

// Sets torch's intra-op threads to n, the thread count a run records, and OpenBLAS's own pool,
// when the process uses OpenBLAS, to 1 (kernels/threads.cpp says why).
void pin_threads(int n);

// Runs body(b0, b1) over consecutive ranges that cover [begin, end), split between the
// intra-op threads pinned by pin_threads, at least `grain` iterations to a range (all on the
// calling thread when the range is no longer than grain, or inside another parallel loop).
// parity's loop kernels call this, not at::parallel_for: ATen's is a header template whose
// OpenMP pragma only splits in a translation unit compiled with OpenMP, and only this file
// is (kernels/CMakeLists.txt). Each kernel gives every output element to one range, so the
// split changes no bits.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body);

// The threads a parallel_for called here would split between: the intra-op threads, or 1
// inside a parallel loop.
int64_t parallel_threads();

// Runs body(0) .. body(n - 1) at the same time, each on one of the intra-op threads (the
// caller runs body(0)), and returns when all have; inside a body every parallel_for, every
// ATen op and every product runs on that body's thread alone. An exception a body throws is
// rethrown here once all have finished (the lowest lane's first). With one thread, or n = 1,
// the bodies run one after another on the caller.
void run_lanes(int n, const std::function<void(int)>& body);

// Deterministic algorithms on (an op without a deterministic CUDA kernel raises instead of
// silently varying) and CUBLAS_WORKSPACE_CONFIG=:4096:8 unless the user set it. Call before
// the first CUDA op of the process.
void use_deterministic_cuda();

}  // namespace parity::kernels
