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

// The loops below run tokens outermost and the caller's channels, tile by tile, inside:
// each pass over a token reads whole rows of x, dy and dx in order (a tile-outer order
// strides through them, one short run a row, and waits on memory). Every channel's
// arithmetic is the same in either order.

// The channel tiles of [c0, c1): f(tile, cb, width), width a Width<kTile> for whole tiles.
template <class F>
PARITY_INLINE void for_tiles(int64_t c0, int64_t c1, F&& f) {
  for (int64_t cb = c0, tile = 0; cb < c1; cb += kTile, ++tile) {
    if (c1 - cb >= kTile)
      f(tile, cb, Width<kTile>{});
    else
      f(tile, cb, Width<0>{c1 - cb});
  }
}

// y at token t of row b, for the tile at cb (its taps at wt).
template <class S, int64_t N>
PARITY_INLINE void conv_fwd_at(const ConvShape& s, const S* x, const Acc<S>* wt, S* y,
                               int64_t cb, Width<N> n, int64_t b, int64_t t) {
  alignas(64) Acc<S> acc[kTile];
  conv_at(s, x, wt, cb, n, b, t, acc);
  S* yr = y + (b * s.T + t) * s.C + cb;
  if (s.silu)
    for (int64_t c = 0; c < n; ++c) yr[c] = narrow<S>(silu_of(acc[c]));
  else
    for (int64_t c = 0; c < n; ++c) yr[c] = narrow<S>(acc[c]);
}

// g, the gradient of the conv's output at token t of row b for the tile at cb: dy itself,
// or with silu dy silu'(c) = (dy sig) (1 + c (1 - sig)), sig = 1 / (1 + e^-c), rounded to
// S, c recomputed (in acc, unrounded, as the forward).
template <class S, int64_t N>
PARITY_INLINE void conv_grad_at(const ConvShape& s, const S* x, const Acc<S>* wt, const S* dy,
                                int64_t cb, Width<N> n, int64_t b, int64_t t, Acc<S>* gr) {
  using A = Acc<S>;
  const S* dyr = dy + (b * s.T + t) * s.C + cb;
  if (!s.silu) {
    for (int64_t c = 0; c < n; ++c) gr[c] = widen<S>(dyr[c]);
    return;
  }
  alignas(64) A acc[kTile];
  conv_at(s, x, wt, cb, n, b, t, acc);
  for (int64_t c = 0; c < n; ++c) {
    const A cv = acc[c], sig = logistic(cv);
    gr[c] = round_trip<S>((widen<S>(dyr[c]) * sig) * (A(1) + cv * (A(1) - sig)));
  }
}

// dx at token t of row b (the taps that read x_t, g at t + J - 1 - j, taps ascending) and
// the tap gradient's terms of token t (g_t times the input each tap read), for the tile at
// cb. The tile's g at token u is ring[(u mod J) * ring_ld] (conv_bwd's ring).
template <class S, int64_t N>
PARITY_INLINE void conv_bwd_at(const ConvShape& s, const S* x, const Acc<S>* wt, S* dx,
                               Acc<S>* dwt, int64_t cb, Width<N> n, int64_t b, int64_t t,
                               const Acc<S>* ring, int64_t ring_ld) {
  using A = Acc<S>;
  const int64_t T = s.T, C = s.C, J = s.J;
  const auto g_of = [&](int64_t u) PARITY_INLINE_LAMBDA { return ring + u % J * ring_ld; };
  alignas(64) A acc[kTile] = {};
  for (int64_t j = 0; j < J; ++j) {
    const int64_t dst = t + J - 1 - j;
    if (dst >= T) continue;
    const A* gr = g_of(dst);
    const A* wj = wt + j * kTile;
    for (int64_t c = 0; c < n; ++c) acc[c] += wj[c] * gr[c];
  }
  S* dxr = dx + (b * T + t) * C + cb;
  for (int64_t c = 0; c < n; ++c) dxr[c] = narrow<S>(acc[c]);
  const A* gr = g_of(t);
  for (int64_t j = 0; j < J; ++j) {
    const int64_t src = t - J + 1 + j;
    if (src < 0) continue;
    const S* xr = x + (b * T + src) * C + cb;
    A* dj = dwt + j * kTile;
    for (int64_t c = 0; c < n; ++c) dj[c] += gr[c] * widen<S>(xr[c]);
  }
}

