#include "kernels/memory_ledger.h"

#include <ATen/core/Tensor.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "kernels/host_allocator.h"

namespace parity::kernels {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::Stack: return "stack";
    case MemCategory::Partial: return "partial";
    case MemCategory::AttnRes: return "attn_res";
    case MemCategory::Mixer: return "mixer";
    case MemCategory::Ffn: return "ffn";
    case MemCategory::Head: return "head";
    case MemCategory::Embedding: return "embedding";
    case MemCategory::Params: return "params";
    case MemCategory::Grads: return "grads";
    case MemCategory::Optimizer: return "optimizer";
    case MemCategory::Transport: return "transport";
    case MemCategory::Other: return "other";
  }
  return "other";
}

bool is_activation(MemCategory c) {
  switch (c) {
    case MemCategory::Stack: case MemCategory::Partial: case MemCategory::AttnRes:
    case MemCategory::Mixer: case MemCategory::Ffn: case MemCategory::Head:
    case MemCategory::Embedding:
      return true;
    default:
      return false;
  }
}

// Lets the allocator below update a ledger's private counts.
struct LedgerAccess {
  static void on_alloc(MemoryLedger& l, const MemoryEvent& e);
  static void on_release(MemoryLedger& l, MemoryEvent e, MemCategory was);
  static void on_retag(MemoryLedger& l, MemoryEvent e);
  static void mark(MemoryLedger& l, const std::string& label, bool forward, MemoryPlace place);
};

