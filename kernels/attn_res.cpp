#include "kernels/attn_res.h"

#include <torch/torch.h>

#include "kernels/precision.h"

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

}  // namespace

at::Tensor attn_res_plain(const at::Tensor& stack, const at::Tensor& partial,
                          const at::Tensor& proj, const at::Tensor& norm, double eps) {
  return attn_res_forward_parts(stack, partial, proj, norm, eps, nullptr, nullptr);
}

at::Tensor attn_res_recompute(const at::Tensor& stack, const at::Tensor& partial,
                              const at::Tensor& proj, const at::Tensor& norm, double eps) {
  return AttnResFunction::apply(stack, partial, proj, norm, eps);
}

at::Tensor attn_res(const at::Tensor& stack, const at::Tensor& partial, const at::Tensor& proj,
                    const at::Tensor& norm, double eps, AttnResImpl impl) {
  return impl == AttnResImpl::Plain ? attn_res_plain(stack, partial, proj, norm, eps)
                                    : attn_res_recompute(stack, partial, proj, norm, eps);
}

}  // namespace parity::kernels
