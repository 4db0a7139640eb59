#include "pipelined/trainer.h"

#include <torch/torch.h>

#include <chrono>

#include "pipelined/executor.h"

namespace parity::pipelined {

Split make_split(const kernels::ModelConfig& m, const PipelineConfig& pc) {
  const int stages = pc.pp * pc.vp;
  return pc.split.empty() ? default_split(m.n_layers, stages)
                          : parse_split(pc.split, m.n_layers, stages);
}

std::vector<int> param_ranks(const kernels::ModelConfig& m, const Split& split, int pp) {
  std::vector<int> out;
  for (const auto& s : kernels::param_specs(m)) out.push_back(split.stage_of_unit(s.unit) % pp);
  return out;
}

PipelinedTrainer::PipelinedTrainer(kernels::TrainConfig cfg, PipelineConfig pc,
                                   const kernels::NamedTensors& init,
                                   const datasets::TokenRows& data)
    : cfg_(std::move(cfg)),
      pc_(std::move(pc)),
      model_(cfg_.model, cfg_.model_options),
      data_(data),
      split_(make_split(cfg_.model, pc_)),
      tables_(make_routing_tables(cfg_.model.n_layers, cfg_.model.layers_per_block, split_,
                                  pc_.pp)),
      schedule_(make_schedule(pc_.schedule, pc_.pp, pc_.vp, cfg_.microbatches)),
      master_(kernels::make_masters(cfg_, init)),
      buffers_(kernels::make_buffers(cfg_)),
      optimizer_(kernels::make_optimizer(cfg_, master_)) {
  if (cfg_.dp < 1) throw kernels::ConfigError("--dp must be at least 1");
  dry_run(schedule_);
  if (pc_.cache) {
    std::vector<int> map;
    for (int s = 0; s < schedule_.num_stages(); ++s) map.push_back(schedule_.stage_to_rank(s));
    check_loop_map(map, pc_.pp, to_string(pc_.schedule));
  }
  const auto specs = kernels::param_specs(cfg_.model);
  stage_params_.assign(split_.num_stages(), {});
  for (size_t i = 0; i < specs.size(); ++i)
    stage_params_[split_.stage_of_unit(specs[i].unit)].push_back(i);
  if (cfg_.clip_order == kernels::ClipOrder::PerRank) cfg_.param_rank = param_ranks();
}

std::vector<int> PipelinedTrainer::param_ranks() const {
  return pipelined::param_ranks(cfg_.model, split_, pc_.pp);
}

kernels::RunInfo PipelinedTrainer::run_info() const {
  auto info = kernels::make_run_info(cfg_, "pipelined", data_.seq_len(), master_.names());
  info.extra = {{"pp", std::to_string(pc_.pp)},
                {"vp", std::to_string(pc_.vp)},
                {"schedule", to_string(pc_.schedule)},
                {"cache", pc_.cache ? "on" : "off"},
                {"split", split_.spec()},
                {"schedule_grid", format_grid(schedule_)}};
  return info;
}

void PipelinedTrainer::run(kernels::StepObserver& observer) {
  kernels::prepare_run(cfg_);
  observer.on_start(run_info());
  for (int64_t s = 1; s <= cfg_.steps; ++s) step(s, observer);
  observer.on_end();
}

PipelinedTrainer::Batch PipelinedTrainer::batch(int64_t step, int replica) const {
  const auto device = torch::Device(cfg_.device);
  const int64_t T = data_.seq_len();
  const datasets::BatchShape shape{cfg_.dp, cfg_.microbatches, cfg_.rows};
  Batch b;
  b.n_global = static_cast<int64_t>(cfg_.dp) * cfg_.microbatches * cfg_.rows * T;
  std::vector<int64_t> inputs, labels;
  for (int m = 0; m < cfg_.microbatches; ++m) {
    auto rows =
        datasets::microbatch_rows(shape, data_.num_rows(), step, replica, m,
                                  cfg_.reverse_microbatches);
    datasets::fill_microbatch(data_, rows, inputs, labels);
    auto opts = torch::TensorOptions().dtype(torch::kLong);
    b.tokens.push_back(torch::from_blob(inputs.data(), {cfg_.rows, T}, opts).to(device).clone());
    b.labels.push_back(torch::from_blob(labels.data(), {cfg_.rows, T}, opts).to(device).clone());
  }
  return b;
}

void PipelinedTrainer::execute(StepContext& ctx, const std::vector<std::vector<Action>>& orders,
                               kernels::GradAccumulator* acc, std::vector<at::Tensor>& losses) {
  std::vector<RankStore> stores;
  for (int r = 0; r < pc_.pp; ++r) stores.emplace_back(r);
  Mailboxes mail;
  ctx.stores = &stores;
  ctx.transport = &mail;
  std::vector<StageRunner> stages;
  for (int s = 0; s < split_.num_stages(); ++s) stages.emplace_back(s, &ctx);

  ExecutorHooks hooks;
  hooks.ready = [&](const Action& a) {
    return a.forward ? stages[a.stage].forward_ready(a.microbatch)
                     : stages[a.stage].backward_ready(a.microbatch);
  };
  hooks.run = [&](const Action& a) {
    if (a.forward) {
      stages[a.stage].forward(a.microbatch);
    } else {
      stages[a.stage].backward(a.microbatch);
      if (acc) acc->after_backward(stage_params_[a.stage]);
    }
  };
  run_in_process(schedule_, orders, hooks);

  for (int r = 0; r < pc_.pp; ++r) {
    if (ctx.check_deposit_counts)
      stores[r].check_empty("after the step");
    else
      stores[r].clear();
  }
  if (!mail.empty()) throw ProtocolError("messages left undelivered after the step");
  losses.clear();
  for (int m = 0; m < cfg_.microbatches; ++m) losses.push_back(stages.back().loss(m));
  fault_hits_.resize(pc_.faults.size());
  for (size_t i = 0; i < ctx.fault_hits.size(); ++i) fault_hits_[i] += ctx.fault_hits[i];

  stats_ = PipelineStats{};
  for (const auto& st : stores) stats_.store_high_water.push_back(st.high_water_microbatches());
  stats_.bytes_forward = mail.total_bytes(true);
  stats_.bytes_backward = mail.total_bytes(false);
  for (int m = 0; m < cfg_.microbatches; ++m) {
    stats_.bytes_forward_per_mb.push_back(mail.bytes_sent(m, true));
    stats_.bytes_backward_per_mb.push_back(mail.bytes_sent(m, false));
  }
}

StepContext PipelinedTrainer::context(const kernels::NamedTensors& weights, const Batch& b,
                                      bool training) const {
  StepContext ctx;
  ctx.model = &model_;
  ctx.weights = &weights;
  ctx.buffers = &buffers_;
  ctx.tables = &tables_;
  ctx.cache = pc_.cache;
  ctx.tokens = b.tokens;
  ctx.labels = b.labels;
  ctx.n_global = static_cast<double>(b.n_global);
  ctx.training = training;
  if (training) {
    ctx.faults = pc_.faults;
    ctx.fault_hits.assign(pc_.faults.size(), 0);
    ctx.check_deposit_counts = pc_.check_deposit_counts;
  }
  return ctx;
}

void PipelinedTrainer::step(int64_t s, kernels::StepObserver& observer) {
  const auto t0 = std::chrono::steady_clock::now();
  auto compute = kernels::make_compute_copies(cfg_, master_);
  const kernels::NamedTensors weights(master_.names(), compute);
  ledger_.clear();
  // dp replicas one after the other, each a whole pipeline over its own rows; their
  // gradients are summed in rank order after the last micro-batch (the reference's order).
  std::vector<at::Tensor> grads, mb_losses;
  at::Tensor loss;
  int64_t n_global = 0;
  for (int r = 0; r < cfg_.dp; ++r) {
    auto b = batch(s, r);
    n_global = b.n_global;
    auto ctx = context(weights, b, /*training=*/true);
    if (cfg_.ledger) {
      ctx.ledger = &ledger_;
      ctx.ledger_mb_base = r * cfg_.microbatches;
    }
    kernels::GradAccumulator acc(cfg_, master_, compute);
    std::vector<at::Tensor> losses;
    execute(ctx, training_orders(schedule_), &acc, losses);
    auto replica_grads = acc.finish();
    auto replica_loss = torch::stack(losses).sum();
    loss = r == 0 ? replica_loss : loss + replica_loss;
    if (r == 0)
      grads = std::move(replica_grads);
    else
      for (size_t i = 0; i < grads.size(); ++i) grads[i].add_(replica_grads[i]);
    mb_losses.insert(mb_losses.end(), losses.begin(), losses.end());
  }
  kernels::finish_step(cfg_, s, optimizer_, master_, std::move(grads), loss, mb_losses, n_global,
                       t0, observer, cfg_.ledger ? &ledger_ : nullptr);
}

std::vector<at::Tensor> PipelinedTrainer::forward_only(int64_t step) {
  at::NoGradGuard no_grad;
  auto compute = kernels::make_compute_copies(cfg_, master_);
  const kernels::NamedTensors weights(master_.names(), compute);
  std::vector<at::Tensor> all;
  for (int r = 0; r < cfg_.dp; ++r) {
    auto b = batch(step, r);
    auto ctx = context(weights, b, /*training=*/false);
    std::vector<at::Tensor> losses;
    execute(ctx, forward_only_orders(schedule_), nullptr, losses);
    all.insert(all.end(), losses.begin(), losses.end());
  }
  return all;
}

}  // namespace parity::pipelined
