// parity's fp32 matrix product (gemm.h). The vector paths are the usual blocked product: a
// block of B's rows and columns and a block of A's rows are packed into panels, and a tile
// of MR x NR chains of C runs in registers over the block's k, one fused multiply-add per
// element and k. Built with -ffp-contract=off (kernels/CMakeLists.txt): the only fused
// operations are the explicit ones.
#include "kernels/gemm.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PARITY_GEMM_X86 1
#endif

#include "kernels/config.h"

namespace parity::kernels::gemm {
namespace {

// A page-aligned float buffer that grows, kept per thread. It is mapped on its own, outside
// the heap: only the pages the products touch count, and it leaves no holes in the heap.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }
  float* get(int64_t n) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (bytes > bytes_) {
      release();
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      data_ = static_cast<float*>(p);
      bytes_ = bytes;
    }
    return data_;
  }

 private:
  void release() {
    if (data_ != nullptr) munmap(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }
  float* data_ = nullptr;
  size_t bytes_ = 0;
};

// Copies a block of `rows` (at most 16) rows of 16 contiguous values, rows ld apart, to
// out transposed: value c of row r to out[c * ostride + r]. Pure data movement.
using Transpose16 = void (*)(const float* src, int64_t ld, int rows, float* out, int64_t ostride);
// Copies kc rows of NR contiguous values, rows ld apart, to out contiguously (the vector
// moves of the kernel's width: a fixed-size memcpy here becomes a slow string copy).
using CopyRows = void (*)(const float* src, int64_t ld, int64_t kc, float* out);

// Panels of A: rows i0 .. i0+m of A over k0 .. k0+kc, MR rows to a panel, each panel k-major
// (MR values per k), the rows past m zero.
template <int MR>
void pack_a(View A, int64_t i0, int64_t m, int64_t k0, int64_t kc, float* dst, Transpose16 t16) {
  for (int64_t p = 0; p < m; p += MR, dst += MR * kc) {
    const int64_t rows = std::min<int64_t>(MR, m - p);
    if (rows < MR) std::fill(dst, dst + MR * kc, 0.0f);
    const float* src = A.p + (i0 + p) * A.rs + k0 * A.cs;
    if (A.cs == 1) {
      int64_t k = 0;
      if (t16 != nullptr && rows == MR)
        for (; k + 16 <= kc; k += 16) t16(src + k, A.rs, MR, dst + k * MR, MR);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t kk = k; kk < kc; ++kk) dst[kk * MR + i] = src[i * A.rs + kk];
    } else {
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t i = 0; i < rows; ++i) dst[k * MR + i] = src[i * A.rs + k * A.cs];
    }
  }
}

// Panels of B: columns j0 .. j0+n over k0 .. k0+kc, NR columns to a panel, each panel
// k-major (NR values per k), the columns past n zero.
template <int NR>
void pack_b(View B, int64_t j0, int64_t n, int64_t k0, int64_t kc, float* dst, Transpose16 t16,
            CopyRows copy_rows) {
  for (int64_t q = 0; q < n; q += NR, dst += NR * kc) {
    const int64_t cols = std::min<int64_t>(NR, n - q);
    if (cols < NR) std::fill(dst, dst + NR * kc, 0.0f);
    const float* src = B.p + k0 * B.rs + (j0 + q) * B.cs;
    if (B.cs == 1 && cols == NR) {
      copy_rows(src, B.rs, kc, dst);
    } else if (B.cs == 1) {
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t j = 0; j < cols; ++j) dst[k * NR + j] = src[k * B.rs + j];
    } else if (B.rs == 1 && t16 != nullptr && cols == NR && NR % 16 == 0) {
      int64_t k = 0;
      for (; k + 16 <= kc; k += 16)
        for (int j = 0; j < NR; j += 16) t16(src + k + j * B.cs, B.cs, 16, dst + k * NR + j, NR);
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t kk = k; kk < kc; ++kk) dst[kk * NR + j] = src[kk + j * B.cs];
    } else {
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t k = 0; k < kc; ++k) dst[k * NR + j] = src[k * B.rs + j * B.cs];
    }
  }
}

