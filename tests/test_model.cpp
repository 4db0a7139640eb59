// Tests for the whole model (kernels/model.h), flavor tiny: the layer wiring equals
// torchtitan's block (docs/design.md section 10; bitwise); causality (changing token t leaves the
// logits at positions < t unchanged up to reduction order, fp64); in fp64 the loss and
// parameter gradients of a 2-row batch equal the sums over the rows run one at a time; and in
// fp64 the chunked loss (ChunkedLossWrapper) and its gradients equal the unchunked ones; the
// weights' list (NamedTensors) shares its names between copies.
//
// The bitwise checks are the tests named *Bitwise*; every other test is a tolerance test whose
// bound is derived next to it. All inputs come from fixed seeds.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/config.h"
#include "kernels/documents.h"
#include "kernels/mla.h"
#include "kernels/model.h"
#include "kernels/moe.h"
#include "kernels/op_family.h"
#include "kernels/ops.h"
#include "kernels/params.h"
#include "kernels/threads.h"
#include "tests/fd_check.h"

namespace k = parity::kernels;

namespace {

using namespace parity::testing;

// ---------------------------------------------------------------------------------------
// The whole model, flavor tiny.

// tiny's parameters from init_params(cfg, 0) in dtype dt, with every AttnRes pseudo-query
// (*_res_proj.weight, trunc_normal(0.02) at init) replaced by N(0, 0.5^2) so the reads are
// far from uniform.
k::NamedTensors tiny_params(const k::ModelConfig& cfg, at::ScalarType dt) {
  auto p = k::init_params(cfg, 0);
  auto gen = at::detail::createCPUGenerator(31);
  std::vector<at::Tensor> ts;
  for (size_t i = 0; i < p.size(); ++i) {
    const auto& name = p.names()[i];
    const bool pseudo_query = name.find("_res_proj.weight") != std::string::npos;
    ts.push_back(pseudo_query ? 0.5 * at::randn(p[i].sizes(), gen, f64()) : p[i]);
    ts.back() = ts.back().to(dt);
  }
  return k::NamedTensors(p.names(), ts);
}

// NamedTensors (kernels/params.h): with() and copies share the names and their index, and each
// list holds its own tensor handles.
TEST(NamedTensors, WithSharesTheNamesAndKeepsItsOwnTensors) {
  const auto p = k::init_params(k::flavor("tiny"), 0);
  std::vector<at::Tensor> doubled;
  for (const auto& t : p.tensors()) doubled.push_back(2 * t);
  auto q = p.with(doubled);
  EXPECT_EQ(&q.names(), &p.names());  // shared, not copied
  ASSERT_EQ(q.size(), p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(q.index_of(p.names()[i]), i);
    EXPECT_TRUE(at::equal(q.at(p.names()[i]), 2 * p[i])) << p.names()[i];
  }
  auto copy = q;
  copy[0] = at::zeros_like(q[0]);
  EXPECT_TRUE(at::equal(q[0], 2 * p[0])) << "a copy's handles changed the original's";
  try {
    (void)p.with({p[0]});
    FAIL() << "one tensor for " << p.size() << " names was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("1 tensors for " + std::to_string(p.size()) + " names"),
              std::string::npos)
        << e.what();
  }
  const k::NamedTensors none;
  EXPECT_EQ(none.size(), 0u);
  EXPECT_TRUE(none.names().empty());
  EXPECT_FALSE(none.contains(p.names()[0]));
  EXPECT_THROW((void)none.at(p.names()[0]), std::out_of_range);
}

at::Tensor logits_of(const k::Model& model, const k::NamedTensors& w, const k::NamedTensors& b,
                     const at::Tensor& tokens) {
  auto s = model.embed(w, tokens);
  for (int l = 0; l < model.config().n_layers; ++l) s = model.layer(l, w, b, s, false);
  return model.head_logits(w, s);
}

