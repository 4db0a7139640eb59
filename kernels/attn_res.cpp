#include "kernels/attn_res.h"

#include <torch/torch.h>

#include "kernels/attn_res_loops.h"
#include "kernels/loop_tensors.h"
#include "kernels/precision.h"
#include "kernels/threads.h"

namespace parity::kernels {

namespace {

// The forward, op for op, shared by both implementations so that their outputs are bitwise
// equal. Returns the output in the stream dtype and, through the out-parameters, the
// per-token statistics the recomputing form saves.
at::Tensor attn_res_forward_parts(const at::Tensor& stack, const at::Tensor& partial,
                                  const at::Tensor& proj, const at::Tensor& norm, double eps,
                                  at::Tensor* r_out, at::Tensor* p_out) {
  const auto stream = partial.scalar_type();
  const auto acc = accum_dtype(stream);
  auto V = at::cat({stack, partial.unsqueeze(-2)}, -2).to(acc);       // [B,T,N+1,D]
  auto r = at::rsqrt(V.pow(2).mean(-1, /*keepdim=*/true) + eps);      // [B,T,N+1,1]
  auto K = V * r;
  auto q = norm.to(acc) * proj.to(acc);                               // [D]
  auto logits = at::matmul(K, q);                                     // [B,T,N+1]
  auto p = at::softmax(logits, -1);
  auto out = at::matmul(p.unsqueeze(-2), V).squeeze(-2);              // [B,T,D]
  if (r_out) *r_out = r;
  if (p_out) *p_out = p;
  return out.to(stream);
}

// Backward of the read given the upstream gradient go [B,T,D] (acc). With
// s_n = r_n (q . V_n), p = softmax(s), out = sum_n p_n V_n:
//   dp_n = go . V_n;   ds_n = p_n (dp_n - sum_m p_m dp_m)
//   dV_n = p_n go + ds_n r_n q - ds_n (q . V_n) r_n^3 / D * V_n
//   dq   = sum_{B,T,n} ds_n r_n V_n
struct AttnResFunction : public torch::autograd::Function<AttnResFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& stack,
                            const at::Tensor& partial, const at::Tensor& proj,
                            const at::Tensor& norm, double eps) {
    at::Tensor r, p;
    auto out = attn_res_forward_parts(stack, partial, proj, norm, eps, &r, &p);
    ctx->save_for_backward({stack, partial, proj, norm, r, p});
    ctx->saved_data["eps"] = eps;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& stack = saved[0];
    const auto& partial = saved[1];
    const auto& proj = saved[2];
    const auto& norm = saved[3];
    const auto& r = saved[4];  // [B,T,N+1,1]
    const auto& p = saved[5];  // [B,T,N+1]
    const auto acc = r.scalar_type();
    const int64_t N = stack.size(-2);
    const double D = static_cast<double>(partial.size(-1));

    auto V = at::cat({stack, partial.unsqueeze(-2)}, -2).to(acc);  // recomputed
    auto q = norm.to(acc) * proj.to(acc);
    auto go = grads[0].to(acc);                                     // [B,T,D]

    auto dp = at::matmul(V, go.unsqueeze(-1)).squeeze(-1);          // [B,T,N+1]
    auto ds = p * (dp - (p * dp).sum(-1, /*keepdim=*/true));
    auto qV = at::matmul(V, q);                                     // [B,T,N+1]
    auto rs = r.squeeze(-1);
    auto dV = p.unsqueeze(-1) * go.unsqueeze(-2) + (ds * rs).unsqueeze(-1) * q -
              (ds * qV * rs.pow(3) / D).unsqueeze(-1) * V;
    auto dq = at::matmul((ds * rs).reshape({-1}).unsqueeze(0),
                         V.reshape({-1, V.size(-1)}))
                  .squeeze(0);                                      // [D]

    at::Tensor d_stack, d_partial, d_proj, d_norm;
    if (ctx->needs_input_grad(0)) d_stack = dV.narrow(-2, 0, N).to(stack.scalar_type());
    if (ctx->needs_input_grad(1)) d_partial = dV.select(-2, N).to(partial.scalar_type());
    if (ctx->needs_input_grad(2)) d_proj = (dq * norm.to(acc)).to(proj.scalar_type());
    if (ctx->needs_input_grad(3)) d_norm = (dq * proj.to(acc)).to(norm.scalar_type());
    return {d_stack, d_partial, d_proj, d_norm, at::Tensor()};
  }
};

