#include "harness/closed_form.h"

#include <torch/torch.h>

#include <iostream>
#include <limits>
#include <memory>

#include "compare/exact_math.h"
#include "harness/errors.h"
#include "harness/run.h"
#include "harness/validate.h"
#include "kernels/config.h"
#include "kernels/observer.h"
#include "reference/trainer.h"

namespace parity::harness {

using compare::Dyadic;
using compare::exact_losses;
using compare::exact_step;
using compare::ExactMicrobatch;
using compare::ExactParams;
using compare::ExactShape;

namespace {

constexpr int64_t kSeqLen = 2;
constexpr int kMicrobatches = 4;
constexpr double kLr = 4.0;  // a power of two: lr * g is exact

// Row i of the data: tokens (5i + 3t^2 + t) mod V for t = 0..T (inputs t < T, labels t >= 1).
// Written out here and read back through TokenRows by the trainers; the closed form takes
// its micro-batches from this formula directly.
int64_t token_at(int64_t row, int64_t t, int vocab) { return (5 * row + 3 * t * t + t) % vocab; }

std::vector<int32_t> token_stream(int64_t rows, int vocab) {
  std::vector<int32_t> out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t <= kSeqLen; ++t) out.push_back(static_cast<int32_t>(token_at(r, t, vocab)));
  return out;
}

// Step s, micro-batch m reads row (s-1)*M + m (dp 1, one row per micro-batch: the row order
// of datasets/rows.h), modulo the rows there are.
std::vector<ExactMicrobatch> exact_batch(int64_t step, int64_t num_rows, int vocab) {
  std::vector<ExactMicrobatch> out(kMicrobatches);
  for (int m = 0; m < kMicrobatches; ++m) {
    const int64_t row = ((step - 1) * kMicrobatches + m) % num_rows;
    for (int64_t t = 0; t < kSeqLen; ++t) {
      out[m].tokens.push_back(token_at(row, t, vocab));
      out[m].labels.push_back(token_at(row, t + 1, vocab));
    }
  }
  return out;
}

std::vector<double> to_doubles(const at::Tensor& t) {
  auto d = t.detach().to(at::kCPU, at::kDouble).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

int significand_bits(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return 8;
    case at::kFloat: return 24;
    default: return 53;
  }
}

struct Captured {
  std::vector<double> mb_losses;
  double loss = 0;
  std::vector<std::vector<double>> grads, params;
};

class Capture : public kernels::StepObserver {
 public:
  bool wants_tensors(int64_t) const override { return true; }
  void on_step(const kernels::StepRecord& r) override {
    last = Captured{};
    for (const auto& l : r.mb_losses) last.mb_losses.push_back(l.item<double>());
    last.loss = r.loss.item<double>();
    for (const auto& g : *r.grads) last.grads.push_back(to_doubles(g));
    for (const auto& p : *r.params) last.params.push_back(to_doubles(p));
  }
  Captured last;
};

class Checker {
 public:
  explicit Checker(ClosedFormReport& r) : r_(r) {}
  // got against expected, value for value; expected values must fit `bits`.
  void check(const std::string& what, const std::vector<double>& got,
             const std::vector<Dyadic>& expected, int bits) {
    ++r_.tensors_checked;
    ClosedFormMismatch mm;
    mm.what = what;
    mm.numel = static_cast<int64_t>(expected.size());
    if (got.size() != expected.size()) {
      mm.n_wrong = mm.numel;
      mm.got = std::to_string(got.size()) + " values";
      mm.expected = std::to_string(expected.size()) + " values";
      r_.mismatches.push_back(mm);
      return;
    }
    for (size_t i = 0; i < got.size(); ++i) {
      ++r_.values_checked;
      const int need = expected[i].significand_bits();
      r_.max_significand_bits = std::max(r_.max_significand_bits, need);
      if (need > bits && r_.out_of_range.size() < 20)
        r_.out_of_range.push_back(what + "[" + std::to_string(i) + "] = " + expected[i].str() +
                                  " needs " + std::to_string(need) +
                                  " significand bits; its dtype has " + std::to_string(bits));
      if (!std::isfinite(got[i]) || Dyadic::from_double(got[i]) != expected[i]) {
        if (mm.n_wrong++ == 0) {
          mm.first_index = static_cast<int64_t>(i);
          mm.got = std::isfinite(got[i]) ? Dyadic::from_double(got[i]).str() : std::to_string(got[i]);
          mm.expected = expected[i].str();
        }
      }
    }
    if (mm.n_wrong > 0) r_.mismatches.push_back(mm);
  }