// The layer wiring of torchtitan's KimiK3TransformerBlock (docs/design.md section 10),
// re-derived here from the sheet and run with the kernels' own ops and arguments (fp32, tiny,
// all 17 layers and the head, a forward-only pass): the loss is bitwise equal to Model's
// with one loss chunk and n_global = 1, since the same ops run on the same values in the same
// order. A wiring slip (the stack committed before the read, prefix not reset when a block
// opens, the FFN reading the wrong stack) changes the loss by O(1).
at::Tensor loss_by_design(const k::ModelConfig& c, const k::NamedTensors& w,
                          const k::NamedTensors& buffers, const at::Tensor& tokens,
                          const at::Tensor& labels) {
  auto W = [&](const std::string& n) { return w.at(n); };
  auto read = [&](const at::Tensor& stack, const at::Tensor& partial, const std::string& proj,
                  const std::string& norm) {
    return k::attn_res(stack, partial, W(proj).select(0, 0), W(norm), c.norm_eps);
  };
  auto x = k::embed_tokens(tokens, W("tok_embeddings.weight"));
  auto stack = x.new_empty({x.size(0), x.size(1), 0, x.size(2)});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const bool opens = l % c.layers_per_block == 0;
    auto prefix = x;
    if (stack.size(2) > 0)
      x = read(stack, prefix, p + "attention_res_proj.weight", p + "attention_res_norm.weight");
    if (opens) stack = at::cat({stack, prefix.unsqueeze(2)}, 2);
    auto hin = k::rms_norm(x, W(p + "attention_norm.weight"), c.norm_eps);
    at::Tensor h;
    if (l % 4 == 3 || l == c.n_layers - 1) {  // MLA layers of the (3 KDA + 1 MLA) pattern
      const std::string a = p + "attention.";
      h = k::mla(hin,
                 {W(a + "wq_a.weight"), W(a + "q_norm.weight"), W(a + "wq_b.weight"),
                  W(a + "wkv_a.weight"), W(a + "kv_norm.weight"), W(a + "wkv_b.weight"),
                  W(a + "gate.weight"), W(a + "wo.weight")},
                 {c.n_heads, c.q_lora, c.kv_lora, c.qk_nope, c.qk_rope, c.v_head, c.norm_eps});
    } else {
      const std::string a = p + "delta_attention.";
      h = k::kda(hin,
                 {W(a + "q_proj.weight"), W(a + "k_proj.weight"), W(a + "v_proj.weight"),
                  W(a + "q_conv.weight"), W(a + "k_conv.weight"), W(a + "v_conv.weight"),
                  W(a + "beta.weight"), W(a + "forget_a.weight"), W(a + "forget_b.weight"),
                  W(a + "A_log"), W(a + "dt_bias"), W(a + "output_norm.weight"),
                  W(a + "output_gate.weight"), W(a + "output_proj.weight")},
                 {c.n_heads, c.kda_head, c.kda_conv, c.kda_chunk, 1e-6, -5.0, 1e-5});
    }
    prefix = opens ? h : prefix + h;
    h = read(stack, prefix, p + "ffn_res_proj.weight", p + "ffn_res_norm.weight");
    h = k::rms_norm(h, W(p + "ffn_norm.weight"), c.norm_eps);
    if (l == 0) {
      h = k::glu_ffn(h, W(p + "feed_forward.w13.weight"), W(p + "feed_forward.w2.weight"), 4.0,
                     25.0);
    } else {
      const std::string m = p + "moe.";
      k::MoeWeights mw;
      mw.gate = W(m + "router.gate.weight");
      mw.w13 = W(m + "routed_experts.w13.weight");
      mw.w2 = W(m + "routed_experts.w2.weight");
      mw.shared_w13 = W(m + "shared_experts.w13.weight");
      mw.shared_w2 = W(m + "shared_experts.w2.weight");
      mw.routed_down = W(m + "routed_down.weight");
      mw.routed_norm = W(m + "routed_norm.weight");
      mw.routed_up = W(m + "routed_up.weight");
      k::MoeBuffers mb{buffers.at(m + "expert_bias_E"),
                       buffers.at(m + "router.tokens_per_expert_E"),
                       buffers.at(m + "router.quantile_balancer.required_bias_histogram_EB")};
      h = k::moe(h, mw, mb, c, /*training=*/false);
    }
    x = prefix + h;
  }
  auto h = read(stack, x, "output_res_proj.weight", "output_res_norm.weight");
  auto logits = k::project(k::rms_norm(h, W("norm.weight"), c.norm_eps), W("lm_head.weight"));
  EXPECT_EQ(stack.size(2), c.n_blocks());
  return k::cross_entropy_sum(logits, labels);
}

