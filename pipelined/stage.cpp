#include "pipelined/stage.h"

#include <torch/torch.h>

#include <algorithm>
#include <optional>

#include "kernels/memory_ledger.h"
#include "kernels/ops.h"

namespace parity::pipelined {

namespace {

bool contains(const Blocks& bs, int b) { return std::binary_search(bs.begin(), bs.end(), b); }

// [B,T,D] columns side by side: a fresh dense [B,T,N,D] tensor, outside autograd (a stage's
// entry stack becomes a leaf; a wire's columns carry no graph). One copy per column: at::stack
// would go through a concatenation of strided views.
at::Tensor stack_columns(const std::vector<at::Tensor>& cols) {
  at::NoGradGuard no_grad;
  const auto& c0 = cols.at(0);
  auto out = at::empty({c0.size(0), c0.size(1), static_cast<int64_t>(cols.size()), c0.size(2)},
                       c0.options());
  for (size_t i = 0; i < cols.size(); ++i) out.select(2, static_cast<int64_t>(i)).copy_(cols[i]);
  return out;
}

// Columns of stack_BTND at the given block indices, dense, in the order given.
at::Tensor columns(const at::Tensor& stack, const Blocks& blocks) {
  std::vector<at::Tensor> cols;
  cols.reserve(blocks.size());
  for (int b : blocks) cols.push_back(stack.select(2, b));
  return stack_columns(cols);
}

}  // namespace

StageRunner::StageRunner(int stage, StepContext* ctx) : stage_(stage), ctx_(ctx) {}

bool StageRunner::last() const {
  return stage_ + 1 == static_cast<int>(ctx_->tables->stages.size());
}

const Blocks& StageRunner::send_blocks() const {
  return ctx_->cache ? route().send_cached : route().send_naive;
}
const Blocks& StageRunner::recv_blocks() const {
  return ctx_->cache ? route().recv_cached : route().recv_naive;
}

bool StageRunner::fires(FaultKind k, int block, int mb) {
  bool hit = false;
  for (size_t i = 0; i < ctx_->faults.size(); ++i)
    if (ctx_->faults[i].matches(k, stage_, block, mb)) {
      hit = true;
      if (i < ctx_->fault_hits.size()) ++ctx_->fault_hits[i];
    }
  return hit;
}

std::vector<TensorSpec> StageRunner::expected(int mb, const Blocks& wire) const {
  const auto& tok = ctx_->tokens.at(mb);
  const int64_t B = tok.size(0), T = tok.size(1), D = ctx_->model->config().dim;
  const auto dtype = ctx_->weights->tensors().at(0).scalar_type();  // the compute dtype
  const auto device = tok.device();
  std::vector<TensorSpec> out{{{B, T, D}, dtype, device}};
  if (!wire.empty()) out.push_back({{B, T, static_cast<int64_t>(wire.size()), D}, dtype, device});
  return out;
}

bool StageRunner::forward_ready(int mb) const {
  if (stage_ == 0) return true;
  return ctx_->transport->ready(ctx_->tables->rank_of(stage_ - 1),
                                Tag{stage_ - 1, stage_, mb, true});
}

bool StageRunner::backward_ready(int mb) const {
  if (!saved_.count(mb)) return false;
  if (last()) return true;
  return ctx_->transport->ready(ctx_->tables->rank_of(stage_ + 1),
                                Tag{stage_ + 1, stage_, mb, false});
}

void StageRunner::forward(int mb) {
  const auto& r = route();
  const auto& split = ctx_->tables->split;
  const auto& model = *ctx_->model;
  auto& store = (*ctx_->stores)[r.rank];
  std::unique_ptr<at::NoGradGuard> no_grad;
  if (!ctx_->training) no_grad = std::make_unique<at::NoGradGuard>();
  std::optional<kernels::LedgerScope> ledger_scope;
  if (ctx_->ledger) ledger_scope.emplace(ctx_->ledger, ctx_->ledger_mb_base + mb);

  Saved sv;
  kernels::LayerState state;
  if (split.has_emb(stage_)) {
    state = model.embed(*ctx_->weights, ctx_->tokens[mb], ctx_->docs.at(mb));
  } else {
    const auto& wire = recv_blocks();
    auto msg = ctx_->transport->recv(ctx_->tables->rank_of(stage_ - 1),
                                     Tag{stage_ - 1, stage_, mb, true}, expected(mb, wire));
    // Assemble the entry stack in block order: store columns or wire columns.
    std::vector<at::Tensor> cols;
    size_t w = 0;
    for (int b : r.entry) {
      if (ctx_->cache && contains(r.held_at_entry, b)) {
        int from_mb = mb;
        for (int other : {mb - 1, mb + 1, mb - 2, mb + 2})
          if (store.has(other, b)) {
            if (fires(FaultKind::StaleBlock, b, mb)) from_mb = other;
            break;
          }
        cols.push_back(store.get(from_mb, b, stage_));
      } else {
        if (w >= wire.size() || wire[w] != b)
          throw ProtocolError("stage " + std::to_string(stage_) + " (micro-batch " +
                              std::to_string(mb) + "): block " + std::to_string(b) +
                              " is neither in the store nor on the wire");
        cols.push_back(msg.at(1).select(2, static_cast<int64_t>(w++)));
      }
    }
    const auto& h = msg.at(0);
    at::Tensor stack;
    if (cols.empty())
      stack = h.new_empty({h.size(0), h.size(1), 0, h.size(2)});
    else if (w == cols.size())
      stack = msg.at(1);  // every column came over the wire (naive): the delta is the stack
    else {
      kernels::MemoryTag tag(kernels::MemCategory::Stack);  // the entry stack, assembled
      stack = stack_columns(cols);
    }
    sv.h_leaf = h.detach().requires_grad_(ctx_->training);
    sv.stack_leaf = stack.detach().requires_grad_(ctx_->training && !cols.empty());
    state = {sv.h_leaf, sv.stack_leaf, ctx_->docs.at(mb)};
  }
  for (int l : split.layers(stage_)) state = model.layer(l, *ctx_->weights, *ctx_->buffers, state, ctx_->training);

  if (ctx_->cache)
    for (int b : r.stores) store.put(mb, b, state.stack_BTND.select(2, b).detach());

  if (split.has_head(stage_)) {
    sv.loss = model.head_loss(*ctx_->weights, state, ctx_->labels[mb], ctx_->n_global,
                              ctx_->training);
    losses_[mb] = sv.loss.loss();
  } else {
    std::vector<at::Tensor> payload{state.x_BTD};
    kernels::MemoryTag tag(kernels::MemCategory::Transport);
    if (!send_blocks().empty()) payload.push_back(columns(state.stack_BTND, send_blocks()));
    if (ctx_->ledger)
      ctx_->ledger->hops.push_back({ctx_->ledger_mb_base + mb, stage_, stage_ + 1, true, "h",
                                    kernels::tensor_hash(state.x_BTD)});
    ctx_->transport->send(std::move(payload), ctx_->tables->rank_of(stage_ + 1),
                          Tag{stage_, stage_ + 1, mb, true});
  }
  sv.out_x = state.x_BTD;
  sv.out_stack = state.stack_BTND;

  // The rank's last stage releases the micro-batch's blocks.
  if (stage_ + ctx_->tables->pp >= static_cast<int>(ctx_->tables->stages.size()))
    store.release(mb);
  if (ctx_->training) saved_[mb] = std::move(sv);
}

void StageRunner::backward(int mb) {
  const auto& r = route();
  auto& store = (*ctx_->stores)[r.rank];
  Saved sv = std::move(saved_.at(mb));
  saved_.erase(mb);

  std::vector<at::Tensor> roots, grads;
  if (last()) {
    sv.loss.backward();  // the chunks, then one backward through the stage
  } else {
    const auto& sent = send_blocks();
    auto msg = ctx_->transport->recv(ctx_->tables->rank_of(stage_ + 1),
                                     Tag{stage_ + 1, stage_, mb, false}, expected(mb, sent));
    at::Tensor g_stack;
    const bool all_sent = static_cast<int64_t>(sent.size()) == sv.out_stack.size(2);
    if (all_sent && !ctx_->cache) {
      if (!sent.empty()) g_stack = msg.at(1);  // naive: the wire gradient is the whole column set
    } else if (sv.out_stack.size(2) > 0) {
      // The columns that went forward get their wire gradient, the others start at zero.
      g_stack = at::empty_like(sv.out_stack, at::MemoryFormat::Contiguous);
      for (int b = 0; b < g_stack.size(2); ++b)
        if (!contains(sent, b)) g_stack.select(2, b).zero_();
      for (size_t i = 0; i < sent.size(); ++i) g_stack.select(2, sent[i]).copy_(msg.at(1).select(2, i));
    }
    if (ctx_->cache) {
      std::vector<int> owned;
      for (const auto& d : r.collects)
        if (std::find(owned.begin(), owned.end(), d.block) == owned.end()) owned.push_back(d.block);
      for (int b : owned) {
        auto deps = store.collect(mb, b, ctx_->check_deposit_counts ? r.deposits_expected(b) : -1,
                                  stage_);
        if (ctx_->ledger)
          ctx_->ledger->events.push_back(
              {"collect", ctx_->ledger_mb_base + mb, b, stage_, static_cast<int>(deps.size())});
        if (fires(FaultKind::SkipCollect, b, mb)) continue;
        auto col = g_stack.select(2, b);
        for (const auto& d : deps) col.add_(d);
      }
    }
    if (sv.out_x.requires_grad()) {
      roots.push_back(sv.out_x);
      grads.push_back(msg.at(0));
    }
    if (g_stack.defined() && sv.out_stack.requires_grad()) {
      roots.push_back(sv.out_stack);
      grads.push_back(g_stack);
    }
  }
  if (!roots.empty()) torch::autograd::backward(roots, grads);

  if (stage_ == 0) return;
  // Input gradients: the hidden state, the wire columns (dense, wire order), deposits.
  // The leaves die with sv: their gradients are taken, not shared, so a dense one leaves as is.
  auto g_h = std::move(sv.h_leaf.mutable_grad());
  if (!g_h.defined()) g_h = at::zeros_like(sv.h_leaf);
  at::Tensor g_in = std::move(sv.stack_leaf.mutable_grad());
  if (!g_in.defined() && sv.stack_leaf.size(2) > 0) g_in = at::zeros_like(sv.stack_leaf);
  if (ctx_->ledger)
    ctx_->ledger->hops.push_back(
        {ctx_->ledger_mb_base + mb, stage_, stage_ - 1, false, "dh", kernels::tensor_hash(g_h)});
  std::vector<at::Tensor> payload;  // pushed, not braced: an initializer list would hold a copy
  payload.push_back(std::move(g_h));
  const auto& wire = recv_blocks();
  if (!wire.empty()) payload.push_back(ctx_->cache ? columns(g_in, wire) : std::move(g_in));
  ctx_->transport->send(std::move(payload), ctx_->tables->rank_of(stage_ - 1),
                        Tag{stage_, stage_ - 1, mb, false});
  if (ctx_->cache) {
    kernels::MemoryTag tag(kernels::MemCategory::Transport);
    for (int b : r.deposits) {
      auto d = g_in.select(2, b).contiguous();
      if (fires(FaultKind::DropDeposit, b, mb)) continue;
      int to_block = b;
      const int neighbour =
          contains(r.deposits, b + 1) ? b + 1 : (contains(r.deposits, b - 1) ? b - 1 : b);
      if (neighbour != b && fires(FaultKind::Misroute, b, mb))  // a block it also read
        to_block = neighbour;
      const bool twice = fires(FaultKind::DuplicateDeposit, b, mb);
      for (int k = twice ? 2 : 1; k > 0; --k) {
        store.deposit(mb, to_block, stage_, k == 2 ? d.clone() : d);
        if (ctx_->ledger)
          ctx_->ledger->events.push_back({"deposit", ctx_->ledger_mb_base + mb, to_block, stage_, 1});
      }
    }
  }
}

}  // namespace parity::pipelined
