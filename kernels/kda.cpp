#include "kernels/kda.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kernels/kda_fused.h"
#include "kernels/kda_gates.h"
#include "kernels/kda_prep.h"
#include "kernels/loop_tensors.h"
#include "kernels/norm_loops.h"
#include "kernels/ops.h"
#include "kernels/precision.h"
#include "kernels/threads.h"

namespace parity::kernels {

at::Tensor kda_recurrent(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& g, const at::Tensor& beta) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), K = q.size(3), Vd = v.size(3);
  auto S = at::zeros({B, H, K, Vd}, v.options());
  std::vector<at::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    auto kt = k.select(2, t);                                        // [B,H,K]
    S = g.select(2, t).exp().unsqueeze(-1) * S;
    auto kS = at::matmul(kt.unsqueeze(-2), S).squeeze(-2);           // S^T k: [B,H,V]
    auto u = beta.select(2, t).unsqueeze(-1) * (v.select(2, t) - kS);
    S = S + kt.unsqueeze(-1) * u.unsqueeze(-2);
    outs.push_back(at::matmul(q.select(2, t).unsqueeze(-2), S).squeeze(-2));
  }
  return at::stack(outs, 2);
}

at::Tensor kda_chunked(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                       const at::Tensor& g_in, const at::Tensor& beta_in, int64_t C) {
  const int64_t B = q_in.size(0), H = q_in.size(1), T = q_in.size(2), K = q_in.size(3),
                Vd = v_in.size(3);
  const int64_t NC = (T + C - 1) / C, pad = NC * C - T;
  // Zero padding at the end: k = v = beta = 0 adds nothing, g = 0 decays nothing, and the
  // padded outputs are cut off.
  auto padT = [&](const at::Tensor& x) {
    if (pad == 0) return x;
    auto sizes = x.sizes().vec();
    sizes[2] = pad;
    return at::cat({x, at::zeros(sizes, x.options())}, 2);
  };
  auto q = padT(q_in).view({B, H, NC, C, K});
  auto k = padT(k_in).view({B, H, NC, C, K});
  auto v = padT(v_in).view({B, H, NC, C, Vd});
  auto g = padT(g_in).view({B, H, NC, C, K});
  auto beta = padT(beta_in).view({B, H, NC, C, 1});

  auto G = g.cumsum(3);                                              // [B,H,NC,C,K]
  auto opts_b = q.options().dtype(at::kBool);
  auto on_or_below = at::ones({C, C}, opts_b).tril();                // i <= t
  auto below = at::ones({C, C}, opts_b).tril(-1);                    // i < t
  // E[t,i,k] = exp(G_t - G_i)_k where i <= t, else 0 (masked before the exp).
  auto diff = G.unsqueeze(4) - G.unsqueeze(3);                       // [B,H,NC,C,C,K]
  auto E = diff.masked_fill(on_or_below.logical_not().unsqueeze(-1),
                            -std::numeric_limits<double>::infinity())
               .exp();
  // Element-wise products reduced over K (not batched mat-vec products: libtorch's CPU bmm
  // is slow for [C,K]x[K,1] shapes).
  auto A = (E * (k.unsqueeze(4) * k.unsqueeze(3))).sum(-1);         // [B,H,NC,C,C]
  A = (beta * A).masked_fill(below.logical_not(), 0.0);
  auto P = (E * (q.unsqueeze(4) * k.unsqueeze(3))).sum(-1);         // zero above the diagonal

  auto eye = at::eye(C, q.options());
  auto IA = A + eye;
  auto expG = G.exp();
  auto W = at::linalg_solve_triangular(IA, beta * (k * expG), /*upper=*/false, /*left=*/true,
                                       /*unitriangular=*/true);     // [B,H,NC,C,K]
  auto Uv = at::linalg_solve_triangular(IA, beta * v, false, true, true);  // [B,H,NC,C,V]
  auto Qg = q * expG;
  auto GC = G.narrow(3, C - 1, 1);                                   // [B,H,NC,1,K]
  auto Kd = k * (GC - G).exp();
  auto decay = GC.squeeze(3).exp().unsqueeze(-1);                    // [B,H,NC,K,1]

  auto S = at::zeros({B, H, K, Vd}, v.options());
  std::vector<at::Tensor> outs;
  outs.reserve(NC);
  for (int64_t n = 0; n < NC; ++n) {
    auto U = Uv.select(2, n) - at::matmul(W.select(2, n), S);        // [B,H,C,V]
    outs.push_back(at::matmul(Qg.select(2, n), S) + at::matmul(P.select(2, n), U));
    S = decay.select(2, n) * S + at::matmul(Kd.select(2, n).transpose(-1, -2), U);
  }
  auto o = at::stack(outs, 2).view({B, H, NC * C, Vd});
  return pad == 0 ? o : o.narrow(2, 0, T);
}