TEST(ModelWiring, LossEqualsTorchtitanBlockBitwise) {
  auto cfg = k::flavor("tiny");
  ASSERT_GT(cfg.n_shared, 0);
  auto w = tiny_params(cfg, at::kFloat);
  auto b = k::init_buffers(cfg);
  auto gen = at::detail::createCPUGenerator(45);
  auto li = at::TensorOptions().dtype(at::kLong);
  auto tokens = at::randint(cfg.vocab, {2, 16}, gen, li);
  auto labels = at::randint(cfg.vocab, {2, 16}, gen, li);
  auto ref = loss_by_design(cfg, w, b, tokens, labels);
  k::ModelOptions one_chunk;
  one_chunk.loss_chunks = 1;
  auto loss = k::Model(cfg, one_chunk).loss(w, b, tokens, labels, 1.0, false).loss();
  EXPECT_TRUE(torch::equal(loss, ref))
      << "model " << loss.item<double>() << " vs torchtitan's block " << ref.item<double>();
}

// Causality: changing token t must not change the logits at positions < t, and must change
// them at positions >= t (so the test can fail).
//
// Not bitwise: the rows of a position < t go through the same ops on the same values, but
// the MoE runs each expert on the run of tokens that chose it, and a change at t can alter
// how many tokens an expert gets; a GEMM over a 1-row segment takes a different BLAS path
// (gemv) than over several rows and rounds differently (measured on this BLAS: rows of
// x @ W^T differ in the last bits between M = 1 and M >= 2). So earlier positions may move
// by reduction-order differences only. Bound, fp64, relative to max |logits|: every op is
// a contraction of depth <= 64 (dim 32, dense hidden 64, H*K 32, T 16) within
// 2 gamma_64 = 1.4e-14 of the exact value in the abs-value scale; tiny runs <= 16 such ops
// per layer over 17 layers and the head, and the normalised residual reads keep the
// per-layer growth O(1): 18 * 16 * 2 gamma_64 = 4.1e-12. A leak (a mask off by one, a chunk
// reading the next chunk) moves earlier logits by O(1e-2) or more. Run for t inside a chunk
// (5) and at a chunk start (8; tiny's chunk is 8), with both AttnRes and both KDA forms.
TEST(ModelCausality, LaterTokenLeavesEarlierLogitsFp64) {
  auto cfg = k::flavor("tiny");
  ASSERT_EQ(cfg.n_layers, 17);
  ASSERT_EQ(cfg.kda_chunk, 8);
  auto w = tiny_params(cfg, at::kDouble);
  auto b = k::init_buffers(cfg);
  const int64_t T = 16;
  const double bound = 18 * 16 * 2 * gamma(64, kU64);
  auto gen = at::detail::createCPUGenerator(41);
  auto tokens = at::randint(cfg.vocab, {1, T}, gen, at::TensorOptions().dtype(at::kLong));
  double worst = 0;
  for (auto opts : {k::ModelOptions{}, k::ModelOptions{k::AttnResImpl::Plain,
                                                       k::KdaImpl::Recurrent}}) {
    k::Model model(cfg, opts);
    auto base = logits_of(model, w, b, tokens);
    ASSERT_EQ(base.sizes(), (std::vector<int64_t>{1, T, cfg.vocab}));
    const double scale = base.abs().max().item<double>();
    for (int64_t t : {5, 8}) {
      SCOPED_TRACE("changed token at " + std::to_string(t));
      auto changed = tokens.clone();
      changed[0][t] = (changed[0][t].item<int64_t>() + 1) % cfg.vocab;
      auto moved = logits_of(model, w, b, changed);
      const double before =
          (moved.narrow(1, 0, t) - base.narrow(1, 0, t)).abs().max().item<double>() / scale;
      EXPECT_LE(before, bound);
      worst = std::max(worst, before);
      for (int64_t s = t; s < T; ++s) {
        const double after = (moved.select(1, s) - base.select(1, s)).abs().max().item<double>();
        EXPECT_GT(after / scale, 1e-6) << "position " << s << " did not see the change";
      }
    }
  }
  std::cout << "[ observed ] causality fp64: max |change before t| / max|logits| = " << worst
            << " (bound " << bound << ")\n";
}