// The blocked product over columns j0 .. j1 with the tile of Kernel. A block of kc values of k
// is Kernel::steps(kc) steps of its tile (a step takes one value of k, or a pair);
// Kernel::pack_b and pack_a pack B's and A's panels of a block into words (Kernel::Word), and
// Kernel::tile(steps, a, b, c, ldc, more) runs MR x NR chains over them, starting from zero,
// or from c when `more` (the chain continues from the block before).
template <class Kernel, class V>
void blocked(int64_t M, int64_t K, V A, V B, float* C, int64_t ldc, int64_t j0, int64_t j1) {
  using Word = typename Kernel::Word;
  static_assert(sizeof(Word) == sizeof(float), "the buffers hold float-sized words");
  constexpr int MR = Kernel::MR, NR = Kernel::NR;
  constexpr int64_t MC = Kernel::MC, KC = Kernel::KC, NC = Kernel::NC;
  thread_local Buffer a_buf, b_buf;
  auto* ap = reinterpret_cast<Word*>(a_buf.get(MC * Kernel::steps(KC)));
  auto* bp = reinterpret_cast<Word*>(b_buf.get(Kernel::steps(KC) * NC));
  alignas(64) float edge[MR * NR];
  for (int64_t jc = j0; jc < j1; jc += NC) {
    const int64_t nc = std::min(NC, j1 - jc);
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc), steps = Kernel::steps(kc);
      const bool more = pc > 0;
      Kernel::pack_b(B, jc, nc, pc, kc, K, bp);
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min(MC, M - ic);
        Kernel::pack_a(A, ic, mc, pc, kc, K, ap);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nr = std::min<int64_t>(NR, nc - jr);
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t mr = std::min<int64_t>(MR, mc - ir);
            float* c = C + (ic + ir) * ldc + jc + jr;
            const Word* a = ap + ir * steps;
            const Word* b = bp + jr * steps;
            if (mr == MR && nr == NR) {
              Kernel::tile(steps, a, b, c, ldc, more);
              continue;
            }
            // An edge tile runs whole on a scratch tile; only its valid part is read and
            // written back (the padded rows and columns are zero and touch nothing else).
            const size_t row_bytes = sizeof(float) * static_cast<size_t>(nr);
            if (more)
              for (int64_t i = 0; i < mr; ++i) std::memcpy(edge + i * NR, c + i * ldc, row_bytes);
            Kernel::tile(steps, a, b, edge, NR, more);
            for (int64_t i = 0; i < mr; ++i) std::memcpy(c + i * ldc, edge + i * NR, row_bytes);
          }
        }
      }
    }
  }
}

// The fp32 kernels' steps and packing (one value of k a step).
template <class Kernel>
struct Fp32Packing {
  using Word = float;
  static constexpr int64_t steps(int64_t kc) { return kc; }
  static void pack_a(View A, int64_t i0, int64_t m, int64_t k0, int64_t kc, int64_t /*K*/,
                     float* dst) {
    gemm::pack_a<Kernel::MR>(A, i0, m, k0, kc, dst, Kernel::transpose16);
  }
  static void pack_b(View B, int64_t j0, int64_t n, int64_t k0, int64_t kc, int64_t /*K*/,
                     float* dst) {
    gemm::pack_b<Kernel::NR>(B, j0, n, k0, kc, dst, Kernel::transpose16, Kernel::copy_rows);
  }
};

#ifdef PARITY_GEMM_X86
// The accumulators of the AVX-512 tiles (MR rows of two vectors): from C where the chain
// continues from the block before (`more`), else zero; and back to C.
template <int MR>
__attribute__((target("avx512f"), always_inline)) inline void load_acc(__m512 (&acc)[MR][2],
                                                                      const float* c,
                                                                      int64_t ldc, bool more) {
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = more ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc[i][1] = more ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
}
template <int MR>
__attribute__((target("avx512f"), always_inline)) inline void store_acc(
    const __m512 (&acc)[MR][2], float* c, int64_t ldc) {
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(c + i * ldc, acc[i][0]);
    _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
  }
}