namespace {

// (row, head) bh's slice of a contiguous [B, H, ...] tensor.
template <class E>
E* row_head(const at::Tensor& t, int64_t bh) {
  return t.data_ptr<E>() + bh * (t.numel() / (t.size(0) * t.size(1)));
}

// The fused core as an autograd Function: forward saves q, k, the decay a = exp(g) it made,
// beta, the states entering each saved interval and r; backward runs
// kda_core::backward_chunked on them. When no backward
// can follow (`saves` false: grad mode off, or no input requires grad) the forward writes no
// states and no r.
struct KdaFusedFunction : torch::autograd::Function<KdaFusedFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q_in,
                            const at::Tensor& k_in, const at::Tensor& v_in,
                            const at::Tensor& g_in, const at::Tensor& beta_in, int64_t chunk,
                            bool saves) {
    auto q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous(),
         g = g_in.contiguous(), beta = beta_in.contiguous();
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2), K = q.size(3), V = v.size(3);
    const bool fp64 = q.scalar_type() == at::kDouble;
    const kda_core::Shape s{T, K, V, chunk};
    const int64_t n_state = kda_core::state_elems(s, fp64),
                  Vp = kda_core::padded(V, fp64);
    auto o = at::empty({B, H, T, V}, v.options());
    at::Tensor states, r;
    if (saves) {
      states = at::empty({B, H, n_state}, v.options());
      r = at::empty({B, H, T, Vp}, v.options());
    }
    auto a = at::empty_like(g);
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "kda_fused_forward", [&] {
      parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
        for (int64_t bh = begin; bh < end; ++bh) {
          const auto slice = [bh](const at::Tensor& t) {
            return t.defined() ? row_head<scalar_t>(t, bh) : nullptr;
          };
          kda_core::forward(s, slice(q), slice(k), slice(v), slice(g), slice(beta), slice(o),
                            slice(states), slice(r), slice(a));
        }
      });
    });
    if (!saves) return o;
    ctx->save_for_backward({q, k, a, beta, states, r});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["V"] = V;
    return o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    if (saved.size() != 6)
      throw std::logic_error("kda_fused: a backward after a forward that saved nothing");
    const auto &q = saved[0], &k = saved[1], &a = saved[2], &beta = saved[3],
               &states = saved[4], &r = saved[5];
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2), K = q.size(3);
    const int64_t V = ctx->saved_data["V"].toInt();
    const kda_core::Shape s{T, K, V, ctx->saved_data["chunk"].toInt()};
    auto dout = grads[0].contiguous();
    auto dq = at::empty_like(q), dk = at::empty_like(k), dg = at::empty_like(a),
         dbeta = at::empty_like(beta), dv = at::empty({B, H, T, V}, q.options());
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "kda_fused_backward", [&] {
      parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
        for (int64_t bh = begin; bh < end; ++bh) {
          const auto slice = [bh](const at::Tensor& t) { return row_head<scalar_t>(t, bh); };
          kda_core::backward_chunked(s, slice(q), slice(k), slice(a), slice(beta),
                                     slice(states), slice(r), slice(dout), slice(dq), slice(dk),
                                     slice(dv), slice(dg), slice(dbeta));
        }
      });
    });
    return {dq, dk, dv, dg, dbeta, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor kda_fused(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& g, const at::Tensor& beta, int64_t chunk) {
  const auto dt = q.scalar_type();
  TORCH_CHECK(dt == at::kFloat || dt == at::kDouble,
              "kda_fused runs in fp32 or fp64; upcast the inputs (got ", dt, ")");
  for (const auto* t : {&k, &v, &g, &beta})
    TORCH_CHECK(t->scalar_type() == dt, "kda_fused: q, k, v, g and beta share one dtype");
  TORCH_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && g.sizes() == q.sizes() &&
                  v.dim() == 4 && v.size(2) == q.size(2) && beta.dim() == 3 &&
                  beta.size(2) == q.size(2),
              "kda_fused: q, k, g [B,H,T,K], v [B,H,T,V], beta [B,H,T]");
  TORCH_CHECK(chunk > 0, "kda_fused: chunk must be positive");
  TORCH_CHECK(q.is_cpu(), "kda_fused is a CPU kernel; on CUDA use kda_chunked");
  // The condition under which apply() records a backward node.
  bool saves = at::GradMode::is_enabled();
  if (saves) {
    saves = false;
    for (const auto* t : {&q, &k, &v, &g, &beta}) saves = saves || t->requires_grad();
  }
  return KdaFusedFunction::apply(q, k, v, g, beta, chunk, saves);
}