// The loss of a batch (kernels::HeadLoss, a training pass) and the parameter gradients of its
// backward, in fp64, on fresh leaves (the buffers keep their counts: they do not feed the
// loss while the bias stays at zero).
std::pair<double, std::vector<at::Tensor>> loss_and_grads(const k::Model& model,
                                                          const k::NamedTensors& w,
                                                          const k::NamedTensors& b,
                                                          const at::Tensor& tok,
                                                          const at::Tensor& lab) {
  std::vector<at::Tensor> leaves;
  for (auto& t : w.tensors()) leaves.push_back(t.detach().clone().requires_grad_(true));
  k::NamedTensors lw(w.names(), leaves);
  auto loss = model.loss(lw, b, tok, lab, 1.0, /*training=*/true);
  loss.backward();
  std::vector<at::Tensor> g;
  for (auto& l : leaves) g.push_back(l.grad().defined() ? l.grad() : at::zeros_like(l));
  return {loss.loss().item<double>(), g};
}

// Gradient lists a and b agree within rel: in the 2-norm over all parameters, and for each
// parameter (a gradient below 1e-6 of the total is compared against that floor). Returns the
// figure over all parameters; names the worst parameter in `worst`.
double compare_grads(const k::NamedTensors& w, const std::vector<at::Tensor>& a,
                     const std::vector<at::Tensor>& b, double rel, std::string& worst) {
  double diff_sq = 0, norm_sq = 0, worst_rel = 0;
  for (auto& g : a) norm_sq += g.pow(2).sum().item<double>();
  const double total = std::sqrt(norm_sq);
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = (a[i] - b[i]).norm().item<double>();
    diff_sq += d * d;
    const double r = d / std::max(a[i].norm().item<double>(), 1e-6 * total);
    EXPECT_LE(r, rel) << w.names()[i];
    if (r > worst_rel) {
      worst_rel = r;
      worst = w.names()[i] + " " + std::to_string(r);
    }
  }
  EXPECT_GT(norm_sq, 0);
  return std::sqrt(diff_sq / norm_sq);
}

