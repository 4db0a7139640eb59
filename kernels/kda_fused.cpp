// The fused KDA core (kda_fused.h). Built with -ffp-contract=off (kernels/CMakeLists.txt):
// every product and every sum rounds on its own, in every clone.
#include "kernels/kda_fused.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/loop_elems.h"

namespace parity::kernels::kda_core {
namespace {

using loop_elems::Scratch;

// A vector of E and the integer vector of its lane indices (for shuffles).
template <class E>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(64)));
  typedef int32_t index __attribute__((vector_size(64)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(64)));
  typedef int64_t index __attribute__((vector_size(64)));
};
template <class E>
using Vec = typename VecOf<E>::type;
template <class E>
constexpr int kLanes = 64 / sizeof(E);

template <class E>
PARITY_INLINE Vec<E> load(const E* p) {
  Vec<E> x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
template <class E>
PARITY_INLINE void store(E* p, Vec<E> x) {
  std::memcpy(p, &x, sizeof x);
}
template <class E>
PARITY_INLINE Vec<E> zeros() {
  return Vec<E>{};
}
// The lanes of a vector summed as a fixed pairwise tree: lane i plus lane i + W/2, then of
// those lane i plus lane i + W/4, and so on. lane_sums does it for W vectors at once (lane c
// of the result is vector c's sum): each level adds, for two vectors a and b, the first and
// second halves of every segment of 2S lanes (a segment being one vector's partial tree),
// a's results to the low half and b's to the high half.
// The lane of (a, b) whose pair sum lands in lane p (the pair's other lane is S further).
template <int W, int S>
constexpr int tree_source(int p) {
  return (p < W / 2 ? 0 : W) + p % (W / 2) / S * 2 * S + p % (W / 2) % S;
}
template <class E, int S, size_t... P>
PARITY_INLINE Vec<E> tree_level(Vec<E> a, Vec<E> b, std::index_sequence<P...>) {
  using Index = typename VecOf<E>::index;
  constexpr int W = kLanes<E>;
  return __builtin_shuffle(a, b, Index{tree_source<W, S>(P)...}) +
         __builtin_shuffle(a, b, Index{(tree_source<W, S>(P) + S)...});
}
template <class E, int S>
PARITY_INLINE void tree_levels(Vec<E>* x, int n) {
  for (int i = 0; i < n / 2; ++i)
    x[i] = tree_level<E, S>(x[2 * i], x[2 * i + 1], std::make_index_sequence<kLanes<E>>{});
  if constexpr (S > 1) tree_levels<E, S / 2>(x, n / 2);
}
template <class E>
PARITY_INLINE Vec<E> lane_sums(const E* parts) {
  constexpr int W = kLanes<E>;
  Vec<E> x[W];
  for (int c = 0; c < W; ++c) x[c] = load(parts + c * W);
  tree_levels<E, W / 2>(x, W);
  return x[0];
}

// A W x W block held as W row vectors, transposed in place. Level S swaps bit S of every
// element's row index with bit S of its column index: for rows a (bit S clear) and b (the
// row S further), the new a takes a's lane J where J has bit S clear and b's lane J - S
// where it is set; the new b takes a's lane J + S, or b's lane J. All levels make the
// transpose. Data movement only.
template <int W, int S>
constexpr int low_source(int j) {
  return (j & S) != 0 ? W + j - S : j;
}
template <int W, int S>
constexpr int high_source(int j) {
  return (j & S) != 0 ? W + j : j + S;
}
template <class E, int S, size_t... P>
PARITY_INLINE void transpose_level(Vec<E>* x, std::index_sequence<P...>) {
  using Index = typename VecOf<E>::index;
  constexpr int W = kLanes<E>;
  for (int i = 0; i < W; ++i) {
    if ((i & S) != 0) continue;
    const Vec<E> a = x[i], b = x[i + S];
    x[i] = __builtin_shuffle(a, b, Index{low_source<W, S>(P)...});
    x[i + S] = __builtin_shuffle(a, b, Index{high_source<W, S>(P)...});
  }
  if constexpr (S > 1) transpose_level<E, S / 2>(x, std::index_sequence<P...>{});
}
template <class E>
PARITY_INLINE void transpose(Vec<E>* rows) {
  transpose_level<E, kLanes<E> / 2>(rows, std::make_index_sequence<kLanes<E>>{});
}

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }


// Value columns per forward tile, in vectors: the tile's K rows of state stay in L1 while
// the whole sequence runs through it. Tiles are independent in the forward (no sum crosses
// value columns), so the width changes no bits there.
constexpr int kFwdTileVecs = 4;
// Value columns per backward tile: the sums over value channels (dq, dk, dg, dbeta) are
// taken per tile, in column order, and added to the total in tile order.
constexpr int64_t kBwdTileCols = 32;
static_assert(kBwdTileCols % 16 == 0, "lane_sums reads whole vectors of columns");

// ---------------------------------------------------------------------------------------
// Forward, one tile of NV vectors of value columns starting at j0, all tokens.
template <class E, int NV>
PARITY_INLINE void forward_tile(const Shape& s, int64_t Kp, int64_t Vp, int64_t j0,
                                const E* q, const E* k, const E* a, const E* vpad,
                                const E* beta, E* S, E* opad, E* states, E* r) {
  constexpr int W = kLanes<E>;
  const int64_t K = s.K;
  std::fill(S, S + K * NV * W, E(0));
  for (int64_t t = 0; t < s.T; ++t) {
    if (states != nullptr && t % s.chunk == 0) {  // the state entering chunk t / chunk
      E* dst = states + (t / s.chunk) * Kp * Vp + j0;
      for (int64_t i = 0; i < K; ++i) std::memcpy(dst + i * Vp, S + i * NV * W, sizeof(E) * NV * W);
      for (int64_t i = K; i < Kp; ++i) std::fill(dst + i * Vp, dst + i * Vp + NV * W, E(0));
    }
    const E* at = a + t * K;
    const E* kt = k + t * K;
    const E* qt = q + t * K;
    Vec<E> w[NV], u[NV], o[NV];
    for (int c = 0; c < NV; ++c) w[c] = zeros<E>();
    for (int64_t i = 0; i < K; ++i) {  // S' = diag(a) S;  w = S'^T k
      E* row = S + i * NV * W;
      for (int c = 0; c < NV; ++c) {
        const Vec<E> x = load(row + c * W) * at[i];
        store(row + c * W, x);
        w[c] += x * kt[i];
      }
    }
    for (int c = 0; c < NV; ++c) {  // r = v - w;  u = beta r
      const Vec<E> rr = load(vpad + t * Vp + j0 + c * W) - w[c];
      if (r != nullptr) store(r + t * Vp + j0 + c * W, rr);
      u[c] = rr * beta[t];
      o[c] = zeros<E>();
    }
    for (int64_t i = 0; i < K; ++i) {  // S = S' + k u^T;  o = S^T q
      E* row = S + i * NV * W;
      for (int c = 0; c < NV; ++c) {
        const Vec<E> x = load(row + c * W) + u[c] * kt[i];
        store(row + c * W, x);
        o[c] += x * qt[i];
      }
    }
    for (int c = 0; c < NV; ++c) store(opad + t * Vp + j0 + c * W, o[c]);
  }
}

// Row-major [T, X] operands seen as [T, Xp], Xp = X rounded up to whole vectors. When X is
// whole vectors they are used where they are; otherwise through copies padded with zero
// columns: the inputs are copied in here, and finish() copies the outputs back. The outputs
// start at zero when `zeroed` asks for it (a padded output always does).
template <class E, size_t NI, size_t NO>
class PaddedRows {
 public:
  PaddedRows(int64_t T, int64_t X, int64_t Xp, const std::array<const E*, NI>& in,
             const std::array<E*, NO>& out, bool zeroed)
      : T_(T), X_(X), Xp_(Xp), whole_(X == Xp), pads_(whole_ ? 0 : (NI + NO) * T * Xp, E(0)),
        in_(in), out_(out), orig_(out) {
    if (whole_) {
      if (zeroed)
        for (E* d : out_) std::fill(d, d + T * X, E(0));
      return;
    }
    for (size_t i = 0; i < NI; ++i) {
      E* dst = pads_.data() + i * T * Xp;
      for (int64_t t = 0; t < T; ++t) std::memcpy(dst + t * Xp, in[i] + t * X, sizeof(E) * X);
      in_[i] = dst;
    }
    for (size_t j = 0; j < NO; ++j) out_[j] = pads_.data() + (NI + j) * T * Xp;
  }
  const E* in(size_t i) const { return in_[i]; }
  E* out(size_t j) const { return out_[j]; }
  void finish() const {
    if (whole_) return;
    for (size_t j = 0; j < NO; ++j)
      for (int64_t t = 0; t < T_; ++t)
        std::memcpy(orig_[j] + t * X_, out_[j] + t * Xp_, sizeof(E) * X_);
  }