// The taps of every tile of [c0, c1), tile-major: tile i's at wt + i * J * kTile.
template <class S>
PARITY_INLINE Scratch<Acc<S>> tile_taps(const ConvShape& s, const S* w, int64_t c0,
                                        int64_t c1) {
  Scratch<Acc<S>> wt((c1 - c0 + kTile - 1) / kTile * s.J * kTile);
  for_tiles(c0, c1, [&](int64_t tile, int64_t cb, auto n) PARITY_INLINE_LAMBDA {
    widen_taps(s, w, cb, n, &wt[tile * s.J * kTile]);
  });
  return wt;
}

template <class S>
PARITY_INLINE void conv_fwd(const ConvShape& s, const S* x, const S* w, S* y, int64_t c0,
                            int64_t c1) {
  const auto wt = tile_taps(s, w, c0, c1);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for_tiles(c0, c1, [&](int64_t tile, int64_t cb, auto n) PARITY_INLINE_LAMBDA {
        conv_fwd_at(s, x, &wt[tile * s.J * kTile], y, cb, n, b, t);
      });
}

// g is kept for the last J tokens only: a ring of J rows of every tile, token u in row
// u mod J. dx at t reads g at t .. t + J - 1, so g at t + J - 1 is made just before (it
// replaces t - 1's, which nothing reads again).
template <class S>
PARITY_INLINE void conv_bwd(const ConvShape& s, const S* x, const S* w, const S* dy, S* dx,
                            S* dw, int64_t c0, int64_t c1) {
  using A = Acc<S>;
  const int64_t T = s.T, J = s.J, tiles = (c1 - c0 + kTile - 1) / kTile;
  const auto wt = tile_taps(s, w, c0, c1);
  Scratch<A> dwt(tiles * J * kTile, A(0)), ring(J * tiles * kTile);
  const auto ring_row = [&](int64_t u, int64_t tile) PARITY_INLINE_LAMBDA {
    return &ring[(u % J * tiles + tile) * kTile];
  };
  const auto make_g = [&](int64_t b, int64_t u) PARITY_INLINE_LAMBDA {
    for_tiles(c0, c1, [&](int64_t tile, int64_t cb, auto n) PARITY_INLINE_LAMBDA {
      conv_grad_at(s, x, &wt[tile * J * kTile], dy, cb, n, b, u, ring_row(u, tile));
    });
  };
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t u = 0; u < std::min(T, J - 1); ++u) make_g(b, u);
    for (int64_t t = 0; t < T; ++t) {
      if (t + J - 1 < T) make_g(b, t + J - 1);
      for_tiles(c0, c1, [&](int64_t tile, int64_t cb, auto n) PARITY_INLINE_LAMBDA {
        conv_bwd_at(s, x, &wt[tile * J * kTile], dx, &dwt[tile * J * kTile], cb, n, b, t,
                    &ring[tile * kTile], tiles * kTile);
      });
    }
  }
  for_tiles(c0, c1, [&](int64_t tile, int64_t cb, auto n) PARITY_INLINE_LAMBDA {
    for (int64_t j = 0; j < J; ++j)
      for (int64_t c = 0; c < n; ++c)
        dw[(cb + c) * J + j] = narrow<S>(dwt[(tile * J + j) * kTile + c]);
  });
}

// The l2 forms below take the sum over a row's key channels for kRows tokens at once: each
// token's sum is still its own chain in key order, and the chains run side by side, so the
// adds do not wait on one another (one chain at a time waits an add's latency per channel).
constexpr int64_t kRows = 8;

// Token t of (row b, head h) = bh in a [B,T,H*K]: at a + ((b T + t) H + h) K; the next token's
// H K further.
template <class P>
PARITY_INLINE P* head_row(const HeadsShape& s, P* a, int64_t bh, int64_t t) {
  return a + ((bh / s.H * s.T + t) * s.H + bh % s.H) * s.K;
}