// AVX-512: 12 rows x 32 columns, 24 accumulators.
struct Avx512 : Fp32Packing<Avx512> {
  static constexpr int MR = 12, NR = 32;
  static constexpr int64_t MC = 96, KC = 256, NC = 1024;
  __attribute__((target("avx512f"))) static void copy_rows(const float* src, int64_t ld,
                                                           int64_t kc, float* out) {
    for (int64_t k = 0; k < kc; ++k, src += ld, out += NR) {
      _mm512_store_ps(out, _mm512_loadu_ps(src));
      _mm512_store_ps(out + 16, _mm512_loadu_ps(src + 16));
    }
  }
  // GCC 12's AVX-512 headers pass a self-initialised "undefined" vector as the unused
  // pass-through operand of the unpack and shuffle intrinsics, and -Wuninitialized reports
  // it once inlined here; no lane of it is ever read (the mask keeps every lane).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
  // The low and high 64-bit halves of each 128-bit lane of a and b, interleaved.
  __attribute__((target("avx512f"), always_inline)) static inline __m512 pairs_lo(__m512 a,
                                                                                  __m512 b) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  }
  __attribute__((target("avx512f"), always_inline)) static inline __m512 pairs_hi(__m512 a,
                                                                                  __m512 b) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  }
  // The 16 x 16 transpose: interleave pairs of rows (32-bit), then pairs of pairs (64-bit),
  // then gather the 128-bit lanes. Rows past `rows` read as zero; each output row is masked to
  // `rows` values.
  __attribute__((target("avx512f"))) static void transpose16(const float* src, int64_t ld,
                                                             int rows, float* out,
                                                             int64_t ostride) {
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_loadu_ps(src + i * ld) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // u[4q + m]: lane L holds column 4L + m of rows 4q .. 4q+3.
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const int b = 4 * q;
      r[b] = pairs_lo(t[b], t[b + 2]);
      r[b + 1] = pairs_hi(t[b], t[b + 2]);
      r[b + 2] = pairs_lo(t[b + 1], t[b + 3]);
      r[b + 3] = pairs_hi(t[b + 1], t[b + 3]);
    }
    const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      const __m512 v = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88),
                   w = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xdd),
                   x = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88),
                   y = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xdd);
      _mm512_mask_storeu_ps(out + (m + 0) * ostride, mask, _mm512_shuffle_f32x4(v, x, 0x88));
      _mm512_mask_storeu_ps(out + (m + 4) * ostride, mask, _mm512_shuffle_f32x4(w, y, 0x88));
      _mm512_mask_storeu_ps(out + (m + 8) * ostride, mask, _mm512_shuffle_f32x4(v, x, 0xdd));
      _mm512_mask_storeu_ps(out + (m + 12) * ostride, mask, _mm512_shuffle_f32x4(w, y, 0xdd));
    }
  }
#pragma GCC diagnostic pop
  __attribute__((target("avx512f"))) static void tile(int64_t kc, const float* a,
                                                      const float* b, float* c, int64_t ldc,
                                                      bool more) {
    __m512 acc[MR][2];
    load_acc<MR>(acc, c, ldc, more);
    for (int64_t k = 0; k < kc; ++k, a += MR, b += NR) {
      const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
      for (int i = 0; i < MR; ++i) {
        const __m512 ai = _mm512_set1_ps(a[i]);
        acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
      }
    }
    store_acc<MR>(acc, c, ldc);
  }
};

static_assert(kRowAlign % Avx512::MR == 0 && kColumnAlign % Avx512::NR == 0,
              "gemm.h's split alignments keep the AVX-512 tiles whole");

// AVX2 with FMA: 6 rows x 16 columns, 12 accumulators.
struct Avx2 : Fp32Packing<Avx2> {
  static constexpr int MR = 6, NR = 16;
  static constexpr int64_t MC = 96, KC = 256, NC = 1024;
  static constexpr Transpose16 transpose16 = nullptr;
  __attribute__((target("avx2"))) static void copy_rows(const float* src, int64_t ld,
                                                        int64_t kc, float* out) {
    for (int64_t k = 0; k < kc; ++k, src += ld, out += NR) {
      _mm256_store_ps(out, _mm256_loadu_ps(src));
      _mm256_store_ps(out + 8, _mm256_loadu_ps(src + 8));
    }
  }
  __attribute__((target("avx2,fma"))) static void tile(int64_t kc, const float* a,
                                                       const float* b, float* c, int64_t ldc,
                                                       bool more) {
    __m256 acc[MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = more ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
      acc[i][1] = more ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < kc; ++k, a += MR, b += NR) {
      const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
      for (int i = 0; i < MR; ++i) {
        const __m256 ai = _mm256_broadcast_ss(a + i);
        acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
      }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      _mm256_storeu_ps(c + i * ldc, acc[i][0]);
      _mm256_storeu_ps(c + i * ldc + 8, acc[i][1]);
    }
  }
};
static_assert(kRowAlign % Avx2::MR == 0 && kColumnAlign % Avx2::NR == 0,
              "gemm.h's split alignments keep the AVX2 tiles whole");
#endif

// ---------------------------------------------------------------------------------------
// The bf16 product. Panels hold pairs of k as 32-bit words (the bf16 of k = 2p in the low
// half, k = 2p + 1 in the high half, as VDPBF16PS reads them): a panel of R rows of X is
// k-pair-major, R words per pair, rows past `rows` and values of k past K zero. X is A for
// A's panels and B^T for B's (X(j, k) = B(k, j)).