 private:
  ClosedFormReport& r_;
};

std::string describe(const ClosedFormOptions& o, const kernels::ModelConfig& m) {
  std::string s;
  if (!o.pipelined) {
    s = "reference";
  } else {
    const auto& pc = o.pipeline;
    auto split = pipelined::make_split(m, pc);
    s = "pipelined pp" + std::to_string(pc.pp) + "xvp" + std::to_string(pc.vp) + " " +
        pipelined::to_string(pc.schedule) + " cache " + (pc.cache ? "on" : "off") + ", split " +
        split.spec();
  }
  return s + ", " + kernels::to_string(o.precision) + ", flavor " + m.name;
}

}  // namespace

ClosedFormReport run_closed_form(const ClosedFormOptions& o,
                                 const std::function<void(const std::string&)>& progress) {
  if (o.wide && o.precision != kernels::Precision::FP64)
    throw kernels::ConfigError(
        "--wide needs --dtype fp64: its values need up to 32 significand bits, beyond fp32's "
        "24 and bf16's 8");
  if (o.steps < 1) throw kernels::ConfigError("--steps must be at least 1");

  kernels::TrainConfig cfg;
  cfg.model = kernels::flavor(o.wide ? "exact-wide" : "exact");
  cfg.precision = o.precision;
  cfg.steps = o.steps;
  cfg.microbatches = kMicrobatches;
  cfg.rows = 1;
  cfg.device = o.device;
  cfg.threads = o.threads;
  cfg.optimizer = kernels::OptimizerKind::SGD;
  cfg.sgd_lr = kLr;
  cfg.max_norm = std::numeric_limits<double>::infinity();  // clipping off: the factor is 1

  ClosedFormReport report;
  report.cell = describe(o, cfg.model);

  const int vocab = cfg.model.vocab;
  const int64_t num_rows = (o.steps + 1) * kMicrobatches;  // + the last forward-only pass
  datasets::TokenRows data(token_stream(num_rows, vocab), kSeqLen, num_rows);
  const auto init = kernels::init_params(cfg.model, cfg.seed);
  const int64_t n_global = kMicrobatches * kSeqLen;

  std::unique_ptr<reference::ReferenceTrainer> ref;
  std::unique_ptr<pipelined::PipelinedTrainer> pipe;
  if (o.pipelined) {
    cfg.param_rank = pipelined::param_ranks(cfg.model, pipelined::make_split(cfg.model, o.pipeline),
                                            o.pipeline.pp);
    pipe = std::make_unique<pipelined::PipelinedTrainer>(cfg, o.pipeline, init, data);
  } else {
    ref = std::make_unique<reference::ReferenceTrainer>(cfg, init, data);
  }
  kernels::prepare_run(cfg);

  ExactShape shape{cfg.model.n_layers, cfg.model.layers_per_block, vocab};
  ExactParams p;
  p.fqns = init.names();
  for (const auto& t : init.tensors()) {
    std::vector<Dyadic> v;
    for (double x : to_doubles(t)) v.push_back(Dyadic::from_double(x));
    p.values.push_back(std::move(v));
  }

  const auto cdt = kernels::compute_dtype(o.precision);
  const int loss_bits = significand_bits(kernels::accum_dtype(cdt));
  const int compute_bits = significand_bits(cdt);
  Checker check(report);
  Capture capture;
  for (int64_t s = 1; s <= o.steps; ++s) {
    const auto expected = exact_step(shape, p, exact_batch(s, num_rows, vocab), n_global,
                                     Dyadic::from_double(kLr));
    if (pipe)
      pipe->step(s, capture);
    else
      ref->step(s, capture);
    const auto& got = capture.last;
    const std::string at = "step " + std::to_string(s) + " ";
    const size_t before = report.mismatches.size();
    check.check(at + "micro-batch losses", got.mb_losses, expected.mb_losses, loss_bits);
    check.check(at + "loss", {got.loss}, {expected.loss}, loss_bits);
    for (size_t i = 0; i < p.fqns.size(); ++i) {
      // Gradients are accumulated in the compute dtype (bf16 mode's default) and parameters
      // feed the next step through their compute copies: both must fit it.
      check.check(at + "grad " + p.fqns[i], got.grads.at(i), expected.grads[i], compute_bits);
      check.check(at + "param " + p.fqns[i], got.params.at(i), p.values[i], compute_bits);
    }
    std::string line = at + "loss " + expected.loss.str();
    if (s < o.steps) {
      auto eval = pipe ? pipe->forward_only(s + 1) : ref->forward_only(s + 1);
      std::vector<double> got_eval;
      for (const auto& l : eval) got_eval.push_back(l.item<double>());
      check.check(at + "forward-only losses (step " + std::to_string(s + 1) + "'s batch)",
                  got_eval, exact_losses(shape, p, exact_batch(s + 1, num_rows, vocab), n_global),
                  loss_bits);
      line += ", forward-only pass checked";
    }
    line += report.mismatches.size() == before ? ": every value exact"
                                               : ": " + std::to_string(report.mismatches.size() - before) +
                                                     " tensors differ";
    if (progress) progress(line);
  }
  if (pipe) report.fault_hits = pipe->fault_hits();
  return report;
}

