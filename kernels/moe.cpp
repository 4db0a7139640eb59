#include "kernels/moe.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "kernels/layer_checkpoint.h"
#include "kernels/ops.h"
#include "kernels/precision.h"

namespace parity::kernels {

void observe_required_bias(const at::Tensor& scores, const at::Tensor& cutoff,
                           const at::Tensor& bias, at::Tensor& histogram) {
  at::NoGradGuard no_grad;
  const int64_t bins = histogram.size(1);
  const auto lower = bias.min() - 1.0;
  const auto width = (bias.max() - bias.min() + 2.0) / static_cast<double>(bins);
  const auto required = cutoff - scores;                                     // [N,E]
  auto index = at::floor((required - lower) / width).to(at::kLong).clamp_(0, bins - 1);
  auto index_EN = index.transpose(0, 1);
  histogram.scatter_add_(1, index_EN, at::ones_like(index_EN, histogram.options()));
}

at::Tensor estimate_expert_bias(const at::Tensor& histogram, const at::Tensor& bias,
                                int64_t top_k) {
  at::NoGradGuard no_grad;
  const int64_t E = histogram.size(0), bins = histogram.size(1);
  const auto counts = histogram.sum(-1, /*keepdim=*/false, at::kLong);
  const auto target = counts.to(at::kFloat) * (static_cast<double>(top_k) / E);
  const auto cumulative = histogram.cumsum(-1, at::kLong);
  const auto rank = target.ceil().to(at::kLong);
  const auto bin = (cumulative < rank.unsqueeze(-1)).sum(-1);               // [E] int64
  const auto bin1 = bin.unsqueeze(-1);
  const auto in_bin = histogram.gather(-1, bin1).squeeze(-1);
  const auto before = cumulative.gather(-1, bin1).squeeze(-1) - in_bin;
  const auto fraction = (target - before.to(at::kFloat)) / in_bin.to(at::kFloat);
  const auto width = (bias.max() - bias.min() + 2.0) / static_cast<double>(bins);
  const auto position = bin.to(at::kFloat) + fraction;
  return (position - position.mean()) * width;
}

MoeBuffers moe_buffers(const NamedTensors& buffers, int layer) {
  const std::string p = "layers." + std::to_string(layer) + ".moe.";
  return {buffers.at(p + "expert_bias_E"), buffers.at(p + "router.tokens_per_expert_E"),
          buffers.at(p + "router.quantile_balancer.required_bias_histogram_EB")};
}

void clear_expert_counts(const ModelConfig& c, NamedTensors& buffers) {
  if (!c.has_moe()) return;
  for (int l = 0; l < c.n_layers; ++l) {
    if (c.ffn(l) != FfnKind::MoE) continue;
    auto b = moe_buffers(buffers, l);
    b.histogram.zero_();
    b.tokens_per_expert.zero_();
  }
}

void update_expert_biases(const ModelConfig& c, NamedTensors& buffers) {
  if (!c.has_moe()) return;
  at::NoGradGuard no_grad;
  for (int l = 0; l < c.n_layers; ++l) {
    if (c.ffn(l) != FfnKind::MoE) continue;
    auto b = moe_buffers(buffers, l);
    b.expert_bias.copy_(estimate_expert_bias(b.histogram, b.expert_bias, c.top_k));
  }
  clear_expert_counts(c, buffers);
}

at::Tensor moe(const at::Tensor& x, const MoeWeights& w, const MoeBuffers& b,
               const ModelConfig& c, bool training) {
  const auto stream = x.scalar_type();
  const auto acc = accum_dtype(stream);
  const int64_t D = x.size(-1), E = w.gate.size(0), K = c.top_k;
  auto xf = x.reshape({-1, D});                                          // [N,D]
  const int64_t N = xf.size(0);

  // The router (RouterGateLinear: an fp32 product on CPU; the sigmoid in fp32).
  auto scores = at::sigmoid(project(xf.to(acc), w.gate.to(acc)));       // [N,E]
  at::Tensor chosen;                                                     // [N,K]
  {
    at::NoGradGuard no_grad;
    auto biased = scores.detach() + b.expert_bias.to(acc);
    if (training) {
      auto [values, ids] = biased.topk(K + 1, -1, /*largest=*/true, /*sorted=*/true);
      chosen = ids.narrow(1, 0, K).contiguous();
      if (!recomputing()) {  // a recomputed forward (--ac layer) selects alike, counts nothing
        auto hist = b.histogram;
        observe_required_bias(scores.detach(), values.narrow(1, K, 1), b.expert_bias, hist);
        auto routed = at::zeros({N, E}, at::TensorOptions().dtype(at::kBool).device(x.device()))
                          .scatter_(1, chosen, true);
        b.tokens_per_expert.add_(routed.sum(0).to(b.tokens_per_expert.scalar_type()));
      }
    } else {
      chosen = std::get<1>(biased.topk(K, -1, /*largest=*/true, /*sorted=*/true));
    }
  }
  auto weights = scores.gather(1, chosen);
  weights = weights / (weights.sum(-1, /*keepdim=*/true) + c.route_norm_eps) * c.route_scale;

  // Dispatch on the latent: the (token, slot) pairs stably sorted by expert.
  auto z = project(xf, w.routed_down);                                   // [N,L]
  auto expert_of_pair = chosen.reshape({-1});
  auto order = std::get<1>(expert_of_pair.sort(/*stable=*/true, 0, /*descending=*/false));
  auto token_of = at::floor_divide(order, K);
  auto zs = z.index_select(0, token_of);                                 // [N*K, L]
  auto counts = at::bincount(expert_of_pair, {}, E).to(at::kCPU);
  // Each expert's w13 on its rows, SiTU-GLU once over all rows (element-wise, so the
  // same per row as per expert), each expert's w2: grouped products, each group's bits
  // those of project() on its rows, all experts in one parallel region.
  const std::vector<int64_t> cnt(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + E);
  const int64_t H = w.w13.size(2);
  auto gu = grouped_project(zs, w.w13.reshape({E, 2 * H, -1}), cnt);     // [N*K, 2H]
  auto act = situ_glu_rows(gu, c.situ_beta, c.situ_linear_beta);         // [N*K, H]
  auto ys = grouped_project(act, w.w2, cnt);                             // expert-sorted rows
  auto w_sorted = weights.reshape({-1}).index_select(0, order);
  auto rows = (ys.to(acc) * w_sorted.unsqueeze(-1)).to(stream);         // weighted, cast back

  // Combine: each token's rows, in their expert-sorted positions (ascending expert), added
  // onto zero one after the other in the stream dtype.
  auto position = at::empty_like(order).scatter_(0, order, at::arange(N * K, order.options()));
  auto slots = std::get<0>(position.view({N, K}).sort(1));               // [N,K] ascending
  auto gathered = rows.index_select(0, slots.reshape({-1})).view({N, K, -1});
  auto routed = gathered.select(1, 0);
  for (int64_t k = 1; k < K; ++k) routed = routed + gathered.select(1, k);

  // The last products: their outputs enter only the layer's output sum.
  const auto last = recomputing() ? ProductValue::Unread : ProductValue::Read;
  auto y = project(rms_norm(routed, w.routed_norm, c.norm_eps), w.routed_up, last);
  if (w.shared_w13.defined())
    y = y + glu_ffn(xf, w.shared_w13, w.shared_w2, c.situ_beta, c.situ_linear_beta, last);
  return y.view(x.sizes());
}

}  // namespace parity::kernels