// fp64: the loss over a 2-row batch equals the sum of the losses over each row alone, and so
// do the parameter gradients.
//
// The rows' computations are the same ops on the same values, except that every sum over
// tokens (the loss, each weight gradient's contraction over B*T tokens, the MoE experts'
// token segments) and any BLAS blocking that depends on the row count associate
// differently. Each such difference is <= 2 gamma_n sum|terms| with n <= the longest
// contraction (vocab = 2048 for the LM head, B*T = 32 over tokens), i.e. <= 5e-13 times
// sum|terms|; it propagates through 17 layers whose Jacobians are O(1) at init. The
// required 1e-12 relative (in the 2-norm over all parameters and for each parameter with
// a non-negligible gradient) is therefore met with the observed figure printed.
TEST(ModelBatch, LossAndGradsAreSumsOverRowsFp64) {
  auto cfg = k::flavor("tiny");
  auto w = tiny_params(cfg, at::kDouble);
  auto b = k::init_buffers(cfg);
  const int64_t T = 16;
  auto gen = at::detail::createCPUGenerator(43);
  auto li = at::TensorOptions().dtype(at::kLong);
  auto tokens = at::randint(cfg.vocab, {2, T}, gen, li);
  auto labels = at::randint(cfg.vocab, {2, T}, gen, li);
  k::Model model(cfg);

  auto [l_batch, g_batch] = loss_and_grads(model, w, b, tokens, labels);
  auto [l0, g0] = loss_and_grads(model, w, b, tokens.narrow(0, 0, 1), labels.narrow(0, 0, 1));
  auto [l1, g1] = loss_and_grads(model, w, b, tokens.narrow(0, 1, 1), labels.narrow(0, 1, 1));
  const double loss_rel = std::abs(l_batch - (l0 + l1)) / std::abs(l_batch);
  EXPECT_LE(loss_rel, 1e-12);
  std::vector<at::Tensor> sum;
  for (size_t i = 0; i < g0.size(); ++i) sum.push_back(g0[i] + g1[i]);
  std::string worst;
  const double grad_rel = compare_grads(w, g_batch, sum, 1e-12, worst);
  EXPECT_LE(grad_rel, 1e-12);
  std::cout << "[ observed ] batch vs rows fp64: loss rel " << loss_rel << ", grads rel (all) "
            << grad_rel << ", worst parameter " << worst << " (bound 1e-12)\n";
}

// fp64: the loss in 8 chunks along the sequence (torchtitan's ChunkedLossWrapper: per chunk
// lm_head, CE sum, its own backward; the hidden gradient assembled and back-propagated once)
// equals the plain loss, and so do the parameter gradients, within 1e-12 relative.
//
// Chunking changes the association of exactly two sums: the loss (8 chunk sums added in
// order instead of one sum over the B*T = 32 tokens) and lm_head's gradient (8 chunk
// contractions of 2 rows x 2 positions = 4 tokens accumulated in its .grad instead of one contraction over 32);
// every token's hidden gradient is its own row of dlogits @ W, the same ops on the same
// values (up to a BLAS blocking that depends on the row count). Each is a reordered sum of n
// <= 2048 terms (the vocabulary contraction bounds the longest), within 2 gamma_2048 = 4.6e-13
// of sum|terms|, and the hidden gradient then passes through the decoder's O(1) Jacobians as
// in LossAndGradsAreSumsOverRowsFp64: 1e-12 relative, the observed figure printed.
TEST(ModelChunkedLoss, EqualsUnchunkedFp64) {
  auto cfg = k::flavor("tiny");
  auto w = tiny_params(cfg, at::kDouble);
  auto b = k::init_buffers(cfg);
  auto gen = at::detail::createCPUGenerator(47);
  auto li = at::TensorOptions().dtype(at::kLong);
  auto tokens = at::randint(cfg.vocab, {2, 16}, gen, li);
  auto labels = at::randint(cfg.vocab, {2, 16}, gen, li);
  k::ModelOptions chunked, plain;
  chunked.loss_chunks = 8;
  plain.loss_chunks = 1;
  auto [lc, gc] = loss_and_grads(k::Model(cfg, chunked), w, b, tokens, labels);
  auto [lp, gp] = loss_and_grads(k::Model(cfg, plain), w, b, tokens, labels);
  const double loss_rel = std::abs(lc - lp) / std::abs(lp);
  EXPECT_LE(loss_rel, 1e-12);
  std::string worst;
  const double grad_rel = compare_grads(w, gc, gp, 1e-12, worst);
  EXPECT_LE(grad_rel, 1e-12);
  std::cout << "[ observed ] chunked vs plain fp64: loss rel " << loss_rel << ", grads rel (all) "
            << grad_rel << ", worst parameter " << worst << " (bound 1e-12)\n";
}

