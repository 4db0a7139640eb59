// The fused KDA prologue (kda_prep.h). Built with -ffp-contract=off (kernels/CMakeLists.txt):
// every product and every sum rounds on its own, in every clone. The inner loops run along
// channels, which are independent, so a vector clone computes each channel exactly as the
// scalar one does.
#include "kernels/kda_prep.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/loop_elems.h"

namespace parity::kernels::kda_prep {
namespace {

using namespace loop_elems;

constexpr int64_t kTile = 64;  // channels per inner loop (a bound on stack arrays only)

// A loop trip count: N when N > 0 (known to the compiler), else the value held.
template <int64_t N>
struct Width {
  int64_t value = N;
  operator int64_t() const { return N > 0 ? N : value; }
};

// The conv of one tile of n channels at token t of row b, in A, taps ascending.
template <class S, int64_t N>
PARITY_INLINE void conv_at(const ConvShape& s, const S* x, const Acc<S>* wt, int64_t cb,
                           Width<N> n, int64_t b, int64_t t, Acc<S>* acc) {
  for (int64_t c = 0; c < n; ++c) acc[c] = 0;
  for (int64_t j = 0; j < s.J; ++j) {
    const int64_t src = t - s.J + 1 + j;
    if (src < 0) continue;
    const S* xr = x + (b * s.T + src) * s.C + cb;
    const Acc<S>* wj = wt + j * kTile;
    for (int64_t c = 0; c < n; ++c) acc[c] += wj[c] * widen<S>(xr[c]);
  }
}

// silu(c) = c / (1 + e^-c), of the conv's value c as stored in S.
template <class A>
PARITY_INLINE A silu_of(A c) {
  return c / (A(1) + fixed_exp(-c));
}

// The taps of channels [cb, cb + n) in A, tap-major: wt[j * kTile + c].
template <class S, int64_t N>
PARITY_INLINE void widen_taps(const ConvShape& s, const S* w, int64_t cb, Width<N> n,
                              Acc<S>* wt) {
  for (int64_t j = 0; j < s.J; ++j)
    for (int64_t c = 0; c < n; ++c) wt[j * kTile + c] = widen<S>(w[(cb + c) * s.J + j]);
}

// One tile of channels [cb, cb + n).
template <class S, int64_t N>
PARITY_INLINE void conv_fwd_tile(const ConvShape& s, const S* x, const S* w, S* y, int64_t cb,
                                 Width<N> n, Acc<S>* wt) {
  using A = Acc<S>;
  const int64_t T = s.T, C = s.C;
  widen_taps(s, w, cb, n, wt);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      alignas(64) A acc[kTile];
      conv_at(s, x, wt, cb, n, b, t, acc);
      S* yr = y + (b * T + t) * C + cb;
      if (s.silu)
        for (int64_t c = 0; c < n; ++c) yr[c] = narrow<S>(silu_of(acc[c]));
      else
        for (int64_t c = 0; c < n; ++c) yr[c] = narrow<S>(acc[c]);
    }
}

// One tile of channels [cb, cb + n). g: the gradient of the conv's output for the tile,
// [B*T, kTile]: dy itself, or with silu dy silu'(c) = (dy sig) (1 + c (1 - sig)),
// sig = 1 / (1 + e^-c), rounded to S, c recomputed (in acc, unrounded, as the forward).
template <class S, int64_t N>
PARITY_INLINE void conv_bwd_tile(const ConvShape& s, const S* x, const S* w, const S* dy, S* dx,
                                 S* dw, int64_t cb, Width<N> n, Acc<S>* wt, Acc<S>* dwt,
                                 Acc<S>* g) {
  using A = Acc<S>;
  const int64_t T = s.T, C = s.C, J = s.J;
  widen_taps(s, w, cb, n, wt);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const S* dyr = dy + (b * T + t) * C + cb;
      A* gr = g + (b * T + t) * kTile;
      if (!s.silu) {
        for (int64_t c = 0; c < n; ++c) gr[c] = widen<S>(dyr[c]);
        continue;
      }
      alignas(64) A acc[kTile];
      conv_at(s, x, wt, cb, n, b, t, acc);
      for (int64_t c = 0; c < n; ++c) {
        const A cv = acc[c], sig = logistic(cv);
        gr[c] = round_trip<S>((widen<S>(dyr[c]) * sig) * (A(1) + cv * (A(1) - sig)));
      }
    }
  std::fill(dwt, dwt + J * kTile, A(0));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      // dx at token t: the taps that read x_t, g at t + J - 1 - j, taps ascending.
      alignas(64) A acc[kTile] = {};
      for (int64_t j = 0; j < J; ++j) {
        const int64_t dst = t + J - 1 - j;
        if (dst >= T) continue;
        const A* gr = g + (b * T + dst) * kTile;
        const A* wj = wt + j * kTile;
        for (int64_t c = 0; c < n; ++c) acc[c] += wj[c] * gr[c];
      }
      S* dxr = dx + (b * T + t) * C + cb;
      for (int64_t c = 0; c < n; ++c) dxr[c] = narrow<S>(acc[c]);
      // dw: g_t times the input each tap read at t; rows, then tokens, ascending.
      const A* gr = g + (b * T + t) * kTile;
      for (int64_t j = 0; j < J; ++j) {
        const int64_t src = t - J + 1 + j;
        if (src < 0) continue;
        const S* xr = x + (b * T + src) * C + cb;
        A* dj = dwt + j * kTile;
        for (int64_t c = 0; c < n; ++c) dj[c] += gr[c] * widen<S>(xr[c]);
      }
    }
  for (int64_t j = 0; j < J; ++j)
    for (int64_t c = 0; c < n; ++c) dw[(cb + c) * J + j] = narrow<S>(dwt[j * kTile + c]);
}

