// One AdamW step as a single loop over a parameter's elements (no torch), which AdamW::step
// runs on CPU. Per element, in the accumulation type A (fp32 for bf16, else the element type),
// with every constant rounded to A first, it performs torch's fused CPU AdamW
// (aten/src/ATen/native/cpu/FusedAdamKernel.cpp, the vectorised body; torchtitan asks for
// fused=True):
//
//   p = p * decay                                   (decay = 1 - lr wd)
//   m = fma(w, g - m, m)          for |w| < 0.5     (the lerp m -> g by w = 1 - beta1,
//   m = fma(w - 1, g - m, g)      otherwise          one rounding for product and sum)
//   v = v * beta2 + ((1 - beta2) g) g
//   p = p + ((-step_size) m) / (sqrt(v) / bc2_sqrt + eps)
//
// and stores p, m and v once each. Apart from the explicit fma it is built without FMA
// contraction; the elements are independent, so the bits depend neither on the range split nor
// on the vector ISA. (torch's scalar tail, the last numel mod 16 or 32 elements of a bf16
// tensor, writes the lerp without fma; docs/design.md section 10.5.)
#pragma once

#include <cstdint>

namespace parity::kernels::adamw_loop {

struct Constants {
  double decay, lerp_weight, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;
};

// Elements [i0, i1) of p, g, m, v (one dtype: fp32, fp64, or bf16 as its 16 bits).
void update(const Constants& c, float* p, const float* g, float* m, float* v, int64_t i0,
            int64_t i1);
void update(const Constants& c, double* p, const double* g, double* m, double* v, int64_t i0,
            int64_t i1);
void update(const Constants& c, uint16_t* p, const uint16_t* g, uint16_t* m, uint16_t* v,
            int64_t i0, int64_t i1);

}  // namespace parity::kernels::adamw_loop
