#include "kernels/moe.h"

#include <ATen/ATen.h>

#include <vector>

#include "kernels/ops.h"
#include "kernels/precision.h"

namespace parity::kernels {

at::Tensor moe(const at::Tensor& x, const MoeWeights& w, int64_t top_k) {
  const auto stream = x.scalar_type();
  const auto acc = accum_dtype(stream);
  const int64_t D = x.size(-1), E = w.router.size(0);
  auto xf = x.reshape({-1, D});                                          // [N,D]
  const int64_t N = xf.size(0);

  auto scores = at::sigmoid(project(xf.to(acc), w.router.to(acc)));       // [N,E]
  at::Tensor chosen;                                                     // [N,k]
  {
    at::NoGradGuard no_grad;
    auto biased = scores.detach() + w.selection_bias.to(acc);
    chosen = std::get<1>(biased.topk(top_k, -1, /*largest=*/true, /*sorted=*/true));
  }
  auto weights = scores.gather(1, chosen);
  weights = weights / weights.sum(-1, /*keepdim=*/true);                 // [N,k] acc

  // Stable sort of the N*k (token, slot) pairs by expert: within an expert, token order.
  auto expert_of_pair = chosen.reshape({-1});
  auto order = std::get<1>(expert_of_pair.sort(/*stable=*/true, 0, /*descending=*/false));
  auto counts = at::bincount(expert_of_pair, {}, E).to(at::kCPU);
  auto token_of = at::floor_divide(order, top_k);
  auto xs = xf.index_select(0, token_of);                                // [N*k, D]

  std::vector<at::Tensor> outs;
  outs.reserve(E);
  const auto* cnt = counts.data_ptr<int64_t>();
  int64_t offset = 0;
  for (int64_t e = 0; e < E; ++e) {
    if (cnt[e] == 0) continue;
    auto seg = xs.narrow(0, offset, cnt[e]);
    outs.push_back(swiglu(seg, w.w1[e], w.w3[e], w.w2[e]));
    offset += cnt[e];
  }
  auto ys = at::cat(outs, 0);                                            // sorted order
  auto placed = at::zeros({N * top_k, D}, ys.options()).index_copy(0, order, ys);
  auto routed = (placed.view({N, top_k, D}).to(acc) * weights.unsqueeze(-1)).sum(1);
  auto y = routed.to(stream);
  if (w.shared_w1.defined()) y = y + swiglu(xf, w.shared_w1, w.shared_w3, w.shared_w2);
  return y.view(x.sizes());
}

}  // namespace parity::kernels
