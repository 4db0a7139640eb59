#include "pipelined/rank_store.h"

#include <set>

namespace parity::pipelined {

namespace {
std::string where(int block, int stage, int mb) {
  return "block " + std::to_string(block) + " at stage " + std::to_string(stage) +
         " (micro-batch " + std::to_string(mb) + ")";
}
}  // namespace

void RankStore::put(int mb, int block, const at::Tensor& value) {
  blocks_[{mb, block}] = value;
  high_water_ = std::max(high_water_, microbatches_held());
  note_bytes();
}

const at::Tensor& RankStore::get(int mb, int block, int reader_stage) const {
  auto it = blocks_.find({mb, block});
  if (it == blocks_.end())
    throw ProtocolError("rank " + std::to_string(rank_) + " store lacks " +
                        where(block, reader_stage, mb) +
                        ": the routing tables say this rank already holds it");
  return it->second;
}

void RankStore::release(int mb) {
  for (auto it = blocks_.begin(); it != blocks_.end();)
    it = it->first.first == mb ? blocks_.erase(it) : std::next(it);
}

void RankStore::deposit(int mb, int block, int from_stage, at::Tensor grad) {
  deposits_[{mb, block}].emplace_back(from_stage, std::move(grad));
  note_bytes();
}

int64_t RankStore::bytes_held() const {
  int64_t n = 0;
  for (const auto& b : blocks_) n += static_cast<int64_t>(b.second.nbytes());
  for (const auto& d : deposits_)
    for (const auto& g : d.second) n += static_cast<int64_t>(g.second.nbytes());
  return n;
}

std::vector<at::Tensor> RankStore::collect(int mb, int block, int expected, int stage) {
  auto it = deposits_.find({mb, block});
  const int got = it == deposits_.end() ? 0 : static_cast<int>(it->second.size());
  if (expected >= 0 && got != expected)
    throw ProtocolError("deposit count for " + where(block, stage, mb) + ": expected " +
                        std::to_string(expected) + ", got " + std::to_string(got));
  std::vector<at::Tensor> out;
  if (it != deposits_.end()) {
    for (auto& d : it->second) out.push_back(std::move(d.second));
    deposits_.erase(it);
  }
  return out;
}

void RankStore::discard_deposits(int mb, int block) { deposits_.erase({mb, block}); }

int RankStore::deposits_held() const {
  int n = 0;
  for (const auto& d : deposits_) n += static_cast<int>(d.second.size());
  return n;
}

int RankStore::microbatches_held() const {
  std::set<int> mbs;
  for (const auto& b : blocks_) mbs.insert(b.first.first);
  return static_cast<int>(mbs.size());
}

void RankStore::check_empty(const std::string& when) const {
  if (blocks_.empty() && deposits_.empty()) return;
  std::string what;
  for (const auto& b : blocks_)
    what += " block " + std::to_string(b.first.second) + " of micro-batch " +
            std::to_string(b.first.first) + ";";
  for (const auto& d : deposits_)
    what += " " + std::to_string(d.second.size()) + " uncollected deposit(s) for block " +
            std::to_string(d.first.second) + " of micro-batch " + std::to_string(d.first.first) +
            ";";
  throw ProtocolError("rank " + std::to_string(rank_) + " store is not empty " + when + ":" +
                      what);
}

}  // namespace parity::pipelined
