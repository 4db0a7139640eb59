#include "kernels/ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <optional>
#include <type_traits>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/glu_loops.h"
#include "kernels/loop_tensors.h"
#include "kernels/norm_loops.h"
#include "kernels/precision.h"
#include "kernels/threads.h"

namespace parity::kernels {

at::Tensor rms_norm_ops(const at::Tensor& x, const at::Tensor& w, double eps) {
  const auto acc = accum_dtype(x.scalar_type());
  auto xf = x.to(acc);
  auto normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * w;
}

namespace {

using namespace loop_tensors;

// norm_loops' RMSNorm as an autograd Function: x [N,D] and w [D] of one dtype.
struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in,
                            const at::Tensor& w_in, double eps) {
    auto x = x_in.contiguous(), w = w_in.contiguous();
    const int64_t D = x.size(-1), N = x.numel() / D;
    auto y = at::empty_like(x);
    auto r = at::empty({N}, x.options().dtype(accum_dtype(x.scalar_type())));
    on_loop_type(x.scalar_type(), "the RMSNorm loop", [&](auto tag) {
      using S = decltype(tag);
      parallel_for(0, N, 64, [&](int64_t n0, int64_t n1) {
        norm_loops::forward(D, elems<S>(x), elems<S>(w), eps, elems<S>(y),
                            r.data_ptr<Acc<S>>(), n0, n1);
      });
    });
    ctx->save_for_backward({x, w, r});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1], &r = saved[2];
    const int64_t D = x.size(-1), N = x.numel() / D;
    auto dy = grads[0].to(x.scalar_type()).contiguous();
    auto dx = at::empty_like(x), dw = at::empty_like(w);
    auto dw_rows = at::empty({N, D}, r.options());
    on_loop_type(x.scalar_type(), "the RMSNorm loop", [&](auto tag) {
      using S = decltype(tag);
      using A = Acc<S>;
      parallel_for(0, N, 64, [&](int64_t n0, int64_t n1) {
        norm_loops::backward(D, elems<S>(x), elems<S>(w), r.data_ptr<A>(), elems<S>(dy),
                             elems<S>(dx), dw_rows.data_ptr<A>(), n0, n1);
      });
      norm_loops::sum_rows(dw_rows.data_ptr<A>(), N, D, elems<S>(dw));
    });
    return {dx, dw, at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  const bool loop = x.is_cpu() && w.is_cpu() && loop_dtype(x.scalar_type()) &&
                    w.scalar_type() == x.scalar_type() && w.dim() == 1 && x.dim() >= 1 &&
                    x.size(-1) == w.size(0) && x.numel() > 0;
  return loop ? RmsNormFunction::apply(x, w, eps) : rms_norm_ops(x, w, eps);
}

namespace {

// The products run on fp32 operands (gemm::View, gemm::multiply) or on bf16 ones
// (gemm::View16, gemm::multiply_bf16), into fp32; a bf16 result is rounded to bf16 once, at
// the end. V names the operand kind throughout.
template <class V>
const auto* elements(const at::Tensor& t) {
  if constexpr (std::is_same_v<V, gemm::View16>)
    return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
  else
    return static_cast<const float*>(t.data_ptr<float>());
}

// Matrix `offset` elements into a tensor, with its last two dims' strides (transposed:
// swapped).
template <class V>
V matrix_view(const at::Tensor& t, int64_t offset = 0, bool transpose = false) {
  const int64_t rs = t.stride(-2), cs = t.stride(-1);
  return {elements<V>(t) + offset, transpose ? cs : rs, transpose ? rs : cs};
}
template <class V>
V transposed(const at::Tensor& t) {
  return matrix_view<V>(t, 0, true);
}

inline void multiply_one(gemm::Isa isa, int64_t M, int64_t N, int64_t K, gemm::View A,
                         gemm::View B, float* C, int64_t ldc, int64_t j0, int64_t j1) {
  gemm::multiply(isa, M, N, K, A, B, C, ldc, j0, j1);
}
inline void multiply_one(gemm::Isa, int64_t M, int64_t N, int64_t K, gemm::View16 A,
                         gemm::View16 B, float* C, int64_t ldc, int64_t j0, int64_t j1) {
  gemm::multiply_bf16(M, N, K, A, B, C, ldc, j0, j1);
}

// The instruction set a product's forward ran, kept for its backward (the same one, so both
// directions take the same path).
void save_isa(torch::autograd::AutogradContext* ctx, int64_t isa) { ctx->saved_data["isa"] = isa; }
gemm::Isa saved_isa(torch::autograd::AutogradContext* ctx) {
  return gemm::Isa(ctx->saved_data["isa"].toInt());
}

// One product of a group: C [M,N] (row stride ldc) = A [M,K] B [K,N].
template <class V>
struct Product {
  int64_t M, K;
  V A, B;
  float* C;
};

// Every product of `group` (each of N columns) with gemm::multiply, split between the
// intra-op threads by (product, block of rows, column panel) tasks: each element's chain
// stays on one task, so the split changes no bits. The threads get runs of consecutive tasks
// of equal multiply-add counts (not equal task counts: the routed experts' products differ in
// rows, and a product of one or three panels does not split evenly by panels). Rows are split
// only as far as that balance needs, since each block of rows packs B again. A thread's
// consecutive panels of one block of rows go to gemm::multiply in one call, which packs each
// block of A once for all of them (a call per panel packed it per panel: the n = 1024
// product ran at 150 GFLOP/s instead of 190). On one thread, or for less than a million
// multiply-adds in all, each product is one call.
template <class V>
void multiply_all(gemm::Isa isa, const std::vector<Product<V>>& group, int64_t N, int64_t ldc) {
  constexpr int64_t kPanel = gemm::kColumnAlign, kRowAlign = gemm::kRowAlign;
  const int64_t panels = (N + kPanel - 1) / kPanel, threads = parallel_threads();
  int64_t work = 0;
  for (const auto& p : group) work += p.M * p.K * N;
  if (threads <= 1 || work < (int64_t{1} << 20)) {
    for (const auto& p : group) multiply_one(isa, p.M, N, p.K, p.A, p.B, p.C, ldc, 0, N);
    return;
  }
  struct Task {
    int64_t g, r0, r1, panel;
  };
  std::vector<Task> tasks;
  std::vector<int64_t> start;  // multiply-adds before each task, then the total
  const int64_t cap = std::max<int64_t>(1, work / threads / 8);  // a task's largest share
  int64_t done = 0;
  for (int64_t g = 0; g < static_cast<int64_t>(group.size()); ++g) {
    const auto& p = group[g];
    if (p.M == 0) continue;
    const int64_t row_work = std::max<int64_t>(1, kPanel * p.K);
    const int64_t blocks = std::clamp<int64_t>((p.M * row_work + cap - 1) / cap, 1,
                                               (p.M + kRowAlign - 1) / kRowAlign);
    const int64_t rows = (p.M + blocks - 1) / blocks;
    const int64_t step = (rows + kRowAlign - 1) / kRowAlign * kRowAlign;
    for (int64_t r0 = 0; r0 < p.M; r0 += step)
      for (int64_t q = 0; q < panels; ++q) {
        tasks.push_back({g, r0, std::min(p.M, r0 + step), q});
        start.push_back(done);
        done += (tasks.back().r1 - r0) * std::min(kPanel, N - q * kPanel) * p.K;
      }
  }
  start.push_back(done);
  // Thread i runs the tasks that start in [i done / threads, (i + 1) done / threads).
  std::vector<size_t> first(static_cast<size_t>(threads) + 1, tasks.size());
  for (int64_t i = threads - 1; i >= 0; --i) {
    const auto at = std::lower_bound(start.begin(), start.end() - 1,
                                     (done / threads) * i + done % threads * i / threads);
    first[static_cast<size_t>(i)] = static_cast<size_t>(at - start.begin());
  }
  parallel_for(0, threads, 1, [&](int64_t i0, int64_t i1) {
    for (size_t t = first[static_cast<size_t>(i0)], end = first[static_cast<size_t>(i1)];
         t < end;) {
      const Task& a = tasks[t];
      size_t u = t + 1;
      while (u < end && tasks[u].g == a.g && tasks[u].r0 == a.r0) ++u;
      const auto& p = group[static_cast<size_t>(a.g)];
      const V A{p.A.p + a.r0 * p.A.rs, p.A.rs, p.A.cs};
      multiply_one(isa, a.r1 - a.r0, N, p.K, A, p.B, p.C + a.r0 * ldc, ldc, a.panel * kPanel,
                   std::min(N, (tasks[u - 1].panel + 1) * kPanel));
      t = u;
    }
  });
}

// The product's fp32 result as a tensor of the operands' dtype: bf16 rounds once here.
at::Tensor in_dtype(const at::Tensor& c32, at::ScalarType dtype) {
  return dtype == at::kFloat ? c32 : c32.to(dtype);
}

// C [M,N] = A [M,K] B [K,N] (multiply_all of one product), in `options`' dtype.
template <class V>
at::Tensor gemm_product(gemm::Isa isa, int64_t M, int64_t N, int64_t K, V A, V B,
                        const at::TensorOptions& options) {
  auto c = at::empty({M, N}, options.dtype(at::kFloat));
  multiply_all<V>(isa, {{M, K, A, B, c.data_ptr<float>()}}, N, N);
  return in_dtype(c, options.dtype().toScalarType());
}

// f(V{}) with V the operand kind of t's dtype (fp32 or bf16).
template <class F>
decltype(auto) on_operands(const at::Tensor& t, const F& f) {
  if (t.scalar_type() == at::kBFloat16) return f(gemm::View16{});
  return f(gemm::View{});
}

// project() on parity's products (fp32, or bf16 where they run): y = x w^T, dx = dy w and
// dw = dy^T x.
struct ProjectFunction : torch::autograd::Function<ProjectFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& w, int64_t isa, bool read) {
    const int64_t I = w.size(1), O = w.size(0);
    auto x2 = x.reshape({-1, I});
    auto y = !read ? at::zeros({x2.size(0), O}, x.options()) : on_operands(x, [&](auto v) {
      using V = decltype(v);
      return gemm_product(gemm::Isa(isa), x2.size(0), O, I, matrix_view<V>(x2),
                          transposed<V>(w), x.options());
    });
    ctx->save_for_backward({x2, w});
    save_isa(ctx, isa);
    ctx->saved_data["x_shape"] = x.sizes().vec();
    auto shape = x.sizes().vec();
    shape.back() = O;
    return y.view(shape);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x2 = saved[0], &w = saved[1];
    const auto isa = saved_isa(ctx);
    const int64_t M = x2.size(0), I = w.size(1), O = w.size(0);
    auto dy = grads[0].to(x2.scalar_type()).reshape({M, O});
    at::Tensor dx, dw;
    on_operands(x2, [&](auto v) {
      using V = decltype(v);
      if (ctx->needs_input_grad(0))
        dx = gemm_product(isa, M, I, O, matrix_view<V>(dy), matrix_view<V>(w), x2.options());
      if (ctx->needs_input_grad(1))
        dw = gemm_product(isa, O, I, M, transposed<V>(dy), matrix_view<V>(x2), w.options());
    });
    if (dx.defined()) dx = dx.view(ctx->saved_data["x_shape"].toIntVector());
    return {dx, dw, at::Tensor(), at::Tensor()};
  }
};