// The same read in attn_res_loops' per-token loops: forward saves the inputs, r and p, like
// the recomputing form; backward rebuilds V per token.
struct AttnResFusedFunction : public torch::autograd::Function<AttnResFusedFunction> {
  static attn_res_loops::Shape shape(const at::Tensor& stack, double eps) {
    return {stack.size(-2), stack.size(-1), eps};
  }

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& stack_in,
                            const at::Tensor& partial_in, const at::Tensor& proj,
                            const at::Tensor& norm, double eps) {
    using namespace loop_tensors;
    auto stack = stack_in.contiguous(), partial = partial_in.contiguous();
    const auto s = shape(stack, eps);
    const int64_t tokens = partial.numel() / s.D;
    const auto acc = accum_dtype(partial.scalar_type());
    auto q = (norm.to(acc) * proj.to(acc)).contiguous();
    auto out = at::empty_like(partial);
    auto r = at::empty({tokens, s.N + 1}, partial.options().dtype(acc));
    auto p = at::empty_like(r);
    on_loop_type(partial.scalar_type(), "the fused AttnRes read", [&](auto tag) {
      using S = decltype(tag);
      parallel_for(0, tokens, 16, [&](int64_t t0, int64_t t1) {
        attn_res_loops::forward(s, elems<S>(stack), elems<S>(partial), q.data_ptr<Acc<S>>(),
                                elems<S>(out), r.data_ptr<Acc<S>>(), p.data_ptr<Acc<S>>(), t0,
                                t1);
      });
    });
    ctx->save_for_backward({stack, partial, proj, norm, q, r, p});
    ctx->saved_data["eps"] = eps;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    using namespace loop_tensors;
    auto saved = ctx->get_saved_variables();
    const auto &stack = saved[0], &partial = saved[1], &proj = saved[2], &norm = saved[3],
               &q = saved[4], &r = saved[5], &p = saved[6];
    const auto s = shape(stack, ctx->saved_data["eps"].toDouble());
    const int64_t tokens = partial.numel() / s.D;
    auto go = grads[0].to(q.scalar_type()).contiguous();
    auto d_stack = at::empty_like(stack), d_partial = at::empty_like(partial);
    auto dq_rows = at::empty({tokens, s.D}, q.options());
    auto dq = at::empty({s.D}, q.options());
    on_loop_type(partial.scalar_type(), "the fused AttnRes read", [&](auto tag) {
      using S = decltype(tag);
      using A = Acc<S>;
      parallel_for(0, tokens, 16, [&](int64_t t0, int64_t t1) {
        attn_res_loops::backward(s, elems<S>(stack), elems<S>(partial), q.data_ptr<A>(),
                                 r.data_ptr<A>(), p.data_ptr<A>(), go.data_ptr<A>(),
                                 elems<S>(d_stack), elems<S>(d_partial), dq_rows.data_ptr<A>(),
                                 t0, t1);
      });
      parallel_for(0, s.D, 16, [&](int64_t d0, int64_t d1) {
        attn_res_loops::sum_rows(dq_rows.data_ptr<A>(), tokens, s.D, dq.data_ptr<A>(), d0, d1);
      });
    });
    at::Tensor d_proj, d_norm;
    if (ctx->needs_input_grad(2)) d_proj = (dq * norm.to(dq.scalar_type())).to(proj.scalar_type());
    if (ctx->needs_input_grad(3)) d_norm = (dq * proj.to(dq.scalar_type())).to(norm.scalar_type());
    return {d_stack, d_partial, d_proj, d_norm, at::Tensor()};
  }
};

}  // namespace

at::Tensor attn_res_plain(const at::Tensor& stack, const at::Tensor& partial,
                          const at::Tensor& proj, const at::Tensor& norm, double eps) {
  return attn_res_forward_parts(stack, partial, proj, norm, eps, nullptr, nullptr);
}

at::Tensor attn_res_recompute(const at::Tensor& stack, const at::Tensor& partial,
                              const at::Tensor& proj, const at::Tensor& norm, double eps) {
  return AttnResFunction::apply(stack, partial, proj, norm, eps);
}

at::Tensor attn_res_fused(const at::Tensor& stack, const at::Tensor& partial,
                          const at::Tensor& proj, const at::Tensor& norm, double eps) {
  TORCH_CHECK(partial.is_cpu() && stack.is_cpu(), "attn_res_fused is a CPU kernel");
  TORCH_CHECK(loop_tensors::loop_dtype(partial.scalar_type()) &&
                  stack.scalar_type() == partial.scalar_type(),
              "attn_res_fused: stack and partial share one dtype, fp32, fp64 or bf16");
  TORCH_CHECK(stack.dim() == partial.dim() + 1 && stack.size(-1) == partial.size(-1) &&
                  stack.numel() == partial.numel() * stack.size(-2),
              "attn_res_fused: stack [..., N, D] and partial [..., D]");
  return AttnResFusedFunction::apply(stack, partial, proj, norm, eps);
}

at::Tensor attn_res(const at::Tensor& stack, const at::Tensor& partial, const at::Tensor& proj,
                    const at::Tensor& norm, double eps, AttnResImpl impl) {
  if (impl == AttnResImpl::Plain) return attn_res_plain(stack, partial, proj, norm, eps);
  if (impl == AttnResImpl::Fused && partial.is_cpu() &&
      loop_tensors::loop_dtype(partial.scalar_type()))
    return attn_res_fused(stack, partial, proj, norm, eps);
  return attn_res_recompute(stack, partial, proj, norm, eps);
}

}  // namespace parity::kernels
