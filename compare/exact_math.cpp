#include "compare/exact_math.h"

#include <cmath>
#include <stdexcept>

namespace parity::compare {

namespace mp = boost::multiprecision;

void Dyadic::normalise() {
  if (m_ == 0) {
    e_ = 0;
    return;
  }
  const unsigned z = mp::lsb(mp::abs(m_));
  m_ >>= z;  // exact: the low z bits are zero (for negatives too: they are a multiple of 2^z)
  e_ += static_cast<int>(z);
}

Dyadic Dyadic::from_double(double v) {
  if (!std::isfinite(v)) throw std::invalid_argument("exact arithmetic: a non-finite value");
  int exp = 0;
  const double f = std::frexp(v, &exp);  // v = f * 2^exp, |f| in [0.5, 1)
  Dyadic d;
  d.m_ = static_cast<int64_t>(std::ldexp(f, 53));  // exact: f has 53 significand bits
  d.e_ = exp - 53;
  d.normalise();
  return d;
}

Dyadic Dyadic::pow2(int e) {
  Dyadic d(1);
  d.e_ = e;
  return d;
}

Dyadic Dyadic::operator+(const Dyadic& o) const {
  if (m_ == 0) return o;
  if (o.m_ == 0) return *this;
  Dyadic d;
  const int e = std::min(e_, o.e_);
  d.m_ = (m_ << (e_ - e)) + (o.m_ << (o.e_ - e));
  d.e_ = e;
  d.normalise();
  return d;
}

Dyadic Dyadic::operator-() const {
  Dyadic d = *this;
  d.m_ = -d.m_;
  return d;
}

Dyadic Dyadic::operator*(const Dyadic& o) const {
  Dyadic d;
  d.m_ = m_ * o.m_;
  d.e_ = e_ + o.e_;
  d.normalise();
  return d;
}

int Dyadic::significand_bits() const {
  return m_ == 0 ? 0 : static_cast<int>(mp::msb(mp::abs(m_))) + 1;
}

double Dyadic::to_double() const { return std::ldexp(m_.convert_to<double>(), e_); }

std::string Dyadic::str() const {
  if (e_ >= 0) return Int(m_ << e_).str();
  return m_.str() + "/" + (Int(1) << -e_).str();
}

const std::vector<Dyadic>& ExactParams::at(const std::string& fqn) const {
  for (size_t i = 0; i < fqns.size(); ++i)
    if (fqns[i] == fqn) return values[i];
  throw std::out_of_range("exact model: no parameter '" + fqn + "'");
}

std::vector<Dyadic>& ExactParams::at(const std::string& fqn) {
  return const_cast<std::vector<Dyadic>&>(static_cast<const ExactParams&>(*this).at(fqn));
}

namespace {

struct Pair {
  Dyadic a, b;
};

// The parameters a token touches, looked up once.
struct View {
  const std::vector<Dyadic>* emb;
  std::vector<const std::vector<Dyadic>*> add, read;
  Dyadic u;
  View(const ExactShape& s, const ExactParams& p) : emb(&p.at("tok_embeddings.weight")) {
    for (int l = 0; l < s.n_layers; ++l) {
      const std::string q = "layers." + std::to_string(l) + ".";
      add.push_back(&p.at(q + "add.weight"));
      read.push_back(&p.at(q + "read.weight"));
    }
    u = p.at("output.weight").at(0);
  }
};

Dyadic inverse_pow2(int64_t n) {
  if (n <= 0 || (n & (n - 1)) != 0)
    throw std::invalid_argument("exact model: N_global = " + std::to_string(n) +
                                " is not a power of two, so 1/N is not exact; use a batch "
                                "shape with a power-of-two token count");
  int k = 0;
  while ((int64_t{1} << k) < n) ++k;
  return Dyadic::pow2(-k);
}

int64_t checked_token(const ExactShape& s, int64_t tok) {
  if (tok < 0 || tok >= s.vocab)
    throw std::out_of_range("exact model: token " + std::to_string(tok) + " outside vocab " +
                            std::to_string(s.vocab));
  return tok;
}

// The forward of one token: the stack entries, the final x, and the loss numerator.
struct TokenForward {
  std::vector<Pair> stack;
  Pair x;
  Pair y;
  Dyadic w;  // +1 or -1
};

TokenForward forward_token(const ExactShape& s, const View& v, int64_t tok, int64_t label) {
  TokenForward f;
  tok = checked_token(s, tok);
  f.x = {(*v.emb)[2 * tok], (*v.emb)[2 * tok + 1]};
  for (int l = 0; l < s.n_layers; ++l) {
    Pair prefix = f.x;
    if (l % s.layers_per_block == 0) {
      f.stack.push_back(f.x);
      prefix = {0, 0};
    }
    Dyadic r = 0;
    const auto& read = *v.read[l];
    for (size_t n = 0; n < f.stack.size(); ++n) r += read.at(n) * f.stack[n].a;
    const auto& add = *v.add[l];
    f.x = {prefix.a + add[0], prefix.b + add[1] + r};
  }
  f.y = f.x;
  for (const auto& e : f.stack) f.y = {f.y.a + e.a, f.y.b + e.b};
  f.w = (label & 1) ? Dyadic(-1) : Dyadic(1);
  return f;
}

}  // namespace

std::vector<Dyadic> exact_losses(const ExactShape& s, const ExactParams& p,
                                 const std::vector<ExactMicrobatch>& batch, int64_t n_global) {
  const View v(s, p);
  const Dyadic inv_n = inverse_pow2(n_global);
  std::vector<Dyadic> out;
  for (const auto& mb : batch) {
    Dyadic sum = 0;
    for (size_t t = 0; t < mb.tokens.size(); ++t) {
      auto f = forward_token(s, v, mb.tokens[t], mb.labels.at(t));
      sum += f.w * (f.y.b + v.u * f.y.a);
    }
    out.push_back(sum * inv_n);
  }
  return out;
}

ExactStep exact_step(const ExactShape& s, ExactParams& p,
                     const std::vector<ExactMicrobatch>& batch, int64_t n_global,
                     const Dyadic& lr) {
  ExactStep out;
  out.mb_losses = exact_losses(s, p, batch, n_global);
  for (const auto& l : out.mb_losses) out.loss += l;

  const View v(s, p);
  const Dyadic inv_n = inverse_pow2(n_global);
  auto& g = out.grads;
  for (const auto& vals : p.values) g.emplace_back(vals.size());
  auto grad = [&](const std::string& fqn) -> std::vector<Dyadic>& {
    for (size_t i = 0; i < p.fqns.size(); ++i)
      if (p.fqns[i] == fqn) return g[i];
    throw std::out_of_range("exact model: no parameter '" + fqn + "'");
  };
  auto& g_emb = grad("tok_embeddings.weight");
  auto& g_u = grad("output.weight");
  std::vector<std::vector<Dyadic>*> g_add, g_read;
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string q = "layers." + std::to_string(l) + ".";
    g_add.push_back(&grad(q + "add.weight"));
    g_read.push_back(&grad(q + "read.weight"));
  }