// The element offset of each matrix of t's leading dims (all but the last two), in row-major
// order of their indices.
std::vector<int64_t> matrix_offsets(const at::Tensor& t) {
  std::vector<int64_t> offsets{0};
  for (int64_t d = 0; d + 2 < t.dim(); ++d) {
    std::vector<int64_t> next;
    next.reserve(offsets.size() * static_cast<size_t>(t.size(d)));
    for (int64_t o : offsets)
      for (int64_t i = 0; i < t.size(d); ++i) next.push_back(o + i * t.stride(d));
    offsets = std::move(next);
  }
  return offsets;
}

// C[g] = A[g] B[g] for the G = a_offsets.size() matrices, C contiguous [G, M, N] fp32
// (multiply_all).
template <class V>
void batched_product(gemm::Isa isa, int64_t M, int64_t N, int64_t K, const at::Tensor& a,
                     const std::vector<int64_t>& a_off, bool a_t, const at::Tensor& b,
                     const std::vector<int64_t>& b_off, bool b_t, float* C) {
  std::vector<Product<V>> group;
  group.reserve(a_off.size());
  for (size_t g = 0; g < a_off.size(); ++g)
    group.push_back({M, K, matrix_view<V>(a, a_off[g], a_t), matrix_view<V>(b, b_off[g], b_t),
                     C + static_cast<int64_t>(g) * M * N});
  multiply_all(isa, group, N, N);
}