// ---------------------------------------------------------------------------------------
// Documents inside a row (kernels/documents.h).

// The starts follow torchtitan's rule: a row's first token, every BOS, the token after every
// EOS (in a BOS ... EOS stream the last two coincide); off, every row is one document.
TEST(Documents, StartAtTheRowAfterEosAndAtBos) {
  const k::DocumentRule rule{true, 1, 2};
  // row 0: a 2 b | c 2 | 1 d   (| after each EOS 2; BOS 1 opens a document by itself)
  // row 1: 1 a 2 1 b c 2 e     (BOS ... EOS BOS ...: the starts coincide at 3)
  const std::vector<int64_t> ids = {7, 2, 9, 5, 2, 1, 8, 6,  1, 7, 2, 1, 9, 5, 2, 4};
  const auto d = k::documents_of(ids.data(), 2, 8, rule);
  ASSERT_EQ(d.starts.size(), 2u);
  EXPECT_EQ(d.starts[0], (std::vector<int64_t>{0, 2, 5}));
  EXPECT_EQ(d.starts[1], (std::vector<int64_t>{0, 3, 7}));
  EXPECT_FALSE(d.whole_rows());
  const auto off = k::documents_of(ids.data(), 2, 8, k::DocumentRule{});
  EXPECT_EQ(off.starts[0], (std::vector<int64_t>{0}));
  EXPECT_TRUE(off.whole_rows());
}

// From positions: a document starts at a row's first token (whatever its position) and wherever
// the position is 0.
TEST(Documents, StartWherePositionsAreZero) {
  // row 0: 4 5 | 0 1 2 | 0 1 | 0   row 1: 0 1 2 3 4 5 6 7 (one document)
  const std::vector<int64_t> pos = {4, 5, 0, 1, 2, 0, 1, 0,  0, 1, 2, 3, 4, 5, 6, 7};
  const auto d = k::documents_at_positions(pos.data(), 2, 8);
  ASSERT_EQ(d.starts.size(), 2u);
  EXPECT_EQ(d.starts[0], (std::vector<int64_t>{0, 2, 5, 7}));
  EXPECT_EQ(d.starts[1], (std::vector<int64_t>{0}));
  // The model takes positions over the ids' rule, and only when the rule is on.
  k::ModelOptions on;
  on.documents = {true, 1, 2};
  const std::vector<int64_t> ids(16, 2);  // EOS everywhere: the rule would cut every token
  const k::Model masked(k::flavor("tiny"), on), whole(k::flavor("tiny"));
  const auto from_positions = masked.documents(ids.data(), pos.data(), 2, 8);
  ASSERT_NE(from_positions, nullptr);
  EXPECT_EQ(from_positions->starts, d.starts);
  EXPECT_EQ(masked.documents(ids.data(), nullptr, 2, 8)->starts[1].size(), 8u);
  EXPECT_EQ(whole.documents(ids.data(), pos.data(), 2, 8), nullptr);
}

// One row of T tokens packing three documents of 5, 6 and T - 11 tokens (the first two end
// with EOS, the third spills past the row's end), and each document as a row of its own.
struct Packed {
  at::Tensor tokens, labels;        // [1, T]
  std::array<int64_t, 4> edge;      // document d spans [edge[d], edge[d + 1])
};

Packed three_documents(const k::ModelConfig& cfg, int64_t T, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto li = at::TensorOptions().dtype(at::kLong);
  Packed p;
  p.edge = {0, 5, 11, T};
  p.tokens = at::randint(3, cfg.vocab, {1, T}, gen, li);  // no 0, 1 or 2 inside a document
  p.tokens[0][4] = 2;
  p.tokens[0][10] = 2;
  p.labels = at::randint(cfg.vocab, {1, T}, gen, li);
  return p;
}

