// The vector kernel choice (vector_kernels.h).
#include "kernels/vector_kernels.h"

#include <dlfcn.h>

#include <cstdlib>

#include "kernels/gemm.h"

namespace parity::kernels {
namespace {

constexpr const char* kCoreVar = "OPENBLAS_CORETYPE";
constexpr const char* kCapabilityVar = "ATEN_CPU_CAPABILITY";

// What OpenBLAS says it runs; "" without OpenBLAS (another BLAS, or none loaded).
std::string openblas_core() {
  using CoreName = char* (*)();
  auto fn = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* name = fn != nullptr ? fn() : nullptr;
  return name != nullptr ? name : "";
}

bool cpu_has_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  // libgcc's answers include the OS check (XCR0 saves the opmask and ZMM state).
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

bool is_set(const char* var) { return std::getenv(var) != nullptr; }

}  // namespace

VectorKernelChoice choose_vector_kernels(const std::string& blas_core, bool avx512,
                                         bool user_set_coretype, bool user_set_capability) {
  VectorKernelChoice c;
  if (!avx512) return c;
  if (!user_set_coretype && (blas_core == "Haswell" || blas_core == "Zen"))
    c.openblas_coretype = "SkylakeX";
  if (!user_set_capability) c.aten_capability = "avx512";
  return c;
}

bool apply_vector_kernels(bool blas) {
  const auto c = choose_vector_kernels(openblas_core(), cpu_has_avx512(), is_set(kCoreVar),
                                       is_set(kCapabilityVar));
  if (!c.aten_capability.empty()) setenv(kCapabilityVar, c.aten_capability.c_str(), 0);
  if (!blas || c.openblas_coretype.empty()) return false;
  setenv(kCoreVar, c.openblas_coretype.c_str(), 0);
  return true;
}

void forget_openblas_choice() { unsetenv(kCoreVar); }

std::string vector_kernels_text() {
  const std::string core = openblas_core();
  const char* cap = std::getenv(kCapabilityVar);
  // Unset, ATen picks by itself ("default" is its name for the scalar kernels).
  return "fp32 GEMM " + gemm::chosen_name() + ", bf16 GEMM " + gemm::bf16_chosen_name() + ", " +
         (core.empty() ? std::string("BLAS not OpenBLAS") : "OpenBLAS " + core) + ", ATen " +
         (cap != nullptr ? cap : "its own pick");
}

}  // namespace parity::kernels