// batched_project() on parity's products: y[g] = x[g] w[g]^T, dx[g] = dy[g] w[g] and
// dw[g] = dy[g]^T x[g].
struct BatchedProjectFunction : torch::autograd::Function<BatchedProjectFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& w, int64_t isa) {
    const int64_t M = x.size(-2), I = x.size(-1), O = w.size(-2);
    auto shape = x.sizes().vec();
    shape.back() = O;
    auto y = at::empty(shape, x.options().dtype(at::kFloat));
    on_operands(x, [&](auto v) {
      batched_product<decltype(v)>(gemm::Isa(isa), M, O, I, x, matrix_offsets(x), false, w,
                                   matrix_offsets(w), true, y.data_ptr<float>());
    });
    ctx->save_for_backward({x, w});
    save_isa(ctx, isa);
    return in_dtype(y, x.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1];
    const auto isa = saved_isa(ctx);
    const int64_t M = x.size(-2), I = x.size(-1), O = w.size(-2);
    auto dy = grads[0].to(x.scalar_type()).contiguous();
    const auto dy_off = matrix_offsets(dy);
    const auto f32 = x.options().dtype(at::kFloat);
    at::Tensor dx, dw;
    on_operands(x, [&](auto v) {
      using V = decltype(v);
      if (ctx->needs_input_grad(0)) {
        dx = at::empty(x.sizes(), f32);
        batched_product<V>(isa, M, I, O, dy, dy_off, false, w, matrix_offsets(w), false,
                           dx.data_ptr<float>());
        dx = in_dtype(dx, x.scalar_type());
      }
      if (ctx->needs_input_grad(1)) {
        dw = at::empty(w.sizes(), f32);
        batched_product<V>(isa, O, I, M, dy, dy_off, true, x, matrix_offsets(x), false,
                           dw.data_ptr<float>());
        dw = in_dtype(dw, w.scalar_type());
      }
    });
    return {dx, dw, at::Tensor()};
  }
};