// The per-token losses of a forward-only pass, [B, T], in fp64.
at::Tensor token_losses(const k::Model& model, const k::NamedTensors& w, const k::NamedTensors& b,
                        const at::Tensor& tokens, const at::Tensor& labels) {
  auto logits = logits_of(model, w, b, tokens).to(at::kDouble);
  return -at::log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1);
}

// fp64: with per-document masking, a row packing three documents gives each token the loss it
// has in its document run alone, and the gradients of the row's loss equal the sum of the
// three documents' gradients, for every KDA form (and MLA, which tiny and debugmodel both
// have), on tiny and on debugmodel's shapes.
//
// The mixers run each document's slice through the same ops as the document's own row, and
// every other op works per token, so a token's loss is the same computation on the same values,
// up to a contraction whose blocking depends on the row count (the log-softmax over the
// vocabulary, 2048 terms: within 2 gamma_2048 = 4.6e-13 of sum|terms|, which for a loss of
// O(log V) is the loss's own size): 1e-12 relative. The gradients are the per-token
// contributions summed over 16 tokens in one contraction instead of three contractions of 5,
// 6 and 5 whose results are added: the reordering argument of
// ModelBatch.LossAndGradsAreSumsOverRowsFp64, the same 1e-12 relative.
// Without the masking the same row lets later documents attend to earlier ones: the losses of
// the second and third documents move by O(1e-2) relative, so the check fails (shown below).
void expect_documents_as_rows(const std::string& flavor, k::KdaImpl kda, int64_t T) {
  SCOPED_TRACE(flavor + ", kda " + std::to_string(static_cast<int>(kda)));
  auto cfg = k::flavor(flavor);
  auto w = tiny_params(cfg, at::kDouble);
  auto b = k::init_buffers(cfg);
  const auto p = three_documents(cfg, T, 53);
  k::ModelOptions on, off;
  on.kda = off.kda = kda;
  on.loss_chunks = off.loss_chunks = 1;
  on.documents = {true, 1, 2};
  const k::Model masked(cfg, on), whole(cfg, off);

  const auto packed = token_losses(masked, w, b, p.tokens, p.labels);
  const auto unmasked = token_losses(whole, w, b, p.tokens, p.labels);
  double worst = 0, unmasked_worst = 0;
  std::vector<at::Tensor> sum;
  for (int d = 0; d < 3; ++d) {
    const int64_t s = p.edge[d], n = p.edge[d + 1] - p.edge[d];
    auto tok = p.tokens.narrow(1, s, n), lab = p.labels.narrow(1, s, n);
    const auto alone = token_losses(whole, w, b, tok, lab);
    auto rel = [&](const at::Tensor& x) {
      return ((x.narrow(1, s, n) - alone).abs() / alone.abs()).max().item<double>();
    };
    worst = std::max(worst, rel(packed));
    unmasked_worst = std::max(unmasked_worst, rel(unmasked));
    auto g = loss_and_grads(whole, w, b, tok, lab).second;
    if (sum.empty())
      sum = g;
    else
      for (size_t i = 0; i < g.size(); ++i) sum[i] = sum[i] + g[i];
  }
  EXPECT_LE(worst, 1e-12);
  EXPECT_GT(unmasked_worst, 1e-6) << "the row without masking should not match";
  std::string worst_param;
  const auto g_packed = loss_and_grads(masked, w, b, p.tokens, p.labels).second;
  const double grad_rel = compare_grads(w, g_packed, sum, 1e-12, worst_param);
  EXPECT_LE(grad_rel, 1e-12);
  std::cout << "[ observed ] " << flavor << " documents vs rows fp64: loss rel " << worst
            << " (without masking " << unmasked_worst << "), grads rel " << grad_rel
            << ", worst parameter " << worst_param << " (bound 1e-12)\n";
}

