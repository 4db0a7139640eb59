#include "pipelined/trainer.h"

#include <torch/torch.h>

#include <chrono>

#include "kernels/memory_ledger.h"
#include "pipelined/executor.h"

namespace parity::pipelined {

Split make_split(const kernels::ModelConfig& m, const PipelineConfig& pc) {
  return split_or_default(pc.split, m.n_layers, pc.pp * pc.vp);
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
  if (pc_.comm) {
    if (pc_.comm->world() != cfg_.dp * pc_.pp)
      throw kernels::ConfigError("WORLD_SIZE " + std::to_string(pc_.comm->world()) +
                                 " is not dp x pp = " + std::to_string(cfg_.dp) + " x " +
                                 std::to_string(pc_.pp) + "; start dp * pp processes");
    if (cfg_.ledger)
      throw kernels::ConfigError("--ledger runs in-process only for now; drop --nproc/--backend");
    pc_.comm->set_peer_offset(pc_.comm->rank() / pc_.pp * pc_.pp);
  }
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
  std::vector<int64_t> inputs, labels, positions;
  for (int m = 0; m < cfg_.microbatches; ++m) {
    auto rows =
        datasets::microbatch_rows(shape, data_.num_rows(), step, replica, m,
                                  cfg_.reverse_microbatches);
    datasets::fill_microbatch(data_, rows, inputs, labels, &positions);
    // Once per micro-batch, on the host: every stage reads them from the context.
    b.docs.push_back(model_.documents(inputs.data(), positions.empty() ? nullptr : positions.data(),
                                      cfg_.rows, T));
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
  Transport* transport = pc_.comm ? static_cast<Transport*>(pc_.comm) : &mail;
  transport->reset_counters();
  ctx.transport = transport;
  std::vector<StageRunner> stages;
  for (int s = 0; s < split_.num_stages(); ++s) stages.emplace_back(s, &ctx);

  auto run = [&](const Action& a) {
    const int rank = tables_.rank_of(a.stage);
    kernels::MemoryWhere where({-1, a.microbatch, rank, a.stage});
    if (a.forward) {
      stages[a.stage].forward(a.microbatch);
    } else {
      kernels::MemoryTag tag(kernels::MemCategory::Grads);
      stages[a.stage].backward(a.microbatch);
      if (acc) acc->after_backward(stage_params_[a.stage]);
    }
    if (kernels::memory_recording())
      kernels::memory_mark("rank " + std::to_string(rank) + (a.forward ? " F" : " B") +
                               std::to_string(a.stage) + " mb " + std::to_string(a.microbatch),
                           a.forward);
  };
  // In-process: every rank, scheduled here. Multi-process: this rank's actions, in order; its
  // receives block (with the transport's timeout) until the peer's message is there.
  const int own = pc_.comm ? pc_.comm->rank() % pc_.pp : -1;
  if (pc_.comm) {
    for (const auto& a : orders.at(own)) run(a);
    pc_.comm->flush();
  } else {
    ExecutorHooks hooks;
    hooks.ready = [&](const Action& a) {
      return a.forward ? stages[a.stage].forward_ready(a.microbatch)
                       : stages[a.stage].backward_ready(a.microbatch);
    };
    hooks.run = run;
    run_in_process(schedule_, orders, hooks);
  }

  for (int r = 0; r < pc_.pp; ++r) {
    if (own >= 0 && r != own) continue;
    if (ctx.check_deposit_counts)
      stores[r].check_empty("after the step");
    else
      stores[r].clear();
  }
  if (!mail.empty()) throw ProtocolError("messages left undelivered after the step");
  losses.clear();
  const bool have_losses = own < 0 || own == tables_.rank_of(split_.num_stages() - 1);
  for (int m = 0; m < cfg_.microbatches; ++m)
    losses.push_back(have_losses ? stages.back().loss(m) : at::Tensor());
  fault_hits_.resize(pc_.faults.size());
  for (size_t i = 0; i < ctx.fault_hits.size(); ++i) fault_hits_[i] += ctx.fault_hits[i];

  stats_ = PipelineStats{};
  for (int r = 0; r < pc_.pp; ++r)
    if (own < 0 || r == own) {
      stats_.store_high_water.push_back(stores[r].high_water_microbatches());
      stats_.store_high_water_bytes.push_back(stores[r].high_water_bytes());
    }
  const int M = cfg_.microbatches;
  std::vector<double> sent(2 * M);
  for (int m = 0; m < M; ++m) {
    sent[m] = static_cast<double>(transport->bytes_sent(m, true));
    sent[M + m] = static_cast<double>(transport->bytes_sent(m, false));
  }
  if (pc_.comm) {  // the pipeline's bytes: every rank of this dp group's sends
    // On the run's device: a CUDA backend broadcasts device tensors only.
    const auto dev = torch::TensorOptions().dtype(torch::kDouble).device(torch::Device(cfg_.device));
    auto mine = torch::tensor(sent, torch::kDouble).to(dev.device());
    std::fill(sent.begin(), sent.end(), 0.0);
    for (int root = 0; root < pc_.comm->world(); ++root) {
      auto buf = root == pc_.comm->rank() ? mine.clone() : torch::zeros({2 * M}, dev);
      pc_.comm->broadcast(buf, root);
      if (root / pc_.pp == pc_.comm->rank() / pc_.pp)
        for (int i = 0; i < 2 * M; ++i) sent[i] += buf[i].item<double>();
    }
  }
  for (int m = 0; m < M; ++m) {
    stats_.bytes_forward_per_mb.push_back(static_cast<int64_t>(sent[m]));
    stats_.bytes_backward_per_mb.push_back(static_cast<int64_t>(sent[M + m]));
    stats_.bytes_forward += stats_.bytes_forward_per_mb.back();
    stats_.bytes_backward += stats_.bytes_backward_per_mb.back();
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
  ctx.docs = b.docs;
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
  if (kernels::memory_recording()) kernels::memory_mark("step " + std::to_string(s) + " start", true);
  auto compute = kernels::make_compute_copies(cfg_, master_);
  const kernels::NamedTensors weights = master_.with(compute);
  ledger_.clear();
  // dp replicas one after the other (multi-process: this rank's replica only), each a whole
  // pipeline over its own rows; their gradients are summed in rank order after the last
  // micro-batch (the reference's order).
  std::vector<std::vector<at::Tensor>> replica_grads(cfg_.dp), replica_losses(cfg_.dp);
  int64_t n_global = 0;
  for (int r = 0; r < cfg_.dp; ++r) {
    if (pc_.comm && r != pc_.comm->rank() / pc_.pp) continue;
    auto b = batch(s, r);
    n_global = b.n_global;
    auto ctx = context(weights, b, /*training=*/true);
    if (cfg_.ledger_on(s)) {
      ctx.ledger = &ledger_;
      ctx.ledger_mb_base = r * cfg_.microbatches;
    }
    kernels::GradAccumulator acc(cfg_, master_, compute);
    execute(ctx, training_orders(schedule_), &acc, replica_losses[r]);
    replica_grads[r] = acc.finish();
  }
  if (pc_.comm) {
    share_replicas(replica_grads, replica_losses);
    share_counts();
  }

  std::vector<at::Tensor> grads, mb_losses;
  at::Tensor loss;
  for (int r = 0; r < cfg_.dp; ++r) {
    auto replica_loss = torch::stack(replica_losses[r]).sum();
    loss = r == 0 ? replica_loss : loss + replica_loss;
    if (r == 0)
      grads = std::move(replica_grads[r]);
    else
      for (size_t i = 0; i < grads.size(); ++i) grads[i].add_(replica_grads[r][i]);
    mb_losses.insert(mb_losses.end(), replica_losses[r].begin(), replica_losses[r].end());
  }
  kernels::finish_step(cfg_, s, optimizer_, master_, buffers_, std::move(grads), loss, mb_losses, n_global,
                       t0, observer, cfg_.ledger_on(s) ? &ledger_ : nullptr);
}

void PipelinedTrainer::share_replicas(std::vector<std::vector<at::Tensor>>& grads,
                                      std::vector<std::vector<at::Tensor>>& losses) {
  // Every rank ends with every replica's whole gradient and losses, by broadcasts from the
  // ranks that own them (copies: no arithmetic, so the bits are the in-process ones).
  auto& comm = *pc_.comm;
  const int mine = comm.rank() / pc_.pp;
  const auto ranks = param_ranks();
  for (int r = 0; r < cfg_.dp; ++r) {
    if (r != mine) {
      grads[r].clear();
      for (size_t i = 0; i < master_.size(); ++i) grads[r].push_back(at::zeros_like(master_[i]));
    }
    for (int owner = 0; owner < pc_.pp; ++owner) {
      std::vector<at::Tensor> parts;
      for (size_t i = 0; i < ranks.size(); ++i)
        if (ranks[i] == owner) parts.push_back(grads[r][i].reshape({-1}));
      if (parts.empty()) continue;
      auto flat = at::cat(parts);
      comm.broadcast(flat, r * pc_.pp + owner);
      int64_t at = 0;
      for (size_t i = 0; i < ranks.size(); ++i)
        if (ranks[i] == owner) {
          const int64_t n = grads[r][i].numel();
          grads[r][i] = flat.narrow(0, at, n).view_as(grads[r][i]).clone();
          at += n;
        }
    }
  }
  share_losses(losses);
}

void PipelinedTrainer::share_counts() {
  // The balancer's histograms and token counts: each MoE layer's on the pp rank that owns it,
  // one per replica. Every rank ends with their sum over the replicas, added in replica order
  // (integers: exact in any order), as the in-process trainer's shared buffers hold it.
  auto& comm = *pc_.comm;
  const auto specs = kernels::buffer_specs(cfg_.model);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].persistent) continue;
    const int owner = split_.stage_of_unit(specs[i].unit) % pc_.pp;
    auto& mine = buffers_[i];
    at::Tensor total;
    for (int r = 0; r < cfg_.dp; ++r) {
      const int root = r * pc_.pp + owner;
      auto buf = comm.rank() == root ? mine.clone() : at::zeros_like(mine);
      comm.broadcast(buf, root);
      total = r == 0 ? buf : total + buf;
    }
    mine.copy_(total);
  }
}

