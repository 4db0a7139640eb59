// The per-rank block store of the cached transport (docs/design.md section 5).
//
// Forward: a stage puts every block it receives or commits (a detached view of its stack
// column, no copy); later stages on the same rank read them instead of receiving them. A
// micro-batch's blocks are released after the rank's last stage forward for it.
// Backward: a stage that read a block from the store deposits that block's gradient here; the
// stage that stored the block collects the deposits before its own backward. The counts are
// checked against the routing tables; a missing or extra deposit is a loud error naming the
// block, the stage and the micro-batch.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace parity::pipelined {

// A broken protocol invariant (missing/extra deposit, read of an absent block): a routing bug.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RankStore {
 public:
  explicit RankStore(int rank = 0) : rank_(rank) {}

  void put(int mb, int block, const at::Tensor& value);
  const at::Tensor& get(int mb, int block, int reader_stage) const;
  bool has(int mb, int block) const { return blocks_.count({mb, block}) != 0; }
  // Drops the micro-batch's blocks (after the rank's last stage forward for it).
  void release(int mb);

  void deposit(int mb, int block, int from_stage, at::Tensor grad);
  // Takes the block's deposits, in deposit order; throws ProtocolError unless exactly
  // `expected` are there (expected < 0: any number, for fault-injection runs).
  std::vector<at::Tensor> collect(int mb, int block, int expected, int stage);
  // Drops deposits that nobody will collect (blocks with nothing trainable upstream).
  void discard_deposits(int mb, int block);

  int blocks_held() const { return static_cast<int>(blocks_.size()); }
  int deposits_held() const;
  // Micro-batches with blocks in the store now, and the most there ever were at once.
  int microbatches_held() const;
  int high_water_microbatches() const { return high_water_; }
  // Bytes of the values it holds now (block columns, which are views of the stages' stacks, and
  // deposits), and the most it ever held.
  int64_t bytes_held() const;
  int64_t high_water_bytes() const { return high_water_bytes_; }
  // Throws ProtocolError naming what is left if the store is not empty.
  void check_empty(const std::string& when) const;
  // Drops everything (after a fault-injection step, whose misrouted deposits may be left).
  void clear() {
    blocks_.clear();
    deposits_.clear();
  }

 private:
  int rank_;
  std::map<std::pair<int, int>, at::Tensor> blocks_;                  // (mb, block) -> value
  std::map<std::pair<int, int>, std::vector<std::pair<int, at::Tensor>>> deposits_;  // -> (from, grad)
  int high_water_ = 0;
  int64_t high_water_bytes_ = 0;
  void note_bytes() { high_water_bytes_ = std::max(high_water_bytes_, bytes_held()); }
};

}  // namespace parity::pipelined
