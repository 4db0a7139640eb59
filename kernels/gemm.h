// parity's fp32 matrix product. Plain C++ (no torch): ops.cpp wraps it in project()'s
// autograd Function.
//
// Numerics. Every element of C is one fused multiply-add chain along k, in ascending order,
// starting from zero:
//   c = fma(a[i,0], b[0,j], 0);  c = fma(a[i,k], b[k,j], c)  for k = 1 .. K-1
// with each fma rounded once (IEEE fused multiply-add, round to nearest). The vector paths
// hold the chains of a tile of C in registers (a chain crossing a block of k is stored and
// reloaded, which loses nothing), and no sum crosses elements of C. So the bits do not
// depend on the vector width (AVX-512, AVX2 with FMA, or the scalar path), on how the
// columns are split between threads, or on the strides of A and B.
// Error: |c - a.b| <= K u sum_k |a_k b_k| to first order (u = 2^-24), as for any
// sequential sum of K terms.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace parity::kernels::gemm {

// The instruction sets the product can run on, best first. Each gives the same bits.
enum class Isa { Avx512, Avx2, Scalar };
const char* isa_name(Isa isa);
// The best one this CPU runs (AVX-512 F; AVX2 and FMA; else scalar).
Isa best_isa();
// Whether this CPU runs isa.
bool runs(Isa isa);

// What project() runs in fp32 on CPU in this process, read once: PARITY_GEMM=avx512, avx2 or
// scalar names an instruction set, PARITY_GEMM=aten asks for at::matmul (nullopt), unset
// is best_isa(). Throws ConfigError (kernels/config.h) for a value it cannot honour.
std::optional<Isa> chosen_isa();
// "parity avx512", or "ATen" (for reports).
std::string chosen_name();

// A read-only matrix view: element (i, j) at p[i * rs + j * cs].
struct View {
  const float* p;
  int64_t rs, cs;
};

// The column panel width of the fastest path: splitting the columns between threads at
// multiples of it keeps every panel whole.
constexpr int64_t kColumnAlign = 32;
// A multiple of every path's tile height: splitting the rows between threads at multiples of
// it keeps every tile whole.
constexpr int64_t kRowAlign = 12;

// C[:, j0:j1] = A B[:, j0:j1] for A [M, K], B [K, N] and C [M, N] row-major with row stride
// ldc (C's other columns are not touched). K may be 0 (C becomes +0). Runs on the calling
// thread with `isa`, which must run here (runs(isa)).
void multiply(Isa isa, int64_t M, int64_t N, int64_t K, View A, View B, float* C, int64_t ldc,
              int64_t j0, int64_t j1);

// ---------------------------------------------------------------------------------------
// The bf16 product, on cores with AVX-512 BF16 (VDPBF16PS). bf16 operands, fp32 result.
//
// Numerics. Every element of C is one chain of fp32 multiply-adds along k from zero, taken a
// pair of k at a time as the instruction takes them: for p = 0, 1, ..
//   c = c + a[i,2p+1] b[2p+1,j];  c = c + a[i,2p] b[2p,j]
// each step rounded once to fp32 (to nearest even; the product of two bf16 values is exact in
// fp32, so each step is a fused multiply-add), with denormal inputs read as zero and denormal
// results flushed to zero. An odd K's last pair has a zero for its k = K. A chain crossing a
// block of k is stored and reloaded (fp32, exact). No sum crosses elements of C, so the bits
// depend neither on the thread split nor on the strides. Error, for results in fp32's normal
// range: |c - a.b| <= gamma_K sum_k |a_k b_k|, as for any sequential sum of K terms.
// project() rounds C to bf16 (to nearest even) once, as the ATen product does.

// A read-only bf16 matrix view (the raw 16-bit patterns): element (i, j) at p[i * rs + j * cs].
struct View16 {
  const uint16_t* p;
  int64_t rs, cs;
};

// Whether this CPU runs the bf16 product (AVX-512 F, BW and BF16).
bool runs_bf16();
// Whether project() runs the bf16 product in this process: where it runs and PARITY_GEMM is
// unset or avx512 (PARITY_GEMM=avx2, scalar or aten give bf16 products to ATen, as on a
// machine without it). Read once; the same ConfigError as chosen_isa() for a bad value.
bool bf16_chosen();
// "parity avx512-bf16", or "ATen" (for reports).
std::string bf16_chosen_name();

// C[:, j0:j1] = A B[:, j0:j1] as multiply() does, in the bf16 chains above; runs_bf16() must
// hold.
void multiply_bf16(int64_t M, int64_t N, int64_t K, View16 A, View16 B, float* C, int64_t ldc,
                   int64_t j0, int64_t j1);

}  // namespace parity::kernels::gemm
