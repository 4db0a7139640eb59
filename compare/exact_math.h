// The closed form of the exact flavors (kernels/exact.h), in exact integer arithmetic.
//
// Torch-free and trainer-free: it knows the model only through the formulas below, derived on
// paper from the model's definition, and computes them with Boost.Multiprecision cpp_int. For
// one token with label weight w = +1 (even label) or -1 (odd) and N label tokens in the step:
//
//   forward   x = E[tok]; for l: (opens: s_{l/lpb} = x, prefix = 0; else prefix = x)
//             x = prefix + add_l + (0, sum_n read_l[n] s_n.a);   y = x + sum_n s_n
//             loss = w (y.b + u y.a) / N
//   backward  g_y = (w u / N, w / N);  dL/du = w y.a / N;  every s_n gets g_y from the head.
//             Walking the layers down with gx = g_y:
//               dL/dadd_l += gx
//               dL/dread_l[n] += gx.b * s_n.a;   g(s_n).a += read_l[n] * gx.b
//               at a block opening, gx = g(s_{l/lpb}) (complete: its readers are all above)
//             dL/dE[tok] += gx
//   SGD       p -= lr * (sum over micro-batches and tokens)
//
// Every value is a dyadic rational, held as m * 2^e with m a cpp_int.
#pragma once

#include <boost/multiprecision/cpp_int.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace parity::compare {

class Dyadic {
 public:
  using Int = boost::multiprecision::cpp_int;
  Dyadic() = default;
  Dyadic(int64_t v) : m_(v) { normalise(); }  // NOLINT: integers convert implicitly
  static Dyadic from_double(double v);        // exact; throws on NaN or Inf
  static Dyadic pow2(int e);

  Dyadic operator+(const Dyadic& o) const;
  Dyadic operator-(const Dyadic& o) const { return *this + (-o); }
  Dyadic operator-() const;
  Dyadic operator*(const Dyadic& o) const;
  Dyadic& operator+=(const Dyadic& o) { return *this = *this + o; }
  bool operator==(const Dyadic& o) const { return m_ == o.m_ && e_ == o.e_; }
  bool operator!=(const Dyadic& o) const { return !(*this == o); }
  bool is_zero() const { return m_ == 0; }

  // Significand bits the value needs (0 for zero): it is exact in a binary format with p
  // significand bits (bf16 8, fp32 24, fp64 53) iff significand_bits() <= p (no value here
  // comes near the exponent limits).
  int significand_bits() const;
  // The nearest double; exact when significand_bits() <= 53.
  double to_double() const;
  std::string str() const;  // exact decimal, e.g. "-17/8" or "3"

 private:
  void normalise();  // odd m (or zero with e = 0)
  Int m_ = 0;
  int e_ = 0;
};

struct ExactShape {
  int n_layers = 16;
  int layers_per_block = 4;
  int vocab = 8;
};

// Parameters by FQN, in the model's FQN order, each a flat list of values.
struct ExactParams {
  std::vector<std::string> fqns;
  std::vector<std::vector<Dyadic>> values;
  const std::vector<Dyadic>& at(const std::string& fqn) const;
  std::vector<Dyadic>& at(const std::string& fqn);
};

// One micro-batch: B rows of T tokens, row-major, and their labels.
struct ExactMicrobatch {
  std::vector<int64_t> tokens, labels;
};

// The micro-batch losses of a forward pass (sum over tokens / n_global).
std::vector<Dyadic> exact_losses(const ExactShape& s, const ExactParams& p,
                                 const std::vector<ExactMicrobatch>& batch, int64_t n_global);

struct ExactStep {
  std::vector<Dyadic> mb_losses;
  Dyadic loss;                             // their sum
  std::vector<std::vector<Dyadic>> grads;  // FQN order, summed over micro-batches
};

// One training step: losses and gradients at p, then p -= lr * grads. n_global must be a
// power of two (so 1/N is exact) and lr a dyadic rational (any double is).
ExactStep exact_step(const ExactShape& s, ExactParams& p,
                     const std::vector<ExactMicrobatch>& batch, int64_t n_global,
                     const Dyadic& lr);

}  // namespace parity::compare
