#include "kernels/ledger.h"

#include <torch/torch.h>

namespace parity::kernels {

namespace {

thread_local Ledger* t_ledger = nullptr;
thread_local int t_mb = 0;

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

Ledger* from_int(int64_t p) { return reinterpret_cast<Ledger*>(static_cast<intptr_t>(p)); }
int64_t to_int(Ledger* l) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(l)); }

// Identity whose backward stores the gradient of column n in reads[first + n].
struct ReadTap : public torch::autograd::Function<ReadTap> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& stack, int64_t ledger,
                            int64_t first) {
    ctx->saved_data["ledger"] = ledger;
    ctx->saved_data["first"] = first;
    return stack.clone();
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    auto* l = from_int(ctx->saved_data["ledger"].toInt());
    const int64_t first = ctx->saved_data["first"].toInt();
    for (int64_t n = 0; n < g[0].size(2); ++n)
      l->reads.at(first + n).grad = g[0].select(2, n).detach().clone();
    return {g[0], at::Tensor(), at::Tensor()};
  }
};

// Identity whose backward stores the block's gradient in commits[index].
struct CommitTap : public torch::autograd::Function<CommitTap> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t ledger,
                            int64_t index) {
    ctx->saved_data["ledger"] = ledger;
    ctx->saved_data["index"] = index;
    return x.clone();
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    auto* l = from_int(ctx->saved_data["ledger"].toInt());
    l->commits.at(ctx->saved_data["index"].toInt()).grad = g[0].detach().clone();
    return {g[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

uint64_t tensor_hash(const at::Tensor& t) {
  auto c = t.detach().to(at::kCPU).contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0, n = c.nbytes(); i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

void Ledger::clear() {
  reads.clear();
  commits.clear();
  hops.clear();
  events.clear();
}

LedgerScope::LedgerScope(Ledger* ledger, int mb) : prev_(t_ledger), prev_mb_(t_mb) {
  t_ledger = ledger;
  t_mb = mb;
}

LedgerScope::~LedgerScope() {
  t_ledger = prev_;
  t_mb = prev_mb_;
}

bool ledger_active() { return t_ledger != nullptr; }

at::Tensor ledger_read(const at::Tensor& stack, const std::string& reader, int unit) {
  if (!t_ledger || stack.size(2) == 0) return stack;
  auto& reads = t_ledger->reads;
  const auto first = static_cast<int64_t>(reads.size());
  for (int64_t n = 0; n < stack.size(2); ++n)
    reads.push_back({t_mb, static_cast<int>(n), reader, unit, tensor_hash(stack.select(2, n)), {}});
  if (!stack.requires_grad()) return stack;
  return ReadTap::apply(stack, to_int(t_ledger), first);
}

at::Tensor ledger_commit(const at::Tensor& x, int block, int unit) {
  if (!t_ledger) return x;
  auto& commits = t_ledger->commits;
  const auto index = static_cast<int64_t>(commits.size());
  commits.push_back({t_mb, block, unit, tensor_hash(x), {}});
  if (!x.requires_grad()) return x;
  return CommitTap::apply(x, to_int(t_ledger), index);
}

}  // namespace parity::kernels