 private:
  int64_t T_, X_, Xp_;
  bool whole_;
  Scratch<E> pads_;
  std::array<const E*, NI> in_;
  std::array<E*, NO> out_, orig_;
};

template <class E>
PARITY_INLINE void forward_impl(const Shape& s, const E* q, const E* k, const E* v, const E* g,
                                const E* beta, E* o, E* states, E* r, E* a) {
  constexpr int W = kLanes<E>;
  const int64_t T = s.T, K = s.K, V = s.V, Kp = round_up(K, W), Vp = round_up(V, W);
  // v and o seen with Vp columns.
  const PaddedRows<E, 1, 1> rows(T, V, Vp, {v}, {o}, false);
  const E* vpad = rows.in(0);
  E* opad = rows.out(0);
  Scratch<E> S(K * kFwdTileVecs * W);
  for (int64_t i = 0; i < T * K; ++i) a[i] = loop_elems::fixed_exp(g[i]);
  for (int64_t j0 = 0; j0 < Vp; j0 += kFwdTileVecs * W) {
    const auto tile = [&](auto nv) PARITY_INLINE_LAMBDA {
      forward_tile<E, decltype(nv)::value>(s, Kp, Vp, j0, q, k, a, vpad, beta, S.data(), opad,
                                           states, r);
    };
    switch (std::min<int64_t>(kFwdTileVecs, (Vp - j0) / W)) {
      case 4: tile(std::integral_constant<int, 4>{}); break;
      case 3: tile(std::integral_constant<int, 3>{}); break;
      case 2: tile(std::integral_constant<int, 2>{}); break;
      default: tile(std::integral_constant<int, 1>{}); break;
    }
  }
  rows.finish();
}