// f(e, rows, first) for each group e in order, first its first row; the groups without rows
// only when `keep_empty`.
template <class F>
void for_each_group(const std::vector<int64_t>& counts, bool keep_empty, const F& f) {
  int64_t first = 0;
  for (size_t e = 0; e < counts.size(); first += counts[e], ++e)
    if (keep_empty || counts[e] > 0) f(static_cast<int64_t>(e), counts[e], first);
}

// One product per group of rows, make(e, rows, first) for group e of `rows` rows from row
// `first` (first = counts[0] + .. + counts[e-1]); groups without rows are left out unless
// `keep_empty`.
template <class V, class Make>
std::vector<Product<V>> group_products(const std::vector<int64_t>& counts, bool keep_empty,
                                       const Make& make) {
  std::vector<Product<V>> group;
  group.reserve(counts.size());
  for_each_group(counts, keep_empty, [&](int64_t e, int64_t rows, int64_t first) {
    group.push_back(make(e, rows, first));
  });
  return group;
}

// grouped_project() on parity's products: group e's rows of y = x_e w[e]^T, of dx = dy_e w[e],
// and dw[e] = dy_e^T x_e; every group's products in one multiply_all.
struct GroupedProjectFunction : torch::autograd::Function<GroupedProjectFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in,
                            const at::Tensor& w_in, std::vector<int64_t> counts, int64_t isa) {
    auto x = x_in.contiguous(), w = w_in.contiguous();
    const int64_t O = w.size(1), I = w.size(2);
    auto y = at::empty({x.size(0), O}, x.options().dtype(at::kFloat));
    on_operands(x, [&](auto v) {
      using V = decltype(v);
      const auto *xp = elements<V>(x), *wp = elements<V>(w);
      float* yp = y.data_ptr<float>();
      const auto group = group_products<V>(counts, false, [&](int64_t e, int64_t rows,
                                                              int64_t first) {
        return Product<V>{rows, I, {xp + first * I, I, 1}, {wp + e * O * I, 1, I}, yp + first * O};
      });
      multiply_all(gemm::Isa(isa), group, O, O);
    });
    ctx->save_for_backward({x, w});
    save_isa(ctx, isa);
    ctx->saved_data["counts"] = counts;
    return in_dtype(y, x.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1];
    const auto isa = saved_isa(ctx);
    const auto counts = ctx->saved_data["counts"].toIntVector();
    const int64_t O = w.size(1), I = w.size(2);
    auto dy = grads[0].to(x.scalar_type()).contiguous();
    const auto f32 = x.options().dtype(at::kFloat);
    at::Tensor dx, dw;
    on_operands(x, [&](auto v) {
      using V = decltype(v);
      const auto *xp = elements<V>(x), *wp = elements<V>(w), *dyp = elements<V>(dy);
      if (ctx->needs_input_grad(0)) {
        dx = at::empty(x.sizes(), f32);
        float* dxp = dx.data_ptr<float>();
        const auto group = group_products<V>(counts, false, [&](int64_t e, int64_t rows,
                                                                int64_t first) {
          return Product<V>{rows, O, {dyp + first * O, O, 1}, {wp + e * O * I, I, 1},
                            dxp + first * I};
        });
        multiply_all(isa, group, I, I);
        dx = in_dtype(dx, x.scalar_type());
      }
      if (ctx->needs_input_grad(1)) {
        // A group without rows has K = 0: its dw[e] becomes +0, as a zero gradient would be.
        dw = at::empty(w.sizes(), f32);
        float* dwp = dw.data_ptr<float>();
        const auto group = group_products<V>(counts, true, [&](int64_t e, int64_t rows,
                                                               int64_t first) {
          return Product<V>{O, rows, {dyp + first * O, 1, O}, {xp + first * I, I, 1},
                            dwp + e * O * I};
        });
        multiply_all(isa, group, I, I);
        dw = in_dtype(dw, w.scalar_type());
      }
    });
    return {dx, dw, at::Tensor(), at::Tensor()};
  }
};