// sums[j] = sum over k ascending of x_j[k] y_j[k] for the n <= kRows rows x_j = x + j * ldx
// (widened from S) and y_j = y + j * ldy.
template <class S, class A>
PARITY_INLINE void row_dots(const S* x, int64_t ldx, const A* y, int64_t ldy, int64_t K,
                            int64_t n, A* sums) {
  for (int64_t j = 0; j < kRows; ++j) sums[j] = 0;
  if (n == kRows) {
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < kRows; ++j) sums[j] += widen<S>(x[j * ldx + k]) * y[j * ldy + k];
    return;
  }
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < n; ++j) sums[j] += widen<S>(x[j * ldx + k]) * y[j * ldy + k];
}

template <class S>
PARITY_INLINE void heads_fwd(const HeadsShape& s, const S* a, Acc<S>* out, Acc<S>* inv,
                             int64_t bh0, int64_t bh1) {
  using A = Acc<S>;
  const int64_t T = s.T, K = s.K, ld = s.H * s.K;
  const A eps = A(s.eps), scale = A(s.scale);
  std::vector<A> sq(kRows * K);
  for (int64_t bh = bh0; bh < bh1; ++bh) {
    for (int64_t t0 = 0; t0 < T; t0 += kRows) {
      const int64_t n = std::min(kRows, T - t0);
      const S* a0 = head_row(s, a, bh, t0);
      if (!s.l2) {
        for (int64_t j = 0; j < n; ++j) {
          A* o = out + (bh * T + t0 + j) * K;
          for (int64_t k = 0; k < K; ++k) o[k] = widen<S>(a0[j * ld + k]);
        }
        continue;
      }
      // sum a^2 as sum a * a: the square of each channel, rounded, then added in order.
      A ss[kRows];
      for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < K; ++k) sq[j * K + k] = widen<S>(a0[j * ld + k]);
      row_dots(a0, ld, sq.data(), K, K, n, ss);
      for (int64_t j = 0; j < n; ++j) {
        const S* ar = a0 + j * ld;
        A* o = out + (bh * T + t0 + j) * K;
        const A iv = A(1) / std::sqrt(ss[j] + eps);
        inv[bh * T + t0 + j] = iv;
        for (int64_t k = 0; k < K; ++k) o[k] = round_trip<S>(widen<S>(ar[k]) * iv);
        if (s.scale != 1.0)
          for (int64_t k = 0; k < K; ++k) o[k] = o[k] * scale;
      }
    }
  }
}

// With n = a inv, inv = (sum a^2 + eps)^(-1/2): dn/da_m = inv e_m - a inv^3 a_m, so
// da = inv dn - a (inv^3 <a, dn>).
template <class S>
PARITY_INLINE void heads_bwd(const HeadsShape& s, const S* a, const Acc<S>* inv,
                             const Acc<S>* dout, S* da, int64_t bh0, int64_t bh1) {
  using A = Acc<S>;
  const int64_t T = s.T, K = s.K, ld = s.H * s.K;
  const A scale = A(s.scale);
  std::vector<A> dn(kRows * K);
  for (int64_t bh = bh0; bh < bh1; ++bh) {
    for (int64_t t0 = 0; t0 < T; t0 += kRows) {
      const int64_t n = std::min(kRows, T - t0);
      for (int64_t j = 0; j < n; ++j) {
        const A* dor = dout + (bh * T + t0 + j) * K;
        for (int64_t k = 0; k < K; ++k)
          dn[j * K + k] = s.scale != 1.0 ? dor[k] * scale : dor[k];
      }
      S* da0 = head_row(s, da, bh, t0);
      if (!s.l2) {
        for (int64_t j = 0; j < n; ++j)
          for (int64_t k = 0; k < K; ++k) da0[j * ld + k] = narrow<S>(dn[j * K + k]);
        continue;
      }
      const S* a0 = head_row(s, a, bh, t0);
      A dot[kRows];
      row_dots(a0, ld, dn.data(), K, K, n, dot);
      for (int64_t j = 0; j < n; ++j) {
        const S* ar = a0 + j * ld;
        const A* dnr = dn.data() + j * K;
        const A iv = inv[bh * T + t0 + j];
        const A c = iv * iv * iv * dot[j];
        for (int64_t k = 0; k < K; ++k)
          da0[j * ld + k] = narrow<S>(iv * dnr[k] - widen<S>(ar[k]) * c);
      }
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