// ---------------------------------------------------------------------------------------
// Backward. With G the gradient w.r.t. the state after token t (zero after the last token)
// and do_t the output's, the adjoint of the forward lines, last to first:
//   o = S^T q:         G += q do^T;            dq = S do
//   S = S' + k u^T:    dk = G u;               du = G^T k         (G is now dS')
//   u = beta r:        dbeta = du . r;         dv = beta du;      dw = -beta du
//   w = S'^T k:        G += k dw^T;            dk += S' dw
//   S' = diag(a) S:    dg = rowsum(G o S')  (da a);                G = diag(a) G
// The state tile is held by columns (each column a run of Kp key channels), so the sums
// over key channels (du) are vector sums plus one lane tree per column, and the sums over
// value columns (dq, dk, dg) are vector sums in column order.
template <class E>
PARITY_INLINE void backward_impl(const Shape& s, const E* q, const E* k, const E* a,
                                 const E* beta, const E* states, const E* r, const E* dout,
                                 E* dq, E* dk, E* dv, E* dg, E* dbeta) {
  constexpr int W = kLanes<E>;
  const int64_t T = s.T, K = s.K, V = s.V, C = s.chunk;
  const int64_t Kp = round_up(K, W), Vp = round_up(V, W), NB = Kp / W, NC = (T + C - 1) / C;
  const int64_t VT = kBwdTileCols;
  // The key-side inputs and gradients seen with Kp channels (padded state rows then stay
  // zero); the gradients accumulate from zero.
  const PaddedRows<E, 3, 3> rows(T, K, Kp, {q, k, a}, {dq, dk, dg}, true);
  const E *qp = rows.in(0), *kp = rows.in(1), *ap = rows.in(2);
  E *dqp = rows.out(0), *dkp = rows.out(1), *dgp = rows.out(2);
  std::fill(dbeta, dbeta + T, E(0));
  // du_part holds one vector of partial sums per column; du_col their lane sums (a last
  // tile narrower than VT sums stale columns past nc too, and never reads them).
  Scratch<E> cur(VT * Kp), G(VT * Kp), Sp(C * VT * Kp), uu(VT), dw(VT), du_part(VT * W, E(0)),
      du_col(VT);

  for (int64_t j0 = 0; j0 < V; j0 += VT) {
    const int64_t nc = std::min(VT, V - j0);
    std::fill(G.begin(), G.end(), E(0));
    for (int64_t n = NC - 1; n >= 0; --n) {
      const int64_t t0 = n * C, t1 = std::min(T, t0 + C);
      // The state entering the chunk, by columns; then S' of every token of the chunk,
      // recomputed with the forward's own operations (same bits).
      const E* st = states + n * Kp * Vp + j0;
      // By W x W blocks, each transposed in registers. The columns past nc up to a whole
      // vector are inside the saved buffer (its rows are Vp wide) and inside cur (VT is a
      // multiple of W); nothing reads them.
      for (int64_t jj = 0; jj < nc; jj += W)
        for (int64_t i = 0; i < Kp; i += W) {
          Vec<E> blk[W];
          for (int x = 0; x < W; ++x) blk[x] = load(st + (i + x) * Vp + jj);
          transpose<E>(blk);
          for (int x = 0; x < W; ++x) store(&cur[(jj + x) * Kp + i], blk[x]);
        }
      // The states were written by the forward long before and are no longer in cache:
      // ask for the next chunk's now, so that its reads above find them in L2.
      if (n > 0)
        for (int64_t i = 0; i < Kp; ++i)
          for (int64_t jj = 0; jj < nc; jj += 64 / int64_t(sizeof(E)))
            __builtin_prefetch(st - Kp * Vp + i * Vp + jj, 0, 2);
      for (int64_t t = t0; t < t1; ++t) {
        E* sp = &Sp[(t - t0) * VT * Kp];
        for (int64_t jj = 0; jj < nc; ++jj) {
          const E uj = r[t * Vp + j0 + jj] * beta[t];
          for (int64_t b = 0; b < NB; ++b) {
            const Vec<E> x = load(&cur[jj * Kp + b * W]) * load(&ap[t * Kp + b * W]);
            store(sp + jj * Kp + b * W, x);
            store(&cur[jj * Kp + b * W], x + load(&kp[t * Kp + b * W]) * uj);
          }
        }
      }
      for (int64_t t = t1 - 1; t >= t0; --t) {
        const E* sp = &Sp[(t - t0) * VT * Kp];
        const E* dot = dout + t * V + j0;
        for (int64_t jj = 0; jj < nc; ++jj) {
          uu[jj] = r[t * Vp + j0 + jj] * beta[t];
          store(&du_part[jj * W], zeros<E>());
        }
        // G += q do^T; dq += S do; dk += G u; du = G^T k (by vector blocks of key channels,
        // two blocks per pass over the columns so that four sums are in flight; each block's
        // sums run over the columns in order, as with one block per pass)
        const auto pass1 = [&](int64_t b, auto blocks) PARITY_INLINE_LAMBDA {
          constexpr int R = decltype(blocks)::value;
          Vec<E> kb[R], qb[R], dq_acc[R], dk_acc[R];
          for (int x = 0; x < R; ++x) {
            kb[x] = load(&kp[t * Kp + (b + x) * W]);
            qb[x] = load(&qp[t * Kp + (b + x) * W]);
            dq_acc[x] = zeros<E>();
            dk_acc[x] = zeros<E>();
          }
          for (int64_t jj = 0; jj < nc; ++jj) {
            Vec<E> du = load(&du_part[jj * W]);
            for (int x = 0; x < R; ++x) {
              const int64_t at = jj * Kp + (b + x) * W;
              const Vec<E> St = load(sp + at) + kb[x] * uu[jj];
              const Vec<E> Gv = load(&G[at]) + qb[x] * dot[jj];
              store(&G[at], Gv);
              dq_acc[x] += St * dot[jj];
              dk_acc[x] += Gv * uu[jj];
              du += Gv * kb[x];
            }
            store(&du_part[jj * W], du);
          }
          for (int x = 0; x < R; ++x) {
            const int64_t at = t * Kp + (b + x) * W;
            store(&dqp[at], load(&dqp[at]) + dq_acc[x]);
            store(&dkp[at], load(&dkp[at]) + dk_acc[x]);
          }
        };
        int64_t b1 = 0;
        for (; b1 + 2 <= NB; b1 += 2) pass1(b1, std::integral_constant<int, 2>{});
        if (b1 < NB) pass1(b1, std::integral_constant<int, 1>{});
        for (int64_t c0 = 0; c0 < nc; c0 += W) store(&du_col[c0], lane_sums<E>(&du_part[c0 * W]));
        E dbeta_acc = 0;
        for (int64_t jj = 0; jj < nc; ++jj) {
          const E du = du_col[jj];
          dv[t * V + j0 + jj] = beta[t] * du;
          dw[jj] = -(beta[t] * du);
          dbeta_acc += du * r[t * Vp + j0 + jj];
        }
        dbeta[t] += dbeta_acc;
        // G += k dw^T; dk += S' dw; dg = rowsum(G o S'); G = diag(a) G (two blocks a pass)
        const auto pass2 = [&](int64_t b, auto blocks) PARITY_INLINE_LAMBDA {
          constexpr int R = decltype(blocks)::value;
          Vec<E> kb[R], ab[R], dk_acc[R], dg_acc[R];
          for (int x = 0; x < R; ++x) {
            kb[x] = load(&kp[t * Kp + (b + x) * W]);
            ab[x] = load(&ap[t * Kp + (b + x) * W]);
            dk_acc[x] = zeros<E>();
            dg_acc[x] = zeros<E>();
          }
          for (int64_t jj = 0; jj < nc; ++jj)
            for (int x = 0; x < R; ++x) {
              const int64_t at = jj * Kp + (b + x) * W;
              const Vec<E> spv = load(sp + at);
              const Vec<E> Gv = load(&G[at]) + kb[x] * dw[jj];
              dk_acc[x] += spv * dw[jj];
              dg_acc[x] += Gv * spv;
              store(&G[at], Gv * ab[x]);
            }
          for (int x = 0; x < R; ++x) {
            const int64_t at = t * Kp + (b + x) * W;
            store(&dkp[at], load(&dkp[at]) + dk_acc[x]);
            store(&dgp[at], load(&dgp[at]) + dg_acc[x]);
          }
        };
        int64_t b2 = 0;
        for (; b2 + 2 <= NB; b2 += 2) pass2(b2, std::integral_constant<int, 2>{});
        if (b2 < NB) pass2(b2, std::integral_constant<int, 1>{});
      }
    }
  }
  rows.finish();
}

