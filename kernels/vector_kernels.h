// The vector kernels parity's two numeric libraries run, chosen once per process before either
// starts.
//
// The Debian 12 OpenBLAS (0.3.21) files an AMD CPU with AVX-512 (Zen 4, Zen 5) under Zen and
// runs its AVX2 GEMM kernels (the Haswell ones) on it: half of what the core can do. libtorch
// 1.13 keeps its AVX2 element-wise kernels there too. On a CPU whose AVX-512 (F, CD, BW, DQ and
// VL, with the OS saving the registers) is usable, parity asks both libraries for their AVX-512
// kernels: OPENBLAS_CORETYPE=SkylakeX when OpenBLAS picked an AVX2 core (Haswell or Zen), and
// ATEN_CPU_CAPABILITY=avx512. A value the user set is left alone, and so is every other CPU.
//
// Results depend on these kernels (a GEMM's sums are blocked by its kernel's width), so every
// process of a run must choose alike: the choice depends only on the CPU, the libraries and
// the environment, and child processes inherit the environment.
#pragma once

#include <string>

namespace parity::kernels {

// What the process found, and what it asks for ("" = leave the variable unset).
struct VectorKernelChoice {
  std::string openblas_coretype;
  std::string aten_capability;
};

// The decision alone: blas_core is what OpenBLAS reports it runs ("" when there is no
// OpenBLAS), avx512 whether the CPU and OS support AVX-512 F/CD/BW/DQ/VL, and the two flags
// whether the user set the variables already.
VectorKernelChoice choose_vector_kernels(const std::string& blas_core, bool avx512,
                                         bool user_set_coretype, bool user_set_capability);

// Applies the decision to this process's environment. ATen reads its variable on its first
// kernel, so that half takes effect here; OpenBLAS read its variable when it was loaded, so
// with blas true and a core to ask for, OPENBLAS_CORETYPE is set and the return is true: the
// caller must run the process again (exec) for it to apply, or call forget_openblas_choice.
bool apply_vector_kernels(bool blas);
// Undoes the OPENBLAS_CORETYPE of an apply_vector_kernels that returned true (after a
// failed exec), so that children run what this process runs.
void forget_openblas_choice();

// "fp32 GEMM parity avx512, bf16 GEMM parity avx512-bf16, OpenBLAS SkylakeX, ATen avx512":
// the kernels this process runs, for reports (project()'s fp32 and bf16 products,
// kernels/gemm.h; the OpenBLAS core it reports; and ATEN_CPU_CAPABILITY as set).
std::string vector_kernels_text();

}  // namespace parity::kernels