// grouped_project() on ATen's products, where parity's do not run (fp64, bf16 without AVX-512
// BF16, PARITY_GEMM=aten; CPU). What project() per group computes through autograd, group by group:
// y_e = mm(x_e, w[e]^T); for the row-major x_e and the column-major w[e]^T, Mm's backward
// forms dx_e = mm(dy_e, w[e]) and dw[e] = mm(dy_e^T, x_e) (transposed back). The same calls on
// the same operands, so the same values; but each result is written into its place, with
// one node for all groups instead of, per group, a product node, a select whose backward
// makes a zero tensor of all of w, and the engine's sum of those E tensors.
struct AtenGroupedProjectFunction : torch::autograd::Function<AtenGroupedProjectFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& w, std::vector<int64_t> counts) {
    auto y = at::empty({x.size(0), w.size(1)}, x.options());
    for_each_group(counts, false, [&](int64_t e, int64_t rows, int64_t first) {
      y.narrow(0, first, rows).copy_(at::mm(x.narrow(0, first, rows), w[e].t()));
    });
    ctx->save_for_backward({x, w});
    ctx->saved_data["counts"] = counts;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1];
    const auto counts = ctx->saved_data["counts"].toIntVector();
    const auto& dy = grads[0];
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) dx = at::empty(x.sizes(), x.options());
    // A group without rows takes no part in y: its dw[e] stays +0.
    if (ctx->needs_input_grad(1)) dw = at::zeros(w.sizes(), w.options());
    for_each_group(counts, false, [&](int64_t e, int64_t rows, int64_t first) {
      const auto dy_e = dy.narrow(0, first, rows);
      if (dx.defined()) dx.narrow(0, first, rows).copy_(at::mm(dy_e, w[e]));
      if (dw.defined()) dw[e].copy_(at::mm(dy_e.t(), x.narrow(0, first, rows)));
    });
    return {dx, dw, at::Tensor()};
  }
};

}  // namespace

