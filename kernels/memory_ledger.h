// The memory ledger (`parity memory`): every CPU tensor allocation and free of a run, each with
// its size and what the run was doing when it was made.
//
// While a MemoryLedger is recording, c10's CPU allocator is a counting one: it hands each
// request to the allocator that was installed before (the host cache, kernels/host_allocator.h)
// and records the block with the current tag: a category (what holds the bytes: the stack
// columns, the partial sum, AttnRes internals, ...), the layer, the micro-batch, the rank and
// the stage. The model and the trainers set the tag with MemoryTag and MemoryWhere scopes, and
// mark the step's boundaries (after each layer's forward, after each layer's backward, each
// pipeline action) with memory_mark; a mark keeps the live bytes of every category then.
//
// Every figure is a measurement: the bytes c10 asked for, counted when the block was handed
// out and when it came back. Blocks allocated before the ledger started are not counted (their
// frees pass by unseen). Without a recording ledger a tag scope or a mark costs one branch.
//
// One ledger at a time, driven from one thread (the in-process pipeline runs every rank on it);
// the tag is global, so that allocations made inside intra-op worker threads carry it too.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace parity::kernels {

enum class MemCategory {
  Stack,      // the committed blocks' columns (the stack tensors)
  Partial,    // the running sum of the current block (a layer's output)
  AttnRes,    // the AttnRes reads' internals (scores, weights, normed sources)
  Mixer,      // attention_norm and the mixer (KDA or MLA): what their backward keeps
  Ffn,        // ffn_norm and the FFN or MoE
  Head,       // output read, final norm, LM head, the loss
  Embedding,  // the embedding's output
  Params,     // master parameters, compute copies
  Grads,      // gradients (backward) and their accumulation
  Optimizer,  // optimizer state, clipping, the update
  Transport,  // pipeline messages, rank store deposits
  Other,
};
constexpr int kMemCategories = 12;
const char* mem_category_name(MemCategory c);

// The categories a layer's forward leaves behind for its backward.
bool is_activation(MemCategory c);

// Where the run is; -1: not set.
struct MemoryPlace {
  int layer = -1;
  int microbatch = -1;
  int rank = -1;
  int stage = -1;
};

struct MemoryEvent {
  // Alloc, Free, or Retag: the block's bytes move from `from` to `category`.
  enum class Kind { Alloc, Free, Retag } kind = Kind::Alloc;
  int64_t bytes = 0;
  uint64_t address = 0;
  int64_t time_ns = 0;  // since the ledger started
  MemCategory category = MemCategory::Other;
  MemCategory from = MemCategory::Other;  // Retag only
  MemoryPlace place;  // of the allocation (a free or retag repeats its block's)
  size_t alloc_event = 0;  // Free, Retag: the block's Alloc event
};

struct MemoryMark {
  std::string label;
  bool forward = true;  // false: a backward or optimizer boundary
  MemoryPlace place;
  size_t events = 0;    // events recorded before the mark
  int64_t time_ns = 0;
  std::array<int64_t, kMemCategories> live{};  // bytes alive by category
  int64_t total = 0;    // the allocator's own count of live bytes (independent of `live`)
  std::array<int64_t, kMemCategories> live_on_rank{};  // of the place's rank (pipelined)
};

class MemoryLedger {
 public:
  // Starts recording (installs the counting allocator on first use).
  MemoryLedger();
  ~MemoryLedger();  // stops recording
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  const std::vector<MemoryEvent>& events() const { return events_; }
  const std::vector<MemoryMark>& marks() const { return marks_; }
  int64_t peak() const { return peak_; }           // the most bytes alive at once
  size_t peak_event() const { return peak_event_; }  // the event that reached it
  std::vector<int64_t> rank_peaks() const { return rank_peaks_; }  // by rank (pipelined)

 private:
  friend struct LedgerAccess;
  std::vector<MemoryEvent> events_;
  std::vector<MemoryMark> marks_;
  std::array<int64_t, kMemCategories> live_{};
  std::vector<std::array<int64_t, kMemCategories>> rank_live_;
  std::vector<int64_t> rank_total_, rank_peaks_;
  int64_t total_ = 0, peak_ = 0;
  size_t peak_event_ = 0;
  int64_t start_ns_ = 0;
};

// True while a ledger records.
bool memory_recording();

// Sets the category of the allocations made while it lives.
class MemoryTag {
 public:
  explicit MemoryTag(MemCategory c);
  ~MemoryTag();
  MemoryTag(const MemoryTag&) = delete;
  MemoryTag& operator=(const MemoryTag&) = delete;

 private:
  MemCategory prev_;
};

// Sets the fields of the place that are >= 0 while it lives.
class MemoryWhere {
 public:
  explicit MemoryWhere(MemoryPlace p);
  ~MemoryWhere();
  MemoryWhere(const MemoryWhere&) = delete;
  MemoryWhere& operator=(const MemoryWhere&) = delete;

 private:
  MemoryPlace prev_;
};

// Puts the category and the place back as they were when it was made. The tags are one per
// process, so scopes that run at once on several threads (kernels/threads.h run_lanes, which
// the trainers use only while nothing records) can leave them crossed.
class MemoryTagsKept {
 public:
  MemoryTagsKept();
  ~MemoryTagsKept();
  MemoryTagsKept(const MemoryTagsKept&) = delete;
  MemoryTagsKept& operator=(const MemoryTagsKept&) = delete;

 private:
  MemCategory category_;
  MemoryPlace place_;
};

// Records a boundary (no-op unless recording).
void memory_mark(const std::string& label, bool forward);

// Moves the bytes of the block holding t's storage to category c (what holds them now, when it
// is not what made them: a mixer output that becomes the partial sum). No-op unless recording
// or when the block is not the ledger's.
void memory_retag(const at::Tensor& t, MemCategory c);

}  // namespace parity::kernels