  for (const auto& mb : batch)
    for (size_t t = 0; t < mb.tokens.size(); ++t) {
      const int64_t tok = mb.tokens[t];
      auto f = forward_token(s, v, tok, mb.labels.at(t));
      const Pair g_y{f.w * v.u * inv_n, f.w * inv_n};
      g_u[0] += f.w * f.y.a * inv_n;
      std::vector<Pair> g_stack(f.stack.size(), g_y);  // the head reads every entry
      Pair gx = g_y;
      for (int l = s.n_layers - 1; l >= 0; --l) {
        auto& ga = *g_add[l];
        ga[0] += gx.a;
        ga[1] += gx.b;
        const auto& read = *v.read[l];
        auto& gr = *g_read[l];
        for (size_t n = 0; n < read.size(); ++n) {
          gr[n] += gx.b * f.stack[n].a;
          g_stack[n].a += read[n] * gx.b;
        }
        if (l % s.layers_per_block == 0) gx = g_stack[l / s.layers_per_block];
      }
      g_emb[2 * tok] += gx.a;
      g_emb[2 * tok + 1] += gx.b;
    }

  for (size_t i = 0; i < p.values.size(); ++i)
    for (size_t j = 0; j < p.values[i].size(); ++j) p.values[i][j] = p.values[i][j] - lr * g[i][j];
  return out;
}

}  // namespace parity::compare
