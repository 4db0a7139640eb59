// Tensors handed to the torch-free loop kernels (kda_prep, attn_res_loops): the element
// pointer each takes (fp32, fp64, or bf16 as its 16 bits) and a dispatch on the dtype.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <type_traits>

namespace parity::kernels::loop_tensors {

template <class S>
S* elems(const at::Tensor& t) {
  if constexpr (std::is_same_v<S, uint16_t>)
    return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
  else
    return t.data_ptr<S>();
}

// The accumulation type of a loop element type (fp32 for bf16).
template <class S>
using Acc = std::conditional_t<std::is_same_v<S, uint16_t>, float, S>;

inline bool loop_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16;
}

// Calls f with a value of the loop element type of dtype t (`what` names the caller).
template <class F>
void on_loop_type(at::ScalarType t, const char* what, F&& f) {
  switch (t) {
    case at::kFloat: return f(float{});
    case at::kDouble: return f(double{});
    case at::kBFloat16: return f(uint16_t{});
    default: TORCH_CHECK(false, what, " runs in fp32, fp64 or bf16, not ", t);
  }
}

}  // namespace parity::kernels::loop_tensors