int closed_form_command(const ClosedFormJob& c) {
  ClosedFormOptions o;
  const bool shaped = c.run.pp != 1 || c.run.vp != 1 || !c.run.split.empty();
  o.pipelined = c.trainer ? *c.trainer == spec::Trainer::Pipelined : shaped;
  if (!o.pipelined && (shaped || !c.run.inject.empty()))
    throw UsageError("--pp, --vp, --split and --inject need --trainer pipelined");
  o.pipeline = pipeline_config(c.run);
  o.precision = c.run.dtype;
  o.wide = c.wide;
  if (o.pipelined) {
    const auto model = kernels::flavor(o.wide ? "exact-wide" : "exact");
    pipelined::make_split(model, o.pipeline);  // a bad split, named before anything runs
    check_faults(model, o.pipeline, kMicrobatches);
  }
  o.steps = c.run.steps;
  o.device = spec::to_string(c.run.device);
  o.threads = c.run.threads;

  auto r = run_closed_form(o, [](const std::string& line) { std::cout << line << "\n"; });
  std::cout << "cell: " << r.cell << "\n";
  for (const auto& s : r.out_of_range) std::cout << "  out of the exact range: " << s << "\n";
  constexpr size_t kShown = 20;
  for (size_t i = 0; i < r.mismatches.size() && i < kShown; ++i) {
    const auto& m = r.mismatches[i];
    std::cout << "  DIFFERS " << m.what << ": " << m.n_wrong << " of " << m.numel
              << " values wrong, first at [" << m.first_index << "]: got " << m.got
              << ", closed form " << m.expected << "\n";
  }
  if (r.mismatches.size() > kShown)
    std::cout << "  ... and " << r.mismatches.size() - kShown << " more tensors\n";
  warn_unfired_faults(o.pipeline.faults, r.fault_hits);
  std::cout << "closed form: " << (r.pass() ? "PASS" : "FAIL") << " (" << r.values_checked
            << " values in " << r.tensors_checked << " tensors, " << r.mismatches.size()
            << " tensors differ; largest value needs " << r.max_significand_bits
            << " significand bits)\n";
  return r.pass() ? 0 : 1;
}

}  // namespace parity::harness