namespace {

// The instruction set parity's products run x and w's product on (the bf16 one ignores it),
// or nullopt where ATen's run it: CPU operands of one dtype, fp32 where gemm::chosen_isa()
// names one, bf16 where gemm::bf16_chosen().
std::optional<int64_t> ours(const at::Tensor& x, const at::Tensor& w) {
  if (!x.is_cpu() || !w.is_cpu() || x.scalar_type() != w.scalar_type()) return std::nullopt;
  if (x.scalar_type() == at::kFloat)
    if (const auto isa = gemm::chosen_isa()) return int64_t(*isa);
  if (x.scalar_type() == at::kBFloat16 && gemm::bf16_chosen()) return int64_t(gemm::Isa::Avx512);
  return std::nullopt;
}

}  // namespace

at::Tensor grouped_project(const at::Tensor& x, const at::Tensor& w,
                           const std::vector<int64_t>& counts) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 3 && x.size(1) == w.size(2),
              "grouped_project: x [R, I] and w [E, O, I]; got ", x.sizes(), " and ", w.sizes());
  TORCH_CHECK(static_cast<int64_t>(counts.size()) == w.size(0),
              "grouped_project: one row count per group: ", counts.size(), " for ", w.size(0),
              " groups");
  int64_t rows = 0;
  for (int64_t c : counts) {
    TORCH_CHECK(c >= 0 && c <= x.size(0) - rows, "grouped_project: the row counts must be "
                "non-negative and sum to x's ", x.size(0), " rows");
    rows += c;
  }
  TORCH_CHECK(rows == x.size(0), "grouped_project: the row counts sum to ", rows, ", not to x's ",
              x.size(0), " rows");
  if (x.numel() > 0 && w.numel() > 0)
    if (const auto isa = ours(x, w)) return GroupedProjectFunction::apply(x, w, counts, *isa);
  if (x.is_cpu() && w.is_cpu() && x.scalar_type() == w.scalar_type() && x.numel() > 0 &&
      w.numel() > 0)
    return AtenGroupedProjectFunction::apply(x, w, counts);
  // The readable form: each group's rows through project(), concatenated.
  const auto parts = x.split_with_sizes(counts);
  std::vector<at::Tensor> ys;
  for (size_t e = 0; e < counts.size(); ++e)
    if (counts[e] > 0) ys.push_back(project(parts[e], w[int64_t(e)]));
  if (ys.empty()) return at::empty({0, w.size(1)}, x.options());
  return at::cat(ys, 0);
}

at::Tensor batched_project(const at::Tensor& x, const at::Tensor& w) {
  const bool shapes = x.dim() >= 2 && w.dim() == x.dim() && x.size(-1) == w.size(-1) &&
                      x.numel() > 0 && w.numel() > 0 &&
                      x.sizes().slice(0, x.dim() - 2) == w.sizes().slice(0, w.dim() - 2);
  if (shapes)
    if (const auto isa = ours(x, w)) return BatchedProjectFunction::apply(x, w, *isa);
  return at::matmul(x, w.transpose(-1, -2));
}

at::Tensor project(const at::Tensor& x, const at::Tensor& w, ProductValue value) {
  if (w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1))
    if (const auto isa = ours(x, w))
      return ProjectFunction::apply(x, w, *isa, value == ProductValue::Read);
  return at::matmul(x, w.t());
}

at::Tensor project(const at::Tensor& x, const at::Tensor& w) {
  return project(x, w, ProductValue::Read);
}

at::Tensor situ_glu(const at::Tensor& gate, const at::Tensor& up, double beta,
                    double linear_beta) {
  const auto acc = accum_dtype(gate.scalar_type());
  auto g = gate.to(acc), u = up.to(acc);
  auto a = beta * at::tanh(g / beta) * at::sigmoid(g);
  auto b = linear_beta * at::tanh(u / linear_beta);
  return (a * b).to(gate.scalar_type());
}

