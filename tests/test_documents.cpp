// Per-document masking through the trainers (docs/design.md section 10.7), in fp64: one step on
// a row that packs three documents equals the three documents each trained alone, for the
// reference and the pipelined trainer (naive and cached transport). Tolerance tests only; the
// bitwise equalities of the masking live in tests/test_cli.cpp and tests/test_cli_external.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "datasets/rows.h"
#include "kernels/config.h"
#include "kernels/params.h"
#include "pipelined/trainer.h"
#include "reference/trainer.h"

namespace parity {
namespace {

constexpr int32_t kBos = 1, kEos = 2;

// The step's loss and its gradients before clipping.
struct Step {
  double loss = 0;
  std::vector<at::Tensor> grads;
};

class Capture : public kernels::StepObserver {
 public:
  bool wants_tensors(int64_t) const override { return true; }
  void on_step(const kernels::StepRecord& r) override {
    step.loss = r.loss.item<double>();
    for (const auto& g : *r.grads) step.grads.push_back(g.clone());
  }
  Step step;
};

enum class Trainer { Reference, Naive, Cached };

const char* name(Trainer t) {
  return t == Trainer::Reference ? "reference" : t == Trainer::Naive ? "pipelined naive"
                                                                      : "pipelined cached";
}

// One fp64 step of one micro-batch of one row over `stream` (T + 1 tokens).
Step one_step(const std::string& flavor, Trainer trainer, bool documents,
              std::vector<int32_t> stream) {
  kernels::TrainConfig cfg;
  cfg.model = kernels::flavor(flavor);
  cfg.precision = kernels::Precision::FP64;
  cfg.steps = 1;
  cfg.microbatches = 1;
  cfg.rows = 1;
  cfg.model_options.loss_chunks = 1;  // documents of 5 and 6 tokens: no chunking divides them
  cfg.model_options.documents = {documents, kBos, kEos};
  const int64_t T = static_cast<int64_t>(stream.size()) - 1;
  const datasets::TokenRows rows(std::move(stream), T, 1);
  const auto init = kernels::init_params(cfg.model, 11);
  Capture c;
  if (trainer == Trainer::Reference) {
    reference::ReferenceTrainer t(cfg, init, rows);
    t.run(c);
  } else {
    pipelined::PipelineConfig pc;
    pc.pp = 2;
    pc.vp = 2;
    pc.schedule = pipelined::ScheduleKind::Interleaved1F1B;
    pc.cache = trainer == Trainer::Cached;
    pipelined::PipelinedTrainer t(cfg, pc, init, rows);
    t.run(c);
  }
  return c.step;
}

// The three documents: BOS, ids from 3 up (no BOS or EOS inside), EOS; 5, 6 and 5 tokens.
std::vector<std::vector<int32_t>> three_documents() {
  std::vector<std::vector<int32_t>> d;
  int32_t next = 37;
  for (const int len : {5, 6, 5}) {
    std::vector<int32_t> doc = {kBos};
    for (int i = 0; i < len - 2; ++i) doc.push_back(3 + (next = (next * 29 + 7) % 1901));
    doc.push_back(kEos);
    d.push_back(doc);
  }
  return d;
}

// A packed row's step against its documents' steps. The loss is the sum of the token losses
// over the step's N label tokens, so N * loss and N * gradients add over the documents: with
// L_d and g_d the step of document d alone (N_d = its length), 16 L = sum N_d L_d and
// 16 g = sum N_d g_d. Each document's EOS has BOS as its label both ways (the packed row ends
// with a BOS as its last label), so every (input, label) pair is the same.
//
// Tolerance: the same argument as ModelDocuments (tests/test_model.cpp): each token's loss is
// the same computation on the same values up to the blocking of contractions, and the sums
// over tokens reorder 16 terms into three groups: fp64, within a few gamma_V of the sums'
// absolute size, V = 2048 the longest contraction: 1e-12 relative. Without the masking the
// second and third documents see the ones before them and the loss moves by ~1e-2 relative.
void expect_packed_equals_documents(const std::string& flavor, Trainer trainer) {
  SCOPED_TRACE(flavor + ", " + name(trainer));
  const auto docs = three_documents();
  std::vector<int32_t> packed;
  for (const auto& d : docs) packed.insert(packed.end(), d.begin(), d.end());
  const double n = static_cast<double>(packed.size());
  ASSERT_EQ(n, 16);
  packed.push_back(kBos);
  const Step row = one_step(flavor, trainer, true, packed);
  const Step unmasked = one_step(flavor, trainer, false, packed);
  double sum_loss = 0;
  std::vector<at::Tensor> sum_grads;
  for (const auto& d : docs) {
    auto alone = d;
    alone.push_back(kBos);
    const Step s = one_step(flavor, trainer, true, alone);
    const double nd = static_cast<double>(d.size());
    sum_loss += nd * s.loss;
    if (sum_grads.empty())
      for (const auto& g : s.grads) sum_grads.push_back(nd * g);
    else
      for (size_t i = 0; i < s.grads.size(); ++i) sum_grads[i] = sum_grads[i] + nd * s.grads[i];
  }
  const double loss_rel = std::abs(n * row.loss - sum_loss) / std::abs(sum_loss);
  const double unmasked_rel = std::abs(n * unmasked.loss - sum_loss) / std::abs(sum_loss);
  EXPECT_LE(loss_rel, 1e-12);
  EXPECT_GT(unmasked_rel, 1e-6) << "without masking the packed row should differ";
  ASSERT_EQ(row.grads.size(), sum_grads.size());
  double diff_sq = 0, norm_sq = 0;
  for (size_t i = 0; i < sum_grads.size(); ++i) {
    diff_sq += (n * row.grads[i] - sum_grads[i]).pow(2).sum().item<double>();
    norm_sq += sum_grads[i].pow(2).sum().item<double>();
  }
  ASSERT_GT(norm_sq, 0);
  const double grad_rel = std::sqrt(diff_sq / norm_sq);
  EXPECT_LE(grad_rel, 1e-12);
  EXPECT_TRUE(std::isfinite(grad_rel) && std::isfinite(loss_rel));
  std::cout << "[ observed ] " << flavor << ", " << name(trainer) << ": loss rel " << loss_rel
            << " (without masking " << unmasked_rel << "), gradients rel " << grad_rel
            << " (bound 1e-12)\n";
}

TEST(TrainerDocuments, APackedRowTrainsAsItsDocumentsReferenceFp64) {
  expect_packed_equals_documents("tiny", Trainer::Reference);
  expect_packed_equals_documents("debugmodel", Trainer::Reference);
}

TEST(TrainerDocuments, APackedRowTrainsAsItsDocumentsPipelinedNaiveFp64) {
  expect_packed_equals_documents("tiny", Trainer::Naive);
  expect_packed_equals_documents("debugmodel", Trainer::Naive);
}

TEST(TrainerDocuments, APackedRowTrainsAsItsDocumentsPipelinedCachedFp64) {
  expect_packed_equals_documents("tiny", Trainer::Cached);
  expect_packed_equals_documents("debugmodel", Trainer::Cached);
}

}  // namespace
}  // namespace parity