namespace {

std::atomic<int> g_category{static_cast<int>(MemCategory::Other)};
std::atomic<int> g_layer{-1}, g_microbatch{-1}, g_rank{-1}, g_stage{-1};
std::atomic<MemoryLedger*> g_ledger{nullptr};
std::atomic<uint64_t> g_generation{0};  // one per ledger, so a late free finds its own

MemoryPlace current_place() {
  return {g_layer.load(std::memory_order_relaxed), g_microbatch.load(std::memory_order_relaxed),
          g_rank.load(std::memory_order_relaxed), g_stage.load(std::memory_order_relaxed)};
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class CountingAllocator final : public c10::Allocator {
 public:
  static CountingAllocator& instance() {
    static CountingAllocator* a = new CountingAllocator();  // never destroyed: blocks outlive main
    return *a;
  }

  // The first call makes it c10's CPU allocator, in front of whichever was there (the host
  // cache: installed first, so that the counted run allocates as an uncounted one does).
  void install() {
    static std::once_flag once;
    std::call_once(once, [this] {
      install_host_allocator();
      inner_ = c10::GetCPUAllocator();
      c10::SetCPUAllocator(this, /*priority=*/2);  // above the host cache's 1
    });
  }

  c10::DataPtr allocate(size_t n) const override {
    c10::DataPtr d = inner_->allocate(n);
    MemoryLedger* l = g_ledger.load(std::memory_order_acquire);
    void* p = d.get();
    if (l == nullptr || p == nullptr) return d;
    std::lock_guard<std::mutex> lock(mu_);
    MemoryEvent e;
    e.kind = MemoryEvent::Kind::Alloc;
    e.bytes = static_cast<int64_t>(n);
    e.address = reinterpret_cast<uintptr_t>(p);
    e.category = static_cast<MemCategory>(g_category.load(std::memory_order_relaxed));
    e.place = current_place();
    const size_t index = l->events().size();
    LedgerAccess::on_alloc(*l, e);
    blocks_.emplace(p, Block{std::move(d), g_generation.load(), index, e.category, e.place,
                             e.bytes});
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void retag(const void* p, MemCategory c) {
    MemoryLedger* l = g_ledger.load(std::memory_order_acquire);
    if (l == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(const_cast<void*>(p));
    if (it == blocks_.end() || it->second.generation != g_generation.load()) return;
    auto& b = it->second;
    if (b.category == c) return;
    MemoryEvent e;
    e.kind = MemoryEvent::Kind::Retag;
    e.bytes = b.bytes;
    e.address = reinterpret_cast<uintptr_t>(p);
    e.category = c;
    e.from = b.category;
    e.place = b.place;
    e.alloc_event = b.alloc_event;
    b.category = c;
    LedgerAccess::on_retag(*l, e);
  }

  void mark(MemoryLedger& l, const std::string& label, bool forward) {
    std::lock_guard<std::mutex> lock(mu_);
    LedgerAccess::mark(l, label, forward, current_place());
  }

 private:
  struct Block {
    c10::DataPtr inner;  // freed when the block is erased
    uint64_t generation;
    size_t alloc_event;
    MemCategory category;
    MemoryPlace place;
    int64_t bytes;
  };

  CountingAllocator() = default;

  static void release(void* p) { instance().take_back(p); }

  void take_back(void* p) {
    c10::DataPtr inner;  // destroyed after the lock is dropped: the inner free may take its own
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = blocks_.find(p);
      if (it == blocks_.end()) return;  // cannot happen: only blocks of this map get `release`
      auto& b = it->second;
      MemoryLedger* l = g_ledger.load(std::memory_order_acquire);
      if (l != nullptr && b.generation == g_generation.load()) {
        MemoryEvent e;
        e.kind = MemoryEvent::Kind::Free;
        e.bytes = b.bytes;
        e.address = reinterpret_cast<uintptr_t>(p);
        e.category = b.category;
        e.place = b.place;
        e.alloc_event = b.alloc_event;
        LedgerAccess::on_release(*l, e, b.category);
      }
      inner = std::move(b.inner);
      blocks_.erase(it);
    }
  }

  c10::Allocator* inner_ = nullptr;
  mutable std::mutex mu_;
  mutable std::unordered_map<void*, Block> blocks_;
};

size_t rank_slot(int rank) { return rank < 0 ? 0 : static_cast<size_t>(rank) + 1; }

}  // namespace

void LedgerAccess::on_alloc(MemoryLedger& l, const MemoryEvent& e0) {
  MemoryEvent e = e0;
  e.time_ns = now_ns() - l.start_ns_;
  l.events_.push_back(e);
  l.live_[static_cast<size_t>(e.category)] += e.bytes;
  l.total_ += e.bytes;
  const size_t r = rank_slot(e.place.rank);
  if (l.rank_live_.size() <= r) {
    l.rank_live_.resize(r + 1);
    l.rank_total_.resize(r + 1, 0);
    l.rank_peaks_.resize(r + 1, 0);
  }
  l.rank_live_[r][static_cast<size_t>(e.category)] += e.bytes;
  l.rank_total_[r] += e.bytes;
  l.rank_peaks_[r] = std::max(l.rank_peaks_[r], l.rank_total_[r]);
  if (l.total_ > l.peak_) {
    l.peak_ = l.total_;
    l.peak_event_ = l.events_.size() - 1;
  }
}

void LedgerAccess::on_release(MemoryLedger& l, MemoryEvent e, MemCategory was) {
  e.time_ns = now_ns() - l.start_ns_;
  l.events_.push_back(e);
  l.live_[static_cast<size_t>(was)] -= e.bytes;
  l.total_ -= e.bytes;
  const size_t r = rank_slot(e.place.rank);
  l.rank_live_.at(r)[static_cast<size_t>(was)] -= e.bytes;
  l.rank_total_.at(r) -= e.bytes;
}

void LedgerAccess::on_retag(MemoryLedger& l, MemoryEvent e) {
  e.time_ns = now_ns() - l.start_ns_;
  l.events_.push_back(e);
  l.live_[static_cast<size_t>(e.from)] -= e.bytes;
  l.live_[static_cast<size_t>(e.category)] += e.bytes;
  const size_t r = rank_slot(e.place.rank);
  l.rank_live_.at(r)[static_cast<size_t>(e.from)] -= e.bytes;
  l.rank_live_.at(r)[static_cast<size_t>(e.category)] += e.bytes;
}

void LedgerAccess::mark(MemoryLedger& l, const std::string& label, bool forward,
                        MemoryPlace place) {
  MemoryMark m;
  m.label = label;
  m.forward = forward;
  m.place = place;
  m.events = l.events_.size();
  m.time_ns = now_ns() - l.start_ns_;
  m.live = l.live_;
  m.total = l.total_;
  const size_t r = rank_slot(place.rank);
  if (r < l.rank_live_.size()) m.live_on_rank = l.rank_live_[r];
  l.marks_.push_back(std::move(m));
}

MemoryLedger::MemoryLedger() {
  CountingAllocator::instance().install();
  MemoryLedger* none = nullptr;
  if (!g_ledger.compare_exchange_strong(none, this))
    throw std::logic_error("a memory ledger is already recording; one at a time");
  start_ns_ = now_ns();
  g_generation.fetch_add(1);
}

MemoryLedger::~MemoryLedger() {
  g_ledger.store(nullptr, std::memory_order_release);
}

bool memory_recording() { return g_ledger.load(std::memory_order_relaxed) != nullptr; }

MemoryTag::MemoryTag(MemCategory c)
    : prev_(static_cast<MemCategory>(g_category.exchange(static_cast<int>(c)))) {}

MemoryTag::~MemoryTag() { g_category.store(static_cast<int>(prev_)); }

MemoryWhere::MemoryWhere(MemoryPlace p) : prev_(current_place()) {
  if (p.layer >= 0) g_layer.store(p.layer);
  if (p.microbatch >= 0) g_microbatch.store(p.microbatch);
  if (p.rank >= 0) g_rank.store(p.rank);
  if (p.stage >= 0) g_stage.store(p.stage);
}

MemoryWhere::~MemoryWhere() {
  g_layer.store(prev_.layer);
  g_microbatch.store(prev_.microbatch);
  g_rank.store(prev_.rank);
  g_stage.store(prev_.stage);
}

MemoryTagsKept::MemoryTagsKept()
    : category_(static_cast<MemCategory>(g_category.load())), place_(current_place()) {}

MemoryTagsKept::~MemoryTagsKept() {
  g_category.store(static_cast<int>(category_));
  g_layer.store(place_.layer);
  g_microbatch.store(place_.microbatch);
  g_rank.store(place_.rank);
  g_stage.store(place_.stage);
}

void memory_mark(const std::string& label, bool forward) {
  MemoryLedger* l = g_ledger.load(std::memory_order_acquire);
  if (l == nullptr) return;
  CountingAllocator::instance().mark(*l, label, forward);
}

void memory_retag(const at::Tensor& t, MemCategory c) {
  if (!memory_recording() || !t.defined() || !t.has_storage()) return;
  CountingAllocator::instance().retag(t.storage().data_ptr().get(), c);
}

}  // namespace parity::kernels