// The word of X at (r, pair p), from two 16-bit values (zero past K).
inline uint32_t pair_word(View16 X, int64_t r, int64_t p, int64_t K) {
  const int64_t k = 2 * p;
  const uint32_t lo = X.p[r * X.rs + k * X.cs];
  const uint32_t hi = k + 1 < K ? X.p[r * X.rs + (k + 1) * X.cs] : 0u;
  return lo | hi << 16;
}

#ifdef PARITY_GEMM_X86
struct Bf16Avx512 {
  static constexpr int MR = 12, NR = 32;
  // 512 values of k a block: 256 words a panel row, the blocks as many bytes as fp32's.
  static constexpr int64_t MC = 96, KC = 512, NC = 1024;
  static_assert(KC % 2 == 0, "a block starts at a pair");
  using Word = uint32_t;
  static constexpr int64_t steps(int64_t kc) { return (kc + 1) / 2; }
  static void pack_a(View16 A, int64_t i0, int64_t m, int64_t k0, int64_t kc, int64_t K,
                     uint32_t* dst) {
    pack<MR>(A, i0, m, k0 / 2, steps(kc), K, dst);
  }
  // B's panels are B^T's rows (B's columns).
  static void pack_b(View16 B, int64_t j0, int64_t n, int64_t k0, int64_t kc, int64_t K,
                     uint32_t* dst) {
    pack<NR>(View16{B.p, B.cs, B.rs}, j0, n, k0 / 2, steps(kc), K, dst);
  }

  // Panels of R rows (R = MR or NR) of X, rows r0 .. r0+rows, pairs p0 .. p0+np.
  template <int R>
  __attribute__((target("avx512f,avx512bw"))) static void pack(View16 X, int64_t r0,
                                                               int64_t rows, int64_t p0,
                                                               int64_t np, int64_t K,
                                                               uint32_t* dst) {
    for (int64_t q = 0; q < rows; q += R, dst += R * np) {
      const int64_t n = std::min<int64_t>(R, rows - q);
      const View16 P{X.p + (r0 + q) * X.rs, X.rs, X.cs};
      // Pairs wholly inside K.
      const int64_t whole = std::min(np, K / 2 - p0);
      int64_t p = 0;
      if (n == R && X.cs == 1 && X.rs % 2 == 0 &&
          reinterpret_cast<uintptr_t>(P.p) % 4 == 0) {
        // Each row's pairs are 32-bit words: the panel is their transpose (16 x 16 blocks).
        const float* src = reinterpret_cast<const float*>(P.p);
        float* out = reinterpret_cast<float*>(dst);
        for (; p + 16 <= whole; p += 16)
          for (int r = 0; r < R; r += 16)
            Avx512::transpose16(src + r * (X.rs / 2) + (p0 + p), X.rs / 2, std::min(16, R - r),
                                out + p * R + r, R);
      } else if (n == R && X.rs == 1) {
        // For each pair the two values of k are R contiguous rows each: interleave them.
        const __m512i lo_idx = interleave_index(0), hi_idx = interleave_index(16);
        constexpr __mmask32 in_mask = R >= 32 ? ~__mmask32(0) : (__mmask32(1) << R) - 1;
        for (; p < whole; ++p) {
          const uint16_t* k0 = P.p + 2 * (p0 + p) * X.cs;
          const __m512i a = _mm512_maskz_loadu_epi16(in_mask, k0),
                        b = _mm512_maskz_loadu_epi16(in_mask, k0 + X.cs);
          uint32_t* o = dst + p * R;
          if constexpr (R >= 16) {
            _mm512_storeu_si512(o, _mm512_permutex2var_epi16(a, lo_idx, b));
            if constexpr (R >= 32)
              _mm512_storeu_si512(o + 16, _mm512_permutex2var_epi16(a, hi_idx, b));
          } else {
            _mm512_mask_storeu_epi32(o, static_cast<__mmask16>((1u << R) - 1),
                                     _mm512_permutex2var_epi16(a, lo_idx, b));
          }
        }
      }
      for (; p < np; ++p)
        for (int64_t r = 0; r < R; ++r)
          dst[p * R + r] = r < n ? pair_word(P, r, p0 + p, K) : 0u;
    }
  }
  // Word c of the result takes 16-bit lane first + c of a, then of b (lanes 32 on).
  __attribute__((target("avx512f"))) static __m512i interleave_index(int first) {
    alignas(64) uint16_t idx[32];
    for (int c = 0; c < 16; ++c) {
      idx[2 * c] = static_cast<uint16_t>(first + c);
      idx[2 * c + 1] = static_cast<uint16_t>(32 + first + c);
    }
    return _mm512_load_si512(idx);
  }

