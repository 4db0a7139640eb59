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

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

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
// Forward, one tile of NV vectors of value columns starting at j0, all tokens. A token's lines:
//   S' = diag(a) S;  w = S'^T k;  r = v - w;  u = beta r;  S = S' + k u^T;  o = S^T q
// with the sums over key channels (w, o) in row order. The state is swept once a token, not
// twice: the sweep of token t makes row i of S and o's term, then, while the row is in
// registers, row i of token t+1's S' and w's term (they need no other row). The same
// operations and the same order as two sweeps, so the same bits, with half the state's loads
// and stores (the sweep is bound by its multiplies now: about 1.5x faster).
template <class E, int NV>
PARITY_INLINE void forward_tile(const Shape& s, int64_t Kp, int64_t Vp, int64_t j0,
                                const E* q, const E* k, const E* a, const E* vpad,
                                const E* beta, E* S, E* opad, E* states, E* r) {
  constexpr int W = kLanes<E>;
  const int64_t K = s.K, T = s.T;
  // The state entering token t (t a multiple of the interval), rows of the full width.
  const auto snapshot = [&](int64_t t) PARITY_INLINE_LAMBDA -> E* {
    if (states == nullptr || t % s.chunk != 0 || t >= T) return nullptr;
    E* dst = states + (t / s.chunk) * Kp * Vp + j0;
    for (int64_t i = K; i < Kp; ++i) std::fill(dst + i * Vp, dst + i * Vp + NV * W, E(0));
    return dst;
  };
  if (E* dst = snapshot(0))
    for (int64_t i = 0; i < K; ++i) std::fill(dst + i * Vp, dst + i * Vp + NV * W, E(0));
  // Token 0's S' = diag(a) 0 and w = S'^T k, as the sweep below makes them for later tokens.
  Vec<E> w[NV];
  for (int c = 0; c < NV; ++c) w[c] = zeros<E>();
  for (int64_t i = 0; i < K; ++i)
    for (int c = 0; c < NV; ++c) {
      const Vec<E> x = zeros<E>() * a[i];
      store(S + i * NV * W + c * W, x);
      w[c] += x * k[i];
    }
  for (int64_t t = 0; t < T; ++t) {
    Vec<E> u[NV], o[NV];
    for (int c = 0; c < NV; ++c) {  // r = v - w;  u = beta r
      const Vec<E> rr = load(vpad + t * Vp + j0 + c * W) - w[c];
      if (r != nullptr) store(r + t * Vp + j0 + c * W, rr);
      u[c] = rr * beta[t];
      o[c] = zeros<E>();
      w[c] = zeros<E>();
    }
    E* const snap = snapshot(t + 1);
    const E* kt = k + t * K;
    const E* qt = q + t * K;
    const auto sweep = [&](auto more) PARITY_INLINE_LAMBDA {
      const E* an = a + (t + 1) * K;  // token t+1's decay and key, read when `more`
      const E* kn = k + (t + 1) * K;
      for (int64_t i = 0; i < K; ++i) {
        E* row = S + i * NV * W;
        for (int c = 0; c < NV; ++c) {
          const Vec<E> x = load(row + c * W) + u[c] * kt[i];  // S = S' + k u^T
          if (snap != nullptr) store(snap + i * Vp + c * W, x);
          o[c] += x * qt[i];                                    // o = S^T q
          if constexpr (decltype(more)::value) {
            const Vec<E> y = x * an[i];                         // next S' = diag(a) S
            store(row + c * W, y);
            w[c] += y * kn[i];                                  // next w = S'^T k
          }
        }
      }
    };
    if (t + 1 < T)
      sweep(std::true_type{});
    else
      sweep(std::false_type{});
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

// ---------------------------------------------------------------------------------------
// The chunked backward: the same gradients as backward_impl, from the chunked form of the
// recurrence (docs/design.md [Note: chunked kda]) instead of its per-token adjoint. Per chunk
// of C tokens (the saved states' interval), S0 the state entering it, G the in-chunk
// cumulative sum of g, Gam = exp(G), D_t = exp(G_last - G_t), E_ti = exp(G_t - G_i) (i <= t;
// every one <= 1 where g <= 0; each formed as the product of the tokens' decays a = exp(g)
// it spans, in token order: one exp per token and key channel instead of one per pair, and
// no cancellation in G_t - G_i), and U the rows u_t = beta_t r_t the forward made:
//   A[t,i] = sum_k k_t k_i E_ti (i < t)      P[t,i] = sum_k q_t k_i E_ti (i <= t)
//   X = R + A U  (= V - (K Gam) S0)          (I + diag(beta) A) U = beta X
//   O = (Q Gam) S0 + P U                     S_last = diag(Gam_last) S0 + (K D)^T U
// Given dO and dS (the gradient of S_last), the adjoint, line by line:
//   dU  = (K D) dS + P^T dO                  dY solves (I + diag(beta) A)^T dY = dU
//   dL[t,i] = -dY_t . U_i (i < t):           dbeta_t = dY_t . X_t + sum_i dL[t,i] A[t,i],
//                                            dA[t,i] = beta_t dL[t,i]
//   dX = beta dY (= dV)                      dP[t,i] = dO_t . U_i (i <= t)
//   dS0 = (Q Gam)^T dO - (K Gam)^T dX + diag(Gam_last) dS    (the next chunk's dS)
//   d(Q Gam) = dO S0^T    d(K Gam) = -dX S0^T    d(K D) = U dS^T
// then through the element-wise products to q, k and G (Gam' = Gam, D' = -D, E' by its two
// ends), and dg_t = sum over the chunk's tokens s >= t of dG_s. The products over value
// columns are row dots (vector partial sums over the columns in order, then the fixed lane
// tree); the products into value columns run each output column's sum in the order written.
// Per state element and token that is 6 multiplies and 6 adds, against the adjoint's 11 and 9.

// The partial sums of x . y over n columns (whole vectors): one vector, lane l holding the
// columns l, l + W, ... in order.
template <class E>
PARITY_INLINE Vec<E> dot_lanes(const E* x, const E* y, int64_t n) {
  Vec<E> acc = zeros<E>();
  for (int64_t c = 0; c < n; c += kLanes<E>) acc += load(x + c) * load(y + c);
  return acc;
}

// out[j] = the sum of parts' vector j by the fixed lane tree, for j < n, W vectors at a time
// (lane_sums). parts holds round_up(n, W) vectors; those past n are zeroed here.
template <class E>
PARITY_INLINE void lane_sums_n(E* parts, int64_t n, E* out) {
  constexpr int W = kLanes<E>;
  for (int64_t j = n; j < round_up(n, W); ++j) store(parts + j * W, zeros<E>());
  for (int64_t g0 = 0; g0 < n; g0 += W) {
    alignas(64) E sums[W];
    store(sums, lane_sums<E>(parts + g0 * W));
    for (int64_t j = g0; j < std::min(n, g0 + W); ++j) out[j] = sums[j - g0];
  }
}

// out[c][0:n) += decay[c] * state[c][0:n) for the rows c in [0, rows): the diag(Gam_last)
// term of the chunked form, in the state's recompute and in its gradient's carry.
template <class E>
PARITY_INLINE void add_decayed_rows(const E* decay, const E* state, int64_t rows, int64_t n,
                                    E* out) {
  for (int64_t c = 0; c < rows; ++c) {
    const E d = decay[c];
    for (int64_t v = 0; v < n; ++v) out[c * n + v] += d * state[c * n + v];
  }
}

// out[o][0:n) (+)= sum_j coef(o, j) * B[j][0:n) for the rows o in [o0, o1), j in [j0, j1) in
// j order; n whole vectors, rows ldo apart. Up to four rows by four vectors at a time stay in
// registers over the whole sum (each B vector loaded once for the four rows); the blocking
// changes no output's order.
template <class E, class Coef>
PARITY_INLINE void rows_combination(int64_t o0, int64_t o1, int64_t n, const E* B, int64_t ldb,
                                    int64_t j0, int64_t j1, const Coef& coef, E* out,
                                    int64_t ldo, bool add) {
  constexpr int W = kLanes<E>;
  const auto block = [&](int64_t ob, int64_t c0, auto rows, auto nv) PARITY_INLINE_LAMBDA {
    constexpr int R = decltype(rows)::value, NV = decltype(nv)::value;
    Vec<E> acc[R][NV];
    for (int y = 0; y < R; ++y)
      for (int x = 0; x < NV; ++x)
        acc[y][x] = add ? load(out + (ob + y) * ldo + c0 + x * W) : zeros<E>();
    for (int64_t j = j0; j < j1; ++j) {
      Vec<E> b[NV];
      for (int x = 0; x < NV; ++x) b[x] = load(B + j * ldb + c0 + x * W);
      for (int y = 0; y < R; ++y) {
        const E c = coef(ob + y, j);
        for (int x = 0; x < NV; ++x) acc[y][x] += b[x] * c;
      }
    }
    for (int y = 0; y < R; ++y)
      for (int x = 0; x < NV; ++x) store(out + (ob + y) * ldo + c0 + x * W, acc[y][x]);
  };
  const auto widths = [&](int64_t ob, auto rows) PARITY_INLINE_LAMBDA {
    for (int64_t c0 = 0; c0 < n; c0 += 4 * W) switch (std::min<int64_t>(4, (n - c0) / W)) {
        case 4: block(ob, c0, rows, std::integral_constant<int, 4>{}); break;
        case 3: block(ob, c0, rows, std::integral_constant<int, 3>{}); break;
        case 2: block(ob, c0, rows, std::integral_constant<int, 2>{}); break;
        default: block(ob, c0, rows, std::integral_constant<int, 1>{}); break;
      }
  };
  int64_t ob = o0;
  for (; ob + 4 <= o1; ob += 4) widths(ob, std::integral_constant<int, 4>{});
  for (; ob < o1; ++ob) widths(ob, std::integral_constant<int, 1>{});
}

// dst [n][m] = src [m][n]^T, m and n whole vectors, by W x W blocks transposed in registers.
template <class E>
PARITY_INLINE void transpose_to(const E* src, int64_t m, int64_t n, E* dst) {
  constexpr int W = kLanes<E>;
  for (int64_t i = 0; i < m; i += W)
    for (int64_t j = 0; j < n; j += W) {
      Vec<E> blk[W];
      for (int x = 0; x < W; ++x) blk[x] = load(src + (i + x) * n + j);
      transpose<E>(blk);
      for (int x = 0; x < W; ++x) store(dst + (j + x) * m + i, blk[x]);
    }
}

// out = x y element-wise over n values (restrict: the arena's arrays never overlap, which
// lets the loops here vectorise).
template <class E>
PARITY_INLINE void times_elementwise(int64_t n, const E* __restrict x, const E* __restrict y,
                                     E* __restrict out) {
  for (int64_t c = 0; c < n; ++c) out[c] = x[c] * y[c];
}

// One token's row: Gam = Gam_prev a (its decay a itself for the chunk's first token), Q Gam
// and K Gam.
template <class E>
PARITY_INLINE void decay_row(int64_t n, const E* __restrict gamprev, const E* __restrict a,
                             const E* __restrict q, const E* __restrict k, E* __restrict gam,
                             E* __restrict qg, E* __restrict kg) {
  for (int64_t c = 0; c < n; ++c) {
    gam[c] = gamprev == nullptr ? a[c] : gamprev[c] * a[c];
    qg[c] = q[c] * gam[c];
    kg[c] = k[c] * gam[c];
  }
}

// Denormal inputs read as zero and denormal results flushed to zero (MXCSR's DAZ and FTZ) on
// this thread while it lives. The chunked backward's decays exp(G) reach far below fp32's
// normal range on the model's gates (g down to about -30 a token, summed over a chunk), and
// every operation on a denormal costs a microcode assist; a value below 2^-126 contributes
// nothing its sums can show. Deterministic on every x86-64 core.
class FlushDenormals {
 public:
#if defined(__SSE2__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~FlushDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

template <class E>
PARITY_INLINE void backward_chunked_impl(const Shape& s, const E* q, const E* k, const E* a,
                                         const E* beta, const E* states, const E* r,
                                         const E* dout, E* dq, E* dk, E* dv, E* dg, E* dbeta) {
  constexpr int W = kLanes<E>;
  const FlushDenormals flush;
  // Cs: the saved states' interval; C: the chunk the form runs in (its pairwise terms grow
  // with C, its per-chunk work shrinks: 16 is the least work at K = V = 128).
  const int64_t T = s.T, K = s.K, V = s.V, Cs = s.chunk, C = std::min<int64_t>(Cs, 16);
  const int64_t Kp = round_up(K, W), Vp = round_up(V, W), NS = (T + Cs - 1) / Cs;
  const int64_t n_sub = (std::min(Cs, T) + C - 1) / C - 1;  // recomputed states per interval
  const PaddedRows<E, 3, 3> keys(T, K, Kp, {q, k, a}, {dq, dk, dg}, false);
  const PaddedRows<E, 1, 1> values(T, V, Vp, {dout}, {dv}, false);
  const E *qp = keys.in(0), *kp = keys.in(1), *ap = keys.in(2), *dop = values.in(0);
  E *dqp = keys.out(0), *dkp = keys.out(1), *dgp = keys.out(2), *dvp = values.out(0);
  const int64_t CK = C * Kp, CV = C * Vp, KV = Kp * Vp;
  // The chunk's working arrays, carved from one buffer per thread that later calls reuse (a
  // fresh zeroed allocation per (row, head) cost more than the arithmetic). Each array is a
  // whole number of vectors, so every one starts on a 64-byte boundary.
  thread_local Scratch<E> arena;
  const int64_t need = 12 * CK + C * (C + 1) / 2 * Kp + 4 * round_up(C * C, W) + 5 * CV +
                       4 * KV + 2 * round_up(C, W) * W + round_up(C, W) + n_sub * KV;
  if (static_cast<int64_t>(arena.size()) < need) arena.resize(static_cast<size_t>(need));
  E* next = arena.data();
  const auto take = [&](int64_t n) PARITY_INLINE_LAMBDA {
    E* p = next;
    next += round_up(n, W);
    return p;
  };
  E *Gam = take(CK), *Qg = take(CK), *Kg = take(CK), *Dd = take(CK),
    *Kd = take(CK), *Ep = take(C * (C + 1) / 2 * Kp), *A = take(C * C), *P = take(C * C),
    *dP = take(C * C), *dA = take(C * C), *U = take(CV), *X = take(CV), *dU = take(CV),
    *dY = take(CV), *dX = take(CV), *dS = take(KV), *dS0 = take(KV), *S0T = take(KV),
    *dST = take(KV), *dQg = take(CK), *dKg = take(CK), *dKd = take(CK), *dQ = take(CK),
    *dK = take(CK), *dG = take(CK), *partsA = take(round_up(C, W) * W),
    *partsB = take(round_up(C, W) * W), *rowsum = take(C), *Sub = take(n_sub * KV);
  std::fill(dS, dS + KV, E(0));
  const auto pair = [](int64_t t, int64_t i) PARITY_INLINE_LAMBDA { return (t * (t + 1) / 2 + i); };
  // a, Gam, Q Gam, K Gam, D and K D of the Cn tokens from t0. Gam and D as products of the
  // tokens' decays a (D_t = a_{t+1} D_{t+1}, from D_last = 1).
  const auto decays = [&](const int64_t t0, const int64_t Cn) PARITY_INLINE_LAMBDA {
    const int64_t L = Cn - 1;
    const E *qc = qp + t0 * Kp, *kc = kp + t0 * Kp, *ac = ap + t0 * Kp;
    for (int64_t t = 0; t < Cn; ++t) {
      const int64_t at = t * Kp;
      decay_row<E>(Kp, t == 0 ? nullptr : Gam + at - Kp, ac + at, qc + at, kc + at, Gam + at,
                   Qg + at, Kg + at);
    }
    std::fill(Dd + L * Kp, Dd + Cn * Kp, E(1));
    for (int64_t t = L - 1; t >= 0; --t)
      times_elementwise<E>(Kp, ac + (t + 1) * Kp, Dd + (t + 1) * Kp, Dd + t * Kp);
    for (int64_t at = 0; at < Cn * Kp; at += W) store(Kd + at, load(kc + at) * load(Dd + at));
  };
  // One chunk of Cn tokens from t0, S0 the state entering it; dS the gradient of the state
  // it leaves, replaced by the gradient of S0.
  const auto chunk = [&](const int64_t t0, const int64_t Cn, const E* S0) PARITY_INLINE_LAMBDA {
    const int64_t L = Cn - 1;
    // The next chunk's rows (the forward wrote them long before): ask for them now, so that
    // their reads find them in L2.
    constexpr int64_t kLine = 64 / int64_t(sizeof(E));
    if (t0 > 0) {
      for (int64_t at = (t0 - C) * Kp; at < t0 * Kp; at += kLine) {
        __builtin_prefetch(qp + at, 0, 2);
        __builtin_prefetch(kp + at, 0, 2);
        __builtin_prefetch(ap + at, 0, 2);
      }
      for (int64_t at = (t0 - C) * Vp; at < t0 * Vp; at += kLine) {
        __builtin_prefetch(r + at, 0, 2);
        __builtin_prefetch(dop + at, 0, 2);
      }
    }
    const E *qc = qp + t0 * Kp, *kc = kp + t0 * Kp, *ac = ap + t0 * Kp, *rc = r + t0 * Vp,
            *doc = dop + t0 * Vp, *bc = beta + t0;
    decays(t0, Cn);
    // E, A and P over the pairs i <= t (E = 1 on the diagonal, where A is zero), each row t's
    // sums over key channels finished together. E's row t is row t-1 times a_t, and a_t
    // (E_{t,t-1}): E_ti = a_{i+1} ... a_t, multiplied in token order.
    for (int64_t t = 0; t < Cn; ++t) {
      const E *qt = qc + t * Kp, *kt = kc + t * Kp;
      if (t > 0) {
        E* row = &Ep[pair(t, 0) * Kp];
        for (int64_t i = 0; i + 1 < t; ++i)
          times_elementwise<E>(Kp, &Ep[pair(t - 1, i) * Kp], ac + t * Kp, row + i * Kp);
        std::memcpy(row + (t - 1) * Kp, ac + t * Kp, sizeof(E) * Kp);
      }
      for (int64_t i = 0; i < t; ++i) {
        E* e = &Ep[pair(t, i) * Kp];
        const E* ki = kc + i * Kp;
        Vec<E> ap = zeros<E>(), pp = zeros<E>();
        for (int64_t c = 0; c < Kp; c += W) {
          const Vec<E> kie = load(ki + c) * load(e + c);
          ap += load(kt + c) * kie;
          pp += load(qt + c) * kie;
        }
        store(partsA + i * W, ap);
        store(partsB + i * W, pp);
      }
      store(partsA + t * W, zeros<E>());
      store(partsB + t * W, dot_lanes(qt, kt, Kp));
      lane_sums_n(partsA, t + 1, &A[t * C]);
      lane_sums_n(partsB, t + 1, &P[t * C]);
    }
    for (int64_t t = 0; t < Cn; ++t)
      for (int64_t c = 0; c < Vp; ++c) U[t * Vp + c] = rc[t * Vp + c] * bc[t];
    // dU = (K D) dS + P^T dO;  dY by back substitution;  X = R + A U.
    const auto kd = [&](int64_t t, int64_t c) PARITY_INLINE_LAMBDA { return Kd[t * Kp + c]; };
    rows_combination<E>(0, Cn, Vp, dS, Vp, 0, Kp, kd, dU, Vp, false);
    for (int64_t t = 0; t < Cn; ++t) {
      const auto pt = [&](int64_t, int64_t u) PARITY_INLINE_LAMBDA { return P[u * C + t]; };
      rows_combination<E>(t, t + 1, Vp, doc, Vp, t, Cn, pt, dU, Vp, true);
    }
    for (int64_t t = L; t >= 0; --t) {
      std::memcpy(&dY[t * Vp], &dU[t * Vp], sizeof(E) * Vp);
      const auto ba = [&](int64_t, int64_t u) PARITY_INLINE_LAMBDA {
        return -(bc[u] * A[u * C + t]);
      };
      rows_combination<E>(t, t + 1, Vp, dY, Vp, t + 1, Cn, ba, dY, Vp, true);
    }
    for (int64_t t = 0; t < Cn; ++t) {
      std::memcpy(&X[t * Vp], rc + t * Vp, sizeof(E) * Vp);
      const auto at = [&](int64_t, int64_t i) PARITY_INLINE_LAMBDA { return A[t * C + i]; };
      rows_combination<E>(t, t + 1, Vp, U, Vp, 0, t, at, X, Vp, true);
    }
    // dbeta, dA, dX = dV, dP.
    for (int64_t t = 0; t < Cn; ++t) {
      // dY_t . U_i for i < t and dY_t . X_t in slot t; dO_t . U_i for i <= t.
      for (int64_t i = 0; i < t; ++i) store(partsA + i * W, dot_lanes(&dY[t * Vp], &U[i * Vp], Vp));
      store(partsA + t * W, dot_lanes(&dY[t * Vp], &X[t * Vp], Vp));
      for (int64_t i = 0; i <= t; ++i)
        store(partsB + i * W, dot_lanes(doc + t * Vp, &U[i * Vp], Vp));
      lane_sums_n(partsA, t + 1, rowsum);
      lane_sums_n(partsB, t + 1, &dP[t * C]);
      E db = rowsum[t];
      for (int64_t i = 0; i < t; ++i) {
        const E dl = -rowsum[i];
        db += dl * A[t * C + i];
        dA[t * C + i] = bc[t] * dl;
      }
      dbeta[t0 + t] = db;
      for (int64_t c = 0; c < Vp; ++c) dX[t * Vp + c] = bc[t] * dY[t * Vp + c];
      std::memcpy(dvp + (t0 + t) * Vp, &dX[t * Vp], sizeof(E) * Vp);
    }
    // d(Q Gam) = dO S0^T, dX S0^T (= -d(K Gam)), d(K D) = U dS^T, over S0 and dS transposed.
    transpose_to(S0, Kp, Vp, S0T);
    transpose_to(dS, Kp, Vp, dST);
    // out [Cn, Kp] = a [Cn, Vp] times B [Vp, Kp].
    const auto times = [&](const E* a, const E* B, E* out) PARITY_INLINE_LAMBDA {
      rows_combination<E>(0, Cn, Kp, B, Kp, 0, Vp,
                          [&](int64_t t, int64_t v) PARITY_INLINE_LAMBDA { return a[t * Vp + v]; },
                          out, Kp, false);
    };
    times(doc, S0T, dQg);
    times(dX, S0T, dKg);
    times(U, dST, dKd);
    // dS0 = (Q Gam)^T dO - (K Gam)^T dX + diag(Gam_last) dS, by rows of key channels.
    const auto qg = [&](int64_t c, int64_t t) PARITY_INLINE_LAMBDA { return Qg[t * Kp + c]; };
    const auto nkg = [&](int64_t c, int64_t t) PARITY_INLINE_LAMBDA { return -Kg[t * Kp + c]; };
    rows_combination<E>(0, Kp, Vp, doc, Vp, 0, Cn, qg, dS0, Vp, false);
    rows_combination<E>(0, Kp, Vp, dX, Vp, 0, Cn, nkg, dS0, Vp, true);
    add_decayed_rows<E>(Gam + L * Kp, dS, Kp, Vp, dS0);
    // The key-side gradients of the element-wise products.
    // (D_last = 1: the last token's K D term enters its G with both signs and is left out.)
    for (int64_t t = 0; t < Cn; ++t)
      for (int64_t c = t * Kp; c < (t + 1) * Kp; c += W) {
        const Vec<E> dqg = load(dQg + c), dkg = load(dKg + c), dkd = load(dKd + c);
        store(dQ + c, dqg * load(Gam + c));
        store(dK + c, dkd * load(Dd + c) - dkg * load(Gam + c));
        const Vec<E> dgv = dqg * load(Qg + c) - dkg * load(Kg + c);
        store(dG + c, t < L ? dgv - dkd * load(Kd + c) : dgv);
      }
    for (int64_t c = 0; c < Kp; c += W) {
      Vec<E> last = load(dG + L * Kp + c);
      for (int64_t t = 0; t < L; ++t) last += load(dKd + t * Kp + c) * load(Kd + t * Kp + c);
      store(dG + L * Kp + c, last);
    }
    for (int64_t c0 = 0; c0 < Kp; c0 += W) {  // + Gam_last * rowsum(dS o S0)
      alignas(64) E parts[W * W];
      for (int x = 0; x < W; ++x) {
        Vec<E> acc = zeros<E>();
        for (int64_t v = 0; v < Vp; v += W)
          acc += load(&dS[(c0 + x) * Vp + v]) * load(S0 + (c0 + x) * Vp + v);
        store(parts + x * W, acc);
      }
      const Vec<E> sums = lane_sums<E>(parts);
      store(&dG[L * Kp + c0], load(&dG[L * Kp + c0]) + load(&Gam[L * Kp + c0]) * sums);
    }
    // The pairs: A's and P's gradients into q, k and G.
    for (int64_t t = 0; t < Cn; ++t)
      for (int64_t i = 0; i <= t; ++i) {
        const E cq = dP[t * C + i], ck = i < t ? dA[t * C + i] : E(0);
        const E *qt = qc + t * Kp, *kt = kc + t * Kp, *ki = kc + i * Kp, *e = &Ep[pair(t, i) * Kp];
        E *dqt = &dQ[t * Kp], *dkt = &dK[t * Kp], *dki = &dK[i * Kp], *dgt = &dG[t * Kp],
          *dgi = &dG[i * Kp];
        if (i == t) {
          for (int64_t c = 0; c < Kp; c += W) {
            store(dqt + c, load(dqt + c) + load(kt + c) * cq);
            store(dkt + c, load(dkt + c) + load(qt + c) * cq);
          }
          continue;
        }
        for (int64_t c = 0; c < Kp; c += W) {
          const Vec<E> kiv = load(ki + c), ev = load(e + c), kie = kiv * ev;
          store(dqt + c, load(dqt + c) + kie * cq);
          store(dkt + c, load(dkt + c) + kie * ck);
          const Vec<E> w = (load(kt + c) * ck + load(qt + c) * cq) * ev;
          store(dki + c, load(dki + c) + w);
          const Vec<E> x = w * kiv;
          store(dgt + c, load(dgt + c) + x);
          store(dgi + c, load(dgi + c) - x);
        }
      }
    // Out: dq, dk; dg_t = sum_{s >= t} dG_s.
    for (int64_t t = 0; t < Cn; ++t) {
      std::memcpy(dqp + (t0 + t) * Kp, &dQ[t * Kp], sizeof(E) * Kp);
      std::memcpy(dkp + (t0 + t) * Kp, &dK[t * Kp], sizeof(E) * Kp);
    }
    for (int64_t c = 0; c < Kp; c += W) {
      Vec<E> acc = zeros<E>();
      for (int64_t t = L; t >= 0; --t) {
        acc += load(dG + t * Kp + c);
        store(dgp + (t0 + t) * Kp + c, acc);
      }
    }
    std::swap(dS, dS0);
  };
  // The saved states' intervals, last to first; inside one, chunks of C tokens: the states
  // entering all but its first chunk are recomputed from the saved one by the chunked form
  // (S_next = diag(Gam_last) S0 + (K D)^T U), then the chunks run last to first.
  for (int64_t n = NS - 1; n >= 0; --n) {
    const int64_t s0 = n * Cs, len = std::min(Cs, T - s0), m = (len + C - 1) / C;
    const E* saved = states + n * KV;
    if (n > 0)  // the next interval's saved state, long written: into L2 now
      for (int64_t at = 0; at < KV; at += 64 / int64_t(sizeof(E)))
        __builtin_prefetch(saved - KV + at, 0, 2);
    for (int64_t j = 0; j + 1 < m; ++j) {
      const int64_t t0 = s0 + j * C;
      const E* from = j == 0 ? saved : Sub + (j - 1) * KV;
      E* to = Sub + j * KV;
      decays(t0, C);
      for (int64_t t = 0; t < C; ++t)
        for (int64_t c = 0; c < Vp; ++c) U[t * Vp + c] = r[(t0 + t) * Vp + c] * beta[t0 + t];
      const auto kd = [&](int64_t c, int64_t t) PARITY_INLINE_LAMBDA { return Kd[t * Kp + c]; };
      rows_combination<E>(0, Kp, Vp, U, Vp, 0, C, kd, to, Vp, false);
      add_decayed_rows<E>(Gam + (C - 1) * Kp, from, Kp, Vp, to);
    }
    for (int64_t j = m - 1; j >= 0; --j)
      chunk(s0 + j * C, std::min(C, len - j * C), j == 0 ? saved : Sub + (j - 1) * KV);
  }
  keys.finish();
  values.finish();
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

PARITY_CLONES void backward_chunked_f32(const Shape& s, const float* q, const float* k,
                                        const float* a, const float* beta, const float* states,
                                        const float* r, const float* dout, float* dq, float* dk,
                                        float* dv, float* dg, float* dbeta) {
  backward_chunked_impl<float>(s, q, k, a, beta, states, r, dout, dq, dk, dv, dg, dbeta);
}
PARITY_CLONES void backward_chunked_f64(const Shape& s, const double* q, const double* k,
                                        const double* a, const double* beta,
                                        const double* states, const double* r,
                                        const double* dout, double* dq, double* dk, double* dv,
                                        double* dg, double* dbeta) {
  backward_chunked_impl<double>(s, q, k, a, beta, states, r, dout, dq, dk, dv, dg, dbeta);
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

void backward_chunked(const Shape& s, const float* q, const float* k, const float* a,
                      const float* beta, const float* states, const float* r, const float* dout,
                      float* dq, float* dk, float* dv, float* dg, float* dbeta) {
  backward_chunked_f32(s, q, k, a, beta, states, r, dout, dq, dk, dv, dg, dbeta);
}
void backward_chunked(const Shape& s, const double* q, const double* k, const double* a,
                      const double* beta, const double* states, const double* r,
                      const double* dout, double* dq, double* dk, double* dv, double* dg,
                      double* dbeta) {
  backward_chunked_f64(s, q, k, a, beta, states, r, dout, dq, dk, dv, dg, dbeta);
}

}  // namespace parity::kernels::kda_core
