// Routing tables of the block-stack transport (docs/design.md section 5): pure functions of the
// layer count, the block size, the split and the stage->rank map. No tensors.
//
// Blocks: entry b of the stack is committed at layer b * lpb (block 0 is the embedding output,
// committed by layer 0). Simulating one micro-batch in stage order:
//   entry[s]  = blocks committed by stages < s (the stack stage s receives, a prefix 0..n-1)
//   out[s]    = entry[s] + commits[s]          (the stack it passes on)
//   naive:      send[s] = out[s]
//   cached:     held_at_entry[s] = held[rank(s)];  held[rank(s)] |= out[s];
//               send[s] = out[s] - held[rank(s+1)]
// A stage reads its whole entry stack iff it holds a layer or the head. With the cache, the
// entries it reads from its rank's store (reads & held_at_entry) go home as gradient deposits;
// the stage on that rank which stored the block (received or committed it) collects them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipelined/split.h"

namespace parity::pipelined {

using Blocks = std::vector<int>;  // sorted block indices

struct Deposit {
  int block;
  int from_stage;  // the reader that deposits
};

struct StageRoute {
  int stage = 0, rank = 0;
  Blocks commits;        // committed by this stage's layers
  Blocks entry;          // the stack it receives
  Blocks out;            // the stack it passes on
  Blocks held_at_entry;  // cached: in its rank's store before it runs
  Blocks recv_naive, recv_cached;  // what arrives over the wire (= previous stage's send)
  Blocks send_naive, send_cached;  // what it sends (empty on the last stage)
  Blocks stores;         // cached: what it puts in its rank's store (recv + commits)
  Blocks reads;          // entry if it has a layer or the head, else nothing
  Blocks deposits;       // cached: reads & held_at_entry, deposited in backward
  std::vector<Deposit> collects;  // cached: deposits it collects before its own backward
  int deposits_expected(int block) const;  // collects counted for one block
};

struct Volume {
  // Stack entries per micro-batch, forward (backward carries the same entries' gradients).
  int64_t option1 = 0;  // each block once to each other rank whose stages need it
  int64_t naive = 0, cached = 0;
  int64_t naive_peak = 0, cached_peak = 0;  // the largest single hop
};

struct RoutingTables {
  int n_layers = 0, lpb = 0, pp = 1, vp = 1;
  Split split;
  std::vector<StageRoute> stages;
  Volume volume;
  int n_blocks() const { return (n_layers - 1) / lpb + 1; }
  int rank_of(int stage) const { return stage % pp; }
};

// The stage->rank map is the loop map, stage s on rank s % pp.
RoutingTables make_routing_tables(int n_layers, int lpb, const Split& split, int pp);

// Bytes of one stack entry: rows * tokens * dim * element size.
int64_t entry_bytes(int64_t rows, int64_t tokens, int64_t dim, int64_t element_size);

// The per-stage tables as the seed's review prints them (forward, then backward; cache off
// and on) and the volume summary.
std::string format_tables(const RoutingTables& t);
std::string blocks_text(const Blocks& b, const char* prefix = "");  // "[e, x4, x8]"

// Refuses a non-loop stage->rank map with the cache on, naming the schedule and the first
// stage off the loop. stage_to_rank[s] is the schedule's map.
void check_loop_map(const std::vector<int>& stage_to_rank, int pp, const std::string& schedule);

}  // namespace parity::pipelined