  __attribute__((target("avx512f,avx512bf16"))) static void tile(int64_t kp, const uint32_t* a,
                                                                 const uint32_t* b, float* c,
                                                                 int64_t ldc, bool more) {
    __m512 acc[MR][2];
    load_acc<MR>(acc, c, ldc, more);
    for (int64_t p = 0; p < kp; ++p, a += MR, b += NR) {
      const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 12
      for (int i = 0; i < MR; ++i) {
        const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i]));
        acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
        acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
      }
    }
    store_acc<MR>(acc, c, ldc);
  }
};
static_assert(kRowAlign % Bf16Avx512::MR == 0 && kColumnAlign % Bf16Avx512::NR == 0,
              "gemm.h's split alignments keep the bf16 tiles whole");

#endif

// The chains one element at a time, with the C library's fused multiply-add.
void scalar(int64_t M, int64_t K, View A, View B, float* C, int64_t ldc, int64_t j0,
            int64_t j1) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = j0; j < j1; ++j) {
      float c = 0.0f;
      for (int64_t k = 0; k < K; ++k) c = std::fma(A.p[i * A.rs + k * A.cs], B.p[k * B.rs + j * B.cs], c);
      C[i * ldc + j] = c;
    }
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    case Isa::Scalar: return "scalar";
  }
  return "?";
}

bool runs(Isa isa) {
#ifdef PARITY_GEMM_X86
  if (isa == Isa::Avx512) return __builtin_cpu_supports("avx512f");
  if (isa == Isa::Avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  if (isa != Isa::Scalar) return false;
#endif
  return true;
}

Isa best_isa() {
  static const Isa best = [] {
    for (Isa isa : {Isa::Avx512, Isa::Avx2})
      if (runs(isa)) return isa;
    return Isa::Scalar;
  }();
  return best;
}

std::optional<Isa> chosen_isa() {
  static const std::optional<Isa> choice = []() -> std::optional<Isa> {
    const char* env = std::getenv("PARITY_GEMM");
    if (env == nullptr || *env == '\0') return best_isa();
    const std::string name = env;
    if (name == "aten") return std::nullopt;
    for (Isa isa : {Isa::Avx512, Isa::Avx2, Isa::Scalar}) {
      if (name != isa_name(isa)) continue;
      if (!runs(isa))
        throw ConfigError("PARITY_GEMM=" + name + ": this CPU does not run it; use " +
                                    isa_name(best_isa()) + ", scalar or aten, or unset it");
      return isa;
    }
    throw ConfigError("PARITY_GEMM=" + name +
                                ": unknown; use avx512, avx2, scalar or aten, or unset it");
  }();
  return choice;
}

std::string chosen_name() {
  const auto isa = chosen_isa();
  return isa ? std::string("parity ") + isa_name(*isa) : std::string("ATen");
}

void multiply(Isa isa, int64_t M, int64_t N, int64_t K, View A, View B, float* C, int64_t ldc,
              int64_t j0, int64_t j1) {
  (void)N;
  if (M <= 0 || j1 <= j0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc + j0, C + i * ldc + j1, 0.0f);
    return;
  }
  switch (isa) {
#ifdef PARITY_GEMM_X86
    case Isa::Avx512: return blocked<Avx512>(M, K, A, B, C, ldc, j0, j1);
    case Isa::Avx2: return blocked<Avx2>(M, K, A, B, C, ldc, j0, j1);
#endif
    default: return scalar(M, K, A, B, C, ldc, j0, j1);
  }
}

bool runs_bf16() {
#ifdef PARITY_GEMM_X86
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool bf16_chosen() {
  static const bool chosen = [] {
    const auto isa = chosen_isa();
    const char* env = std::getenv("PARITY_GEMM");
    const bool asked = env == nullptr || *env == '\0' || (isa && *isa == Isa::Avx512);
    return asked && runs_bf16();
  }();
  return chosen;
}

std::string bf16_chosen_name() { return bf16_chosen() ? "parity avx512-bf16" : "ATen"; }

void multiply_bf16(int64_t M, int64_t N, int64_t K, View16 A, View16 B, float* C, int64_t ldc,
                   int64_t j0, int64_t j1) {
  (void)N;
  if (!runs_bf16()) throw std::logic_error("gemm::multiply_bf16 on a CPU without AVX-512 BF16");
  if (M <= 0 || j1 <= j0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc + j0, C + i * ldc + j1, 0.0f);
    return;
  }
#ifdef PARITY_GEMM_X86
  blocked<Bf16Avx512>(M, K, A, B, C, ldc, j0, j1);
#else
  (void)A, (void)B, (void)C, (void)ldc;
#endif
}

}  // namespace parity::kernels::gemm
