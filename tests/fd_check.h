// Shared helpers of the kernel test suites: unit roundoffs, gamma_n, single-thread pinning,
// the 1-vs-2-threads bitwise check and the directional finite-difference checker.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernels/threads.h"

namespace parity::testing {

// Verification runs pin threads to 1 (docs/design.md section 3); so do the tests (torch's
// intra-op pool and OpenBLAS's own).
class SingleThread : public ::testing::Environment {
 public:
  void SetUp() override { parity::kernels::pin_threads(1); }
};
[[maybe_unused]] inline ::testing::Environment* const kSingleThread =
    ::testing::AddGlobalTestEnvironment(new SingleThread);

constexpr double kU32 = 0x1p-24, kU64 = 0x1p-53, kUbf16 = 0x1p-8;

inline double gamma(double n, double u) { return n * u / (1 - n * u); }

inline const char* dtype_name(at::ScalarType t) {
  return t == at::kDouble ? "fp64" : t == at::kBFloat16 ? "bf16" : "fp32";
}

inline at::TensorOptions f64() { return at::TensorOptions().dtype(at::kDouble); }

// Bitwise: run() gives the same tensors on 2 intra-op threads as on the 1 the suites pin.
inline void expect_thread_count_free(const std::function<std::vector<at::Tensor>()>& run) {
  auto one = run();
  parity::kernels::pin_threads(2);
  auto two = run();
  parity::kernels::pin_threads(1);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_TRUE(one[i].equal(two[i])) << "output/gradient " << i << " differs";
}

// ---------------------------------------------------------------------------------------
// Directional finite differences (with a hook that sees every perturbed point).
//
// L(x) = sum(f(x) * R), R a fixed N(0,1) tensor. For each input x_i and a few random unit
// directions v: err = |<dL/dx_i, v> - (L(x_i + h v) - L(x_i - h v)) / 2h| / ||dL/dx_i||_2.
//
// Tolerance (fp64). Truncation of the central difference is (h^2/6) |D^3 L[v,v,v]|; for the
// O(1) inputs used here the third derivative along a unit direction is within a factor 100
// of ||g||, so with h = 1e-5 truncation is < 2e-9 relative. Roundoff: each evaluation of L
// is within gamma_m |L|_abs (m < 1000, the longest accumulation), ~1e-13 |L|_abs, and the
// quotient divides by 2h: ~1e-8 |L|_abs / ||g||, with |L|_abs / ||g|| = O(1) here. h = 1e-5
// is near the optimum u^(1/3). kFdTol = 1e-7 keeps a factor >= 5 over the larger estimate;
// a wrong gradient (a missing or extra term) gives an O(1) relative error.
constexpr double kFdStep = 1e-5;
constexpr double kFdTol = 1e-7;

using TensorFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;
using PointHook = std::function<void(const std::vector<at::Tensor>&)>;

struct FdResult {
  double worst = 0;
  std::string where;
};

inline FdResult directional_fd(const TensorFn& f, const std::vector<at::Tensor>& inputs,
                        const std::vector<std::string>& names, uint64_t seed, int n_dirs = 3,
                        const PointHook& at_point = nullptr) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<at::Tensor> leaves;
  for (const auto& x : inputs) leaves.push_back(x.detach().clone().requires_grad_(true));
  auto out = f(leaves);
  auto R = at::randn(out.sizes(), gen, out.options().requires_grad(false));
  auto grads = torch::autograd::grad({(out * R).sum()}, leaves, {}, false, false, true);
  double total_sq = 0;
  for (auto& g : grads)
    if (g.defined()) total_sq += g.pow(2).sum().item<double>();
  auto eval = [&](const std::vector<at::Tensor>& xs) {
    at::NoGradGuard no_grad;
    if (at_point) at_point(xs);
    return (f(xs) * R).sum().item<double>();
  };
  FdResult res;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i].numel() == 0) continue;
    auto g = grads[i].defined() ? grads[i] : at::zeros_like(leaves[i]);
    double scale = g.norm().item<double>();
    if (scale == 0) scale = std::sqrt(total_sq);
    for (int d = 0; d < n_dirs; ++d) {
      auto v = at::randn(leaves[i].sizes(), gen, leaves[i].options().requires_grad(false));
      v = v / v.norm();
      const double analytic = (g * v).sum().item<double>();
      std::vector<at::Tensor> xs;
      for (auto& l : leaves) xs.push_back(l.detach());
      xs[i] = leaves[i].detach() + kFdStep * v;
      const double lp = eval(xs);
      xs[i] = leaves[i].detach() - kFdStep * v;
      const double lm = eval(xs);
      const double numeric = (lp - lm) / (2 * kFdStep);
      const double err = std::abs(analytic - numeric) / scale;
      if (!(err <= res.worst)) {
        res.worst = err;
        res.where = names[i] + " (analytic " + std::to_string(analytic) + ", numeric " +
                    std::to_string(numeric) + ")";
      }
    }
  }
  return res;
}

}  // namespace parity::testing