// Tiles of kTile channels (a compile-time width, so the channel loops unroll), then the tail.
template <class S>
PARITY_INLINE void conv_fwd(const ConvShape& s, const S* x, const S* w, S* y, int64_t c0,
                            int64_t c1) {
  Scratch<Acc<S>> wt(s.J * kTile);
  for (int64_t cb = c0; cb < c1; cb += kTile) {
    if (c1 - cb >= kTile)
      conv_fwd_tile(s, x, w, y, cb, Width<kTile>{}, wt.data());
    else
      conv_fwd_tile(s, x, w, y, cb, Width<0>{c1 - cb}, wt.data());
  }
}

template <class S>
PARITY_INLINE void conv_bwd(const ConvShape& s, const S* x, const S* w, const S* dy, S* dx,
                            S* dw, int64_t c0, int64_t c1) {
  Scratch<Acc<S>> wt(s.J * kTile), dwt(s.J * kTile), g(s.B * s.T * kTile);
  for (int64_t cb = c0; cb < c1; cb += kTile) {
    if (c1 - cb >= kTile)
      conv_bwd_tile(s, x, w, dy, dx, dw, cb, Width<kTile>{}, wt.data(), dwt.data(), g.data());
    else
      conv_bwd_tile(s, x, w, dy, dx, dw, cb, Width<0>{c1 - cb}, wt.data(), dwt.data(),
                    g.data());
  }
}

template <class S>
PARITY_INLINE void heads_fwd(const HeadsShape& s, const S* a, Acc<S>* out, Acc<S>* inv,
                             int64_t bh0, int64_t bh1) {
  using A = Acc<S>;
  const int64_t T = s.T, H = s.H, K = s.K;
  const A eps = A(s.eps), scale = A(s.scale);
  for (int64_t bh = bh0; bh < bh1; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    for (int64_t t = 0; t < T; ++t) {
      const S* ar = a + ((b * T + t) * H + h) * K;
      A* o = out + (bh * T + t) * K;
      if (!s.l2) {
        for (int64_t k = 0; k < K; ++k) o[k] = widen<S>(ar[k]);
        continue;
      }
      A ss = 0;
      for (int64_t k = 0; k < K; ++k) {
        const A v = widen<S>(ar[k]);
        ss += v * v;
      }
      const A iv = A(1) / std::sqrt(ss + eps);
      inv[bh * T + t] = iv;
      for (int64_t k = 0; k < K; ++k) o[k] = round_trip<S>(widen<S>(ar[k]) * iv);
      if (s.scale != 1.0)
        for (int64_t k = 0; k < K; ++k) o[k] = o[k] * scale;
    }
  }
}