at::Tensor kda_form(KdaImpl impl, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const at::Tensor& g, const at::Tensor& beta, int64_t chunk) {
  if (impl == KdaImpl::Fused && q.is_cpu()) return kda_fused(q, k, v, g, beta, kFusedCheckpoint);
  if (impl == KdaImpl::Recurrent) return kda_recurrent(q, k, v, g, beta);
  return kda_chunked(q, k, v, g, beta, chunk);
}

at::Tensor causal_depthwise_conv(const at::Tensor& x, const at::Tensor& w) {
  const int64_t T = x.size(1), J = w.size(1);
  auto xp = at::constant_pad_nd(x, {0, 0, J - 1, 0});                // [B,T+J-1,C]
  at::Tensor y;
  for (int64_t j = 0; j < J; ++j) {
    auto term = xp.narrow(1, j, T) * w.select(1, j);
    y = j == 0 ? term : y + term;
  }
  return y;
}

at::Tensor conv_silu(const at::Tensor& x, const at::Tensor& w) {
  const auto acc = accum_dtype(x.scalar_type());
  return at::silu(causal_depthwise_conv(x.to(acc), w.to(acc))).to(x.scalar_type());
}

namespace {

using namespace loop_tensors;

// kda_prep's causal depthwise conv (and silu) as an autograd Function: x [B,T,C], taps [C,J].
// It keeps x and the taps only; the backward recomputes the conv for silu's derivative.
struct ConvFunction : torch::autograd::Function<ConvFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in,
                            const at::Tensor& w_in, bool silu) {
    auto x = x_in.contiguous(), w = w_in.contiguous();
    const kda_prep::ConvShape s{x.size(0), x.size(1), x.size(2), w.size(1), silu};
    auto y = at::empty_like(x);
    on_loop_type(x.scalar_type(), "the fused KDA conv", [&](auto tag) {
      using S = decltype(tag);
      parallel_for(0, s.C, 64, [&](int64_t c0, int64_t c1) {
        kda_prep::conv_forward(s, elems<S>(x), elems<S>(w), elems<S>(y), c0, c1);
      });
    });
    ctx->save_for_backward({x, w});
    ctx->saved_data["silu"] = silu;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1];
    const kda_prep::ConvShape s{x.size(0), x.size(1), x.size(2), w.size(1),
                                ctx->saved_data["silu"].toBool()};
    auto dy = grads[0].to(x.scalar_type()).contiguous();
    auto dx = at::empty_like(x), dw = at::empty_like(w);
    on_loop_type(x.scalar_type(), "the fused KDA conv", [&](auto tag) {
      using S = decltype(tag);
      parallel_for(0, s.C, 64, [&](int64_t c0, int64_t c1) {
        kda_prep::conv_backward(s, elems<S>(x), elems<S>(w), elems<S>(dy), elems<S>(dx),
                                elems<S>(dw), c0, c1);
      });
    });
    return {dx, dw, at::Tensor()};
  }
};

