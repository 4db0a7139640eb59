// `parity memory`: one training step measured by the memory ledger (kernels/memory_ledger.h).
// What is alive after each layer's forward and by what it is held, when the backward releases
// it, the peak; per rank and action in the in-process pipeline, with the rank store's
// high-water mark. Written as a text table, JSON, a PyTorch allocator snapshot (the pickle
// torch.cuda.memory._dump_snapshot writes, which pytorch.org/memory_viz opens), a Chrome trace
// (Perfetto, chrome://tracing) and an HTML timeline. docs/design.md section 4.9.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "harness/run_options.h"
#include "kernels/memory_ledger.h"

namespace parity::harness {

struct MemoryOptions {
  RunOptions run;
  bool json = false;
  std::string snapshot;  // pickle, for memory_viz
  std::string trace;     // Chrome trace JSON
  std::string html;      // the timeline
  // --read-stack N: instead of a step, one AttnRes read of each form over a stack of N
  // columns, [B, T, N, D] with D = read_dim (0: the flavor's), B and T the run's.
  int read_stack = 0;
  int read_dim = 0;
};

// One AttnRes read call measured: what it keeps for the backward (live bytes after it returns,
// its output excluded) and the most bytes it had alive at once (the output included), both
// counting only what the call allocated.
struct ReadMemory {
  spec::AttnResImpl form;
  int64_t retained = 0, peak = 0, output = 0;
};
std::vector<ReadMemory> measure_reads(int64_t rows, int64_t seq_len, int64_t stack, int64_t dim,
                                      spec::Precision dtype);
std::string reads_table(const std::vector<ReadMemory>& reads, int64_t rows, int64_t seq_len,
                        int64_t stack, int64_t dim, spec::Precision dtype);

struct MemoryReport {
  RunOptions run;
  std::vector<kernels::MemoryEvent> events;
  std::vector<kernels::MemoryMark> marks;
  int64_t peak = 0;
  size_t peak_event = 0;
  std::vector<int64_t> rank_peaks;  // [0]: outside any rank's action; [r + 1]: rank r
  std::vector<int64_t> store_high_water_bytes;  // pipelined, per rank
  std::vector<int> store_high_water_microbatches;
  int64_t column_bytes = 0;  // one [B, T, D] column in the stream dtype
  int64_t n_layers = 0, layers_per_block = 0;
};

// Runs one step of o (steps forced to 1) under a memory ledger. In-process only.
MemoryReport measure_memory(RunOptions o);

// The label of the mark that was the last before event i ("start" before the first).
std::string mark_before(const MemoryReport& r, size_t event);

std::string memory_table(const MemoryReport& r);
std::string memory_json(const MemoryReport& r);
std::string memory_snapshot(const MemoryReport& r);  // the pickle's bytes
std::string memory_chrome_trace(const MemoryReport& r);
std::string memory_html(const MemoryReport& r);

int run_memory(const MemoryOptions& o);

}  // namespace parity::harness