// With n = a inv, inv = (sum a^2 + eps)^(-1/2): dn/da_m = inv e_m - a inv^3 a_m, so
// da = inv dn - a (inv^3 <a, dn>).
template <class S>
PARITY_INLINE void heads_bwd(const HeadsShape& s, const S* a, const Acc<S>* inv,
                             const Acc<S>* dout, S* da, int64_t bh0, int64_t bh1) {
  using A = Acc<S>;
  const int64_t T = s.T, H = s.H, K = s.K;
  const A scale = A(s.scale);
  std::vector<A> dn(K);
  for (int64_t bh = bh0; bh < bh1; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    for (int64_t t = 0; t < T; ++t) {
      const A* dor = dout + (bh * T + t) * K;
      S* dar = da + ((b * T + t) * H + h) * K;
      for (int64_t k = 0; k < K; ++k) dn[k] = s.scale != 1.0 ? dor[k] * scale : dor[k];
      if (!s.l2) {
        for (int64_t k = 0; k < K; ++k) dar[k] = narrow<S>(dn[k]);
        continue;
      }
      const S* ar = a + ((b * T + t) * H + h) * K;
      A dot = 0;
      for (int64_t k = 0; k < K; ++k) dot += widen<S>(ar[k]) * dn[k];
      const A iv = inv[bh * T + t];
      const A c = iv * iv * iv * dot;
      for (int64_t k = 0; k < K; ++k) dar[k] = narrow<S>(iv * dn[k] - widen<S>(ar[k]) * c);
    }
  }
}

}  // namespace

PARITY_CLONES void conv_forward(const ConvShape& s, const float* x, const float* w, float* y, int64_t c0,
                  int64_t c1) {
  conv_fwd(s, x, w, y, c0, c1);
}
PARITY_CLONES void conv_forward(const ConvShape& s, const double* x, const double* w, double* y, int64_t c0,
                  int64_t c1) {
  conv_fwd(s, x, w, y, c0, c1);
}
PARITY_CLONES void conv_forward(const ConvShape& s, const uint16_t* x, const uint16_t* w, uint16_t* y,
                  int64_t c0, int64_t c1) {
  conv_fwd(s, x, w, y, c0, c1);
}

PARITY_CLONES void conv_backward(const ConvShape& s, const float* x, const float* w, const float* dy,
                   float* dx, float* dw, int64_t c0, int64_t c1) {
  conv_bwd(s, x, w, dy, dx, dw, c0, c1);
}
PARITY_CLONES void conv_backward(const ConvShape& s, const double* x, const double* w, const double* dy,
                   double* dx, double* dw, int64_t c0, int64_t c1) {
  conv_bwd(s, x, w, dy, dx, dw, c0, c1);
}
PARITY_CLONES void conv_backward(const ConvShape& s, const uint16_t* x, const uint16_t* w,
                   const uint16_t* dy, uint16_t* dx, uint16_t* dw, int64_t c0, int64_t c1) {
  conv_bwd(s, x, w, dy, dx, dw, c0, c1);
}

PARITY_CLONES void heads_forward(const HeadsShape& s, const float* a, float* out, float* inv, int64_t bh0,
                   int64_t bh1) {
  heads_fwd(s, a, out, inv, bh0, bh1);
}
PARITY_CLONES void heads_forward(const HeadsShape& s, const double* a, double* out, double* inv, int64_t bh0,
                   int64_t bh1) {
  heads_fwd(s, a, out, inv, bh0, bh1);
}
PARITY_CLONES void heads_forward(const HeadsShape& s, const uint16_t* a, float* out, float* inv, int64_t bh0,
                   int64_t bh1) {
  heads_fwd(s, a, out, inv, bh0, bh1);
}

PARITY_CLONES void heads_backward(const HeadsShape& s, const float* a, const float* inv, const float* dout,
                    float* da, int64_t bh0, int64_t bh1) {
  heads_bwd(s, a, inv, dout, da, bh0, bh1);
}
PARITY_CLONES void heads_backward(const HeadsShape& s, const double* a, const double* inv,
                    const double* dout, double* da, int64_t bh0, int64_t bh1) {
  heads_bwd(s, a, inv, dout, da, bh0, bh1);
}
PARITY_CLONES void heads_backward(const HeadsShape& s, const uint16_t* a, const float* inv, const float* dout,
                    uint16_t* da, int64_t bh0, int64_t bh1) {
  heads_bwd(s, a, inv, dout, da, bh0, bh1);
}

}  // namespace parity::kernels::kda_prep