void PipelinedTrainer::share_losses(std::vector<std::vector<at::Tensor>>& losses) {
  auto& comm = *pc_.comm;
  const int mine = comm.rank() / pc_.pp;
  const int head_rank = tables_.rank_of(split_.num_stages() - 1);
  const auto loss_dtype = kernels::accum_dtype(kernels::compute_dtype(cfg_.precision));
  for (int r = 0; r < cfg_.dp; ++r) {
    const bool holder = r == mine && comm.rank() % pc_.pp == head_rank;
    auto ls = holder ? torch::stack(losses[r])
                     : at::zeros({cfg_.microbatches}, at::TensorOptions()
                                                          .dtype(loss_dtype)
                                                          .device(at::Device(cfg_.device)));
    comm.broadcast(ls, r * pc_.pp + head_rank);
    losses[r].clear();
    for (int m = 0; m < cfg_.microbatches; ++m) losses[r].push_back(ls[m].clone());
  }
}

std::vector<at::Tensor> PipelinedTrainer::forward_only(int64_t step) {
  at::NoGradGuard no_grad;
  auto compute = kernels::make_compute_copies(cfg_, master_);
  const kernels::NamedTensors weights = master_.with(compute);
  std::vector<std::vector<at::Tensor>> losses(cfg_.dp);
  for (int r = 0; r < cfg_.dp; ++r) {
    if (pc_.comm && r != pc_.comm->rank() / pc_.pp) continue;
    auto b = batch(step, r);
    auto ctx = context(weights, b, /*training=*/false);
    execute(ctx, forward_only_orders(schedule_), nullptr, losses[r]);
  }
  if (pc_.comm) share_losses(losses);
  std::vector<at::Tensor> all;
  for (auto& l : losses) all.insert(all.end(), l.begin(), l.end());
  return all;
}

}  // namespace parity::pipelined