namespace {

// glu_loops' SiTU-GLU as an autograd Function: gu [.., 2H] -> y [.., H], one dtype.
struct SituGluFunction : torch::autograd::Function<SituGluFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& gu_in,
                            double beta, double linear_beta) {
    auto gu = gu_in.contiguous();
    const int64_t H = gu.size(-1) / 2, N = gu.numel() / (2 * H);
    auto shape = gu.sizes().vec();
    shape.back() = H;
    auto y = at::empty(shape, gu.options());
    on_loop_type(gu.scalar_type(), "the SiTU-GLU loop", [&](auto tag) {
      using S = decltype(tag);
      parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
        glu_loops::forward(H, elems<S>(gu), beta, linear_beta, elems<S>(y), n0, n1);
      });
    });
    ctx->save_for_backward({gu});
    ctx->saved_data["beta"] = beta;
    ctx->saved_data["linear_beta"] = linear_beta;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto gu = ctx->get_saved_variables()[0];
    const double beta = ctx->saved_data["beta"].toDouble();
    const double linear_beta = ctx->saved_data["linear_beta"].toDouble();
    const int64_t H = gu.size(-1) / 2, N = gu.numel() / (2 * H);
    auto dy = grads[0].to(gu.scalar_type()).contiguous();
    auto dgu = at::empty_like(gu);
    on_loop_type(gu.scalar_type(), "the SiTU-GLU loop", [&](auto tag) {
      using S = decltype(tag);
      parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
        glu_loops::backward(H, elems<S>(gu), elems<S>(dy), beta, linear_beta, elems<S>(dgu),
                            n0, n1);
      });
    });
    return {dgu, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor situ_glu_rows(const at::Tensor& gu, double beta, double linear_beta) {
  TORCH_CHECK(gu.dim() >= 1 && gu.size(-1) % 2 == 0,
              "situ_glu_rows: the last dim holds a gate half and an up half; got ", gu.sizes());
  const int64_t H = gu.size(-1) / 2;
  if (gu.is_cpu() && loop_dtype(gu.scalar_type()) && gu.numel() > 0)
    return SituGluFunction::apply(gu, beta, linear_beta);
  return situ_glu(gu.narrow(-1, 0, H), gu.narrow(-1, H, H), beta, linear_beta);
}

at::Tensor glu_ffn(const at::Tensor& x, const at::Tensor& w13, const at::Tensor& w2, double beta,
                   double linear_beta, ProductValue value) {
  const int64_t H = w13.size(1);
  auto gu = project(x, w13.reshape({2 * H, w13.size(2)}));  // [.., 2H]: gate | up
  return project(situ_glu_rows(gu, beta, linear_beta), w2, value);
}

at::Tensor embed_tokens(const at::Tensor& tokens, const at::Tensor& w) {
  auto flat = w.index_select(0, tokens.reshape({-1}));
  auto shape = tokens.sizes().vec();
  shape.push_back(w.size(1));
  return flat.view(shape);
}

at::Tensor cross_entropy_sum(const at::Tensor& logits, const at::Tensor& labels) {
  const auto acc = accum_dtype(logits.scalar_type());
  auto lf = logits.to(acc).reshape({-1, logits.size(-1)});
  auto logp = at::log_softmax(lf, -1);
  return at::nll_loss(logp, labels.reshape({-1}), {}, at::Reduction::Sum);
}

at::Tensor l2_normalize(const at::Tensor& x, double eps) {
  auto xf = x.to(accum_dtype(x.scalar_type()));
  auto inv = 1.0 / at::sqrt(xf.pow(2).sum(-1, /*keepdim=*/true) + eps);
  return (xf * inv).to(x.scalar_type());
}

at::Tensor rms_norm_gated(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& w,
                          double eps) {
  const auto acc = accum_dtype(x.scalar_type());
  auto xf = x.to(acc);
  auto normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps) * w.to(acc);
  return (normed * at::sigmoid(gate.to(acc))).to(x.scalar_type());
}

}  // namespace parity::kernels