TEST(ModelDocuments, APackedRowEqualsItsDocumentsAsRowsTinyFp64) {
  for (auto kda : {k::KdaImpl::Fused, k::KdaImpl::Chunked, k::KdaImpl::Recurrent})
    expect_documents_as_rows("tiny", kda, 16);
}

TEST(ModelDocuments, APackedRowEqualsItsDocumentsAsRowsDebugmodelFp64) {
  for (auto kda : {k::KdaImpl::Fused, k::KdaImpl::Chunked, k::KdaImpl::Recurrent})
    expect_documents_as_rows("debugmodel", kda, 16);
}

// A sequence length the chunks do not divide is refused, naming the remedy.
TEST(ModelChunkedLoss, RefusesIndivisibleTokenCount) {
  auto cfg = k::flavor("tiny");
  auto w = tiny_params(cfg, at::kFloat);
  auto b = k::init_buffers(cfg);
  auto tokens = at::zeros({1, 12}, at::TensorOptions().dtype(at::kLong));
  k::Model model(cfg);  // 8 chunks
  try {
    model.loss(w, b, tokens, tokens, 1.0, false);
    FAIL() << "a 12-token sequence in 8 chunks was accepted";
  } catch (const k::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--loss-chunks"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------
// The op-family clock (kernels/op_family.h) behind `bench --breakdown`. Structural checks,
// no speed figures: every family of the model is charged while a step runs under the clock;
// the families never hold more than the wall time around them; a backward node is charged
// to the family whose scope made it, and a family never entered holds exactly zero.
TEST(OpFamilies, ChargeEveryPartOfTheModel) {
  auto cfg = k::flavor("tiny");
  auto w = tiny_params(cfg, at::kFloat);
  auto b = k::init_buffers(cfg);
  auto gen = at::detail::createCPUGenerator(48);
  auto li = at::TensorOptions().dtype(at::kLong);
  auto tokens = at::randint(cfg.vocab, {1, 16}, gen, li);
  auto labels = at::randint(cfg.vocab, {1, 16}, gen, li);
  const auto t0 = std::chrono::steady_clock::now();
  std::array<double, k::kOpFamilies> s{};
  {
    k::FamilyClock clock;
    loss_and_grads(k::Model(cfg, {}), w, b, tokens, labels);
    s = clock.seconds();
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double sum = 0;
  for (double v : s) sum += v;
  EXPECT_LE(sum, wall);
  for (auto f : {k::OpFamily::Kda, k::OpFamily::Mla, k::OpFamily::MoeFfn, k::OpFamily::AttnRes,
                 k::OpFamily::Norms, k::OpFamily::HeadLoss})
    EXPECT_GT(s[static_cast<int>(f)], 0.0) << k::op_family_name(f);
  EXPECT_EQ(s[static_cast<int>(k::OpFamily::Optimizer)], 0.0);  // no optimizer step ran
}

TEST(OpFamilies, BackwardNodesFollowTheirForwardScope) {
  auto gen = at::detail::createCPUGenerator(49);
  auto a = at::randn({300, 300}, gen).requires_grad_(true);
  k::FamilyClock clock;
  at::Tensor y;
  {
    k::FamilyScope scope(k::OpFamily::Mla);
    y = at::mm(at::mm(a, a), a);
  }
  const auto before = clock.seconds();
  y.sum().backward();  // outside every scope: the MmBackward nodes still belong to MLA
  const auto after = clock.seconds();
  const int mla = static_cast<int>(k::OpFamily::Mla), kda = static_cast<int>(k::OpFamily::Kda);
  EXPECT_GT(after[mla], before[mla]);
  EXPECT_EQ(after[kda], 0.0);
  EXPECT_THROW(k::FamilyClock second, std::logic_error);  // one clock at a time
}

}  // namespace