PARITY_CLONES void forward_f32(const Shape& s, const float* q, const float* k, const float* v,
                               const float* g, const float* beta, float* o, float* states,
                               float* r, float* a) {
  forward_impl<float>(s, q, k, v, g, beta, o, states, r, a);
}
PARITY_CLONES void forward_f64(const Shape& s, const double* q, const double* k,
                               const double* v, const double* g, const double* beta,
                               double* o, double* states, double* r, double* a) {
  forward_impl<double>(s, q, k, v, g, beta, o, states, r, a);
}
PARITY_CLONES void backward_f32(const Shape& s, const float* q, const float* k, const float* a,
                                const float* beta, const float* states, const float* r,
                                const float* dout, float* dq, float* dk, float* dv, float* dg,
                                float* dbeta) {
  backward_impl<float>(s, q, k, a, beta, states, r, dout, dq, dk, dv, dg, dbeta);
}
PARITY_CLONES void backward_f64(const Shape& s, const double* q, const double* k,
                                const double* a, const double* beta, const double* states,
                                const double* r, const double* dout, double* dq, double* dk,
                                double* dv, double* dg, double* dbeta) {
  backward_impl<double>(s, q, k, a, beta, states, r, dout, dq, dk, dv, dg, dbeta);
}

}  // namespace

int64_t padded(int64_t n, bool fp64) { return round_up(n, fp64 ? kLanes<double> : kLanes<float>); }

int64_t state_elems(const Shape& s, bool fp64) {
  return (s.T + s.chunk - 1) / s.chunk * padded(s.K, fp64) * padded(s.V, fp64);
}

void forward(const Shape& s, const float* q, const float* k, const float* v, const float* g,
             const float* beta, float* o, float* states, float* r, float* a) {
  forward_f32(s, q, k, v, g, beta, o, states, r, a);
}
void forward(const Shape& s, const double* q, const double* k, const double* v,
             const double* g, const double* beta, double* o, double* states, double* r,
             double* a) {
  forward_f64(s, q, k, v, g, beta, o, states, r, a);
}
void backward(const Shape& s, const float* q, const float* k, const float* a,
              const float* beta, const float* states, const float* r, const float* dout,
              float* dq, float* dk, float* dv, float* dg, float* dbeta) {
  backward_f32(s, q, k, a, beta, states, r, dout, dq, dk, dv, dg, dbeta);
}
void backward(const Shape& s, const double* q, const double* k, const double* a,
              const double* beta, const double* states, const double* r, const double* dout,
              double* dq, double* dk, double* dv, double* dg, double* dbeta) {
  backward_f64(s, q, k, a, beta, states, r, dout, dq, dk, dv, dg, dbeta);
}

}  // namespace parity::kernels::kda_core