// kda_prep's heads step as an autograd Function: a [B,T,H*K] -> [B,H,T,K] in acc.
struct HeadsFunction : torch::autograd::Function<HeadsFunction> {
  static kda_prep::HeadsShape shape(const at::Tensor& a, int64_t H, bool l2, double eps,
                                    double scale) {
    return {a.size(0), a.size(1), H, a.size(2) / H, l2, eps, scale};
  }

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a_in,
                            int64_t H, bool l2, double eps, double scale) {
    auto a = a_in.contiguous();
    const auto s = shape(a, H, l2, eps, scale);
    const auto acc = a.options().dtype(accum_dtype(a.scalar_type()));
    auto out = at::empty({s.B, H, s.T, s.K}, acc);
    auto inv = at::empty({l2 ? s.B * H * s.T : 0}, acc);
    on_loop_type(a.scalar_type(), "the fused KDA head step", [&](auto tag) {
      using S = decltype(tag);
      using A = Acc<S>;
      parallel_for(0, s.B * H, 1, [&](int64_t bh0, int64_t bh1) {
        kda_prep::heads_forward(s, elems<S>(a), out.data_ptr<A>(), inv.data_ptr<A>(), bh0, bh1);
      });
    });
    ctx->save_for_backward({a, inv});
    ctx->saved_data["H"] = H;
    ctx->saved_data["l2"] = l2;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &a = saved[0], &inv = saved[1];
    const int64_t H = ctx->saved_data["H"].toInt();
    const auto s = shape(a, H, ctx->saved_data["l2"].toBool(),
                         ctx->saved_data["eps"].toDouble(), ctx->saved_data["scale"].toDouble());
    auto dout = grads[0].to(inv.scalar_type()).contiguous();
    auto da = at::empty_like(a);
    on_loop_type(a.scalar_type(), "the fused KDA head step", [&](auto tag) {
      using S = decltype(tag);
      using A = Acc<S>;
      parallel_for(0, s.B * H, 1, [&](int64_t bh0, int64_t bh1) {
        kda_prep::heads_backward(s, elems<S>(a), inv.data_ptr<A>(), dout.data_ptr<A>(),
                                 elems<S>(da), bh0, bh1);
      });
    });
    return {da, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// kda_gates' decay pre-activation as an autograd Function: pre [B,T,H*K], dt [H*K] and
// rate [H] in acc -> z [B,H,T,K] in acc.
struct DecayFunction : torch::autograd::Function<DecayFunction> {
  static kda_gates::Shape shape(const at::Tensor& pre, int64_t H) {
    return {pre.size(0), pre.size(1), H, pre.size(2) / H};
  }

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& pre_in,
                            const at::Tensor& dt_in, const at::Tensor& rate_in) {
    auto pre = pre_in.contiguous(), dt = dt_in.contiguous(), rate = rate_in.contiguous();
    const auto s = shape(pre, rate.size(0));
    auto z = at::empty({s.B, s.H, s.T, s.K}, dt.options());
    on_loop_type(pre.scalar_type(), "the fused KDA decay gate", [&](auto tag) {
      using S = decltype(tag);
      using A = Acc<S>;
      parallel_for(0, s.H, 1, [&](int64_t h0, int64_t h1) {
        kda_gates::decay_forward(s, elems<S>(pre), dt.data_ptr<A>(), rate.data_ptr<A>(),
                                 z.data_ptr<A>(), h0, h1);
      });
    });
    ctx->save_for_backward({pre, dt, rate});
    return z;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &pre = saved[0], &dt = saved[1], &rate = saved[2];
    const auto s = shape(pre, rate.size(0));
    auto dz = grads[0].to(dt.scalar_type()).contiguous();
    auto dpre = at::empty_like(pre), ddt = at::empty_like(dt), drate = at::empty_like(rate);
    on_loop_type(pre.scalar_type(), "the fused KDA decay gate", [&](auto tag) {
      using S = decltype(tag);
      using A = Acc<S>;
      parallel_for(0, s.H, 1, [&](int64_t h0, int64_t h1) {
        kda_gates::decay_backward(s, elems<S>(pre), dt.data_ptr<A>(), rate.data_ptr<A>(),
                                  dz.data_ptr<A>(), elems<S>(dpre), ddt.data_ptr<A>(),
                                  drate.data_ptr<A>(), h0, h1);
      });
    });
    return {dpre, ddt, drate};
  }
};

// kda_gates' gated output norm as an autograd Function: o [B,H,T,K], gate [B,T,H*K] and w [K]
// in acc -> y [B,T,H*K] in the stream dtype.
struct GatedNormFunction : torch::autograd::Function<GatedNormFunction> {
  static kda_gates::Shape shape(const at::Tensor& o) {
    return {o.size(0), o.size(2), o.size(1), o.size(3)};
  }

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& o_in,
                            const at::Tensor& gate_in, const at::Tensor& w_in, double eps,
                            at::ScalarType stream) {
    auto o = o_in.contiguous(), gate = gate_in.contiguous(), w = w_in.contiguous();
    const auto s = shape(o);
    auto y = at::empty({s.B, s.T, s.H * s.K}, o.options().dtype(stream));
    auto r = at::empty({s.B, s.T, s.H}, o.options());
    on_loop_type(stream, "the fused KDA output norm", [&](auto tag) {
      using S = decltype(tag);
      using A = Acc<S>;
      parallel_for(0, s.B * s.T * s.H, 64, [&](int64_t n0, int64_t n1) {
        kda_gates::norm_forward(s, o.data_ptr<A>(), gate.data_ptr<A>(), w.data_ptr<A>(), eps,
                                elems<S>(y), r.data_ptr<A>(), n0, n1);
      });
    });
    ctx->save_for_backward({o, gate, w, r});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &o = saved[0], &gate = saved[1], &w = saved[2], &r = saved[3];
    const auto s = shape(o);
    const int64_t rows = s.B * s.T * s.H;
    auto dy = grads[0].contiguous();
    auto d_o = at::empty_like(o), dgate = at::empty_like(gate), dw = at::empty_like(w);
    auto dw_rows = at::empty({rows, s.K}, o.options());
    on_loop_type(dy.scalar_type(), "the fused KDA output norm", [&](auto tag) {
      using S = decltype(tag);
      using A = Acc<S>;
      parallel_for(0, rows, 64, [&](int64_t n0, int64_t n1) {
        kda_gates::norm_backward(s, o.data_ptr<A>(), gate.data_ptr<A>(), w.data_ptr<A>(),
                                 r.data_ptr<A>(), elems<S>(dy), d_o.data_ptr<A>(),
                                 dgate.data_ptr<A>(), dw_rows.data_ptr<A>(), n0, n1);
      });
      norm_loops::sum_rows(dw_rows.data_ptr<A>(), rows, s.K, dw.data_ptr<A>());
    });
    return {d_o, dgate, dw, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor causal_conv_fused(const at::Tensor& x, const at::Tensor& w, bool silu) {
  TORCH_CHECK(x.is_cpu() && w.is_cpu(), "causal_conv_fused is a CPU kernel");
  TORCH_CHECK(x.dim() == 3 && w.dim() == 2 && w.size(0) == x.size(2),
              "causal_conv_fused: x [B,T,C], taps [C,J]");
  TORCH_CHECK(loop_dtype(x.scalar_type()) && w.scalar_type() == x.scalar_type(),
              "causal_conv_fused: x and the taps share one dtype, fp32, fp64 or bf16");
  return ConvFunction::apply(x, w, silu);
}

at::Tensor heads_fused(const at::Tensor& a, int64_t n_heads, bool l2, double eps, double scale) {
  TORCH_CHECK(a.is_cpu(), "heads_fused is a CPU kernel");
  TORCH_CHECK(a.dim() == 3 && n_heads > 0 && a.size(2) % n_heads == 0,
              "heads_fused: a [B,T,H*K] with H dividing the last dimension");
  TORCH_CHECK(loop_dtype(a.scalar_type()), "heads_fused runs in fp32, fp64 or bf16");
  return HeadsFunction::apply(a, n_heads, l2, eps, scale);
}

at::Tensor decay_pre_fused(const at::Tensor& pre, const at::Tensor& dt, const at::Tensor& rate) {
  TORCH_CHECK(pre.is_cpu() && dt.is_cpu() && rate.is_cpu(), "decay_pre_fused is a CPU kernel");
  TORCH_CHECK(loop_dtype(pre.scalar_type()), "decay_pre_fused runs in fp32, fp64 or bf16");
  const auto acc = accum_dtype(pre.scalar_type());
  TORCH_CHECK(dt.scalar_type() == acc && rate.scalar_type() == acc,
              "decay_pre_fused: dt and rate in the accumulation dtype of pre");
  TORCH_CHECK(pre.dim() == 3 && rate.dim() == 1 && rate.size(0) > 0 &&
                  pre.size(2) % rate.size(0) == 0 && dt.dim() == 1 && dt.size(0) == pre.size(2),
              "decay_pre_fused: pre [B,T,H*K], dt [H*K], rate [H]");
  return DecayFunction::apply(pre, dt, rate);
}

at::Tensor rms_norm_gated_fused(const at::Tensor& o, const at::Tensor& gate, const at::Tensor& w,
                                double eps, at::ScalarType stream) {
  TORCH_CHECK(o.is_cpu() && gate.is_cpu() && w.is_cpu(), "rms_norm_gated_fused is a CPU kernel");
  TORCH_CHECK(loop_dtype(stream), "rms_norm_gated_fused runs in fp32, fp64 or bf16");
  const auto acc = accum_dtype(stream);
  TORCH_CHECK(o.scalar_type() == acc && gate.scalar_type() == acc && w.scalar_type() == acc,
              "rms_norm_gated_fused: o, gate and w in the accumulation dtype of ", stream);
  TORCH_CHECK(o.dim() == 4 && gate.dim() == 3 && w.dim() == 1 && w.size(0) == o.size(3) &&
                  gate.size(0) == o.size(0) && gate.size(1) == o.size(2) &&
                  gate.size(2) == o.size(1) * o.size(3),
              "rms_norm_gated_fused: o [B,H,T,K], gate [B,T,H*K], w [K]");
  return GatedNormFunction::apply(o, gate, w, eps, stream);
}

at::Tensor kda(const at::Tensor& x, const KdaWeights& w, const KdaDims& d, ProductValue out) {
  const int64_t B = x.size(0), T = x.size(1), H = d.n_heads, K = d.head_dim;
  const auto stream = x.scalar_type();
  const auto acc = accum_dtype(stream);
  auto heads = [&](const at::Tensor& t) {  // [B,T,H*K] -> [B,H,T,K]
    return t.view({B, T, H, K}).transpose(1, 2);
  };
  const double q_scale = 1.0 / std::sqrt(static_cast<double>(K));
  at::Tensor q, k, v;
  const bool fused = d.impl == KdaImpl::Fused && x.is_cpu() && loop_dtype(stream);
  if (fused) {  // the same composition, in kda_prep's loops
    auto conv = [&](const at::Tensor& proj, const at::Tensor& taps) {
      return causal_conv_fused(project(x, proj), taps.select(1, 0).to(stream), /*silu=*/true);
    };
    q = heads_fused(conv(w.q_proj, w.q_conv), H, true, d.l2norm_eps, q_scale);
    k = heads_fused(conv(w.k_proj, w.k_conv), H, true, d.l2norm_eps, 1.0);
    v = heads_fused(conv(w.v_proj, w.v_conv), H, false, 0.0, 1.0);
  } else {
    auto conv = [&](const at::Tensor& proj, const at::Tensor& taps) {
      return heads(conv_silu(project(x, proj), taps.select(1, 0).to(stream)));
    };
    q = l2_normalize(conv(w.q_proj, w.q_conv), d.l2norm_eps).to(acc) * q_scale;
    k = l2_normalize(conv(w.k_proj, w.k_conv), d.l2norm_eps).to(acc);
    v = conv(w.v_proj, w.v_conv).to(acc);
  }
  auto beta = at::sigmoid(project(x, w.beta).to(acc)).transpose(1, 2);          // [B,H,T]
  auto pre = project(project(x, w.forget_a), w.forget_b);                       // [B,T,H*K]
  auto dt = w.dt_bias.to(acc).reshape({H * K});
  at::Tensor g;
  if (fused) {
    g = d.gate_bound * at::sigmoid(decay_pre_fused(pre, dt, w.A_log.to(acc).exp()));
  } else {
    auto rate = w.A_log.to(acc).exp().repeat_interleave(K);                     // [H*K]
    g = heads(d.gate_bound * at::sigmoid(rate * (pre.to(acc) + dt)));
  }

  auto o = kda_form(d.impl, q, k, v, g, beta, d.chunk);                          // [B,H,T,K]
  auto gate = project(x, w.output_gate);                                         // [B,T,H*K]
  if (fused) {
    o = rms_norm_gated_fused(o, gate.to(acc), w.output_norm.to(acc), d.output_eps, stream);
  } else {
    o = rms_norm_gated(o.to(stream).transpose(1, 2), gate.view({B, T, H, K}), w.output_norm,
                       d.output_eps)
            .reshape({B, T, H * K});
  }
  return project(o, w.output_proj, out);
}

}  // namespace parity::kernels
