#include "kernels/op_family.h"

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

namespace parity::kernels {

namespace {

using Clock = std::chrono::steady_clock;

struct ClockState {
  bool on = false;
  OpFamily current = OpFamily::Other;
  Clock::time_point since;
  std::array<double, kOpFamilies> seconds{};
  // (sequence number, family open from it on), in the order the forward made them.
  std::vector<std::pair<uint64_t, OpFamily>> changes;
  std::vector<OpFamily> backward_stack;  // the family each running backward node interrupted
  at::CallbackHandle handle = 0;
};

ClockState& state() {
  static ClockState s;
  return s;
}

void charge_and_switch(ClockState& s, OpFamily next) {
  const auto now = Clock::now();
  s.seconds[static_cast<int>(s.current)] +=
      std::chrono::duration<double>(now - s.since).count();
  s.since = now;
  s.current = next;
}

// The family open when the forward created the node with sequence number `seq`.
OpFamily family_of(const ClockState& s, int64_t seq) {
  if (seq < 0) return OpFamily::Other;  // nodes without one (gradient accumulation)
  auto it = std::upper_bound(
      s.changes.begin(), s.changes.end(), static_cast<uint64_t>(seq),
      [](uint64_t v, const std::pair<uint64_t, OpFamily>& c) { return v < c.first; });
  return it == s.changes.begin() ? OpFamily::Other : std::prev(it)->second;
}

std::unique_ptr<at::ObserverContext> on_backward_start(const at::RecordFunction& fn) {
  auto& s = state();
  if (s.on) {
    s.backward_stack.push_back(s.current);
    charge_and_switch(s, family_of(s, fn.seqNr()));
  }
  return nullptr;
}

void on_backward_end(const at::RecordFunction&, at::ObserverContext*) {
  auto& s = state();
  if (s.on && !s.backward_stack.empty()) {
    const auto back = s.backward_stack.back();
    s.backward_stack.pop_back();
    charge_and_switch(s, back);
  }
}

}  // namespace

const char* op_family_name(OpFamily f) {
  switch (f) {
    case OpFamily::Kda: return "KDA";
    case OpFamily::Mla: return "MLA";
    case OpFamily::MoeFfn: return "MoE/FFN";
    case OpFamily::AttnRes: return "AttnRes";
    case OpFamily::Norms: return "norms";
    case OpFamily::HeadLoss: return "head+loss";
    case OpFamily::Optimizer: return "optimizer";
    case OpFamily::Other: return "other";
  }
  return "?";
}

FamilyScope::FamilyScope(OpFamily f) {
  auto& s = state();
  if (!s.on) return;
  active_ = true;
  prev_ = s.current;
  charge_and_switch(s, f);
  s.changes.emplace_back(at::sequence_number::peek(), f);
}

FamilyScope::~FamilyScope() {
  if (!active_) return;
  auto& s = state();
  if (!s.on) return;
  charge_and_switch(s, prev_);
  s.changes.emplace_back(at::sequence_number::peek(), prev_);
}

FamilyClock::FamilyClock() {
  auto& s = state();
  if (s.on) throw std::logic_error("FamilyClock: one clock at a time");
  s = ClockState{};
  s.on = true;
  s.since = Clock::now();
  s.handle = at::addGlobalCallback(at::RecordFunctionCallback(on_backward_start, on_backward_end)
                                       .scopes({at::RecordScope::BACKWARD_FUNCTION}));
}

FamilyClock::~FamilyClock() {
  auto& s = state();
  at::removeCallback(s.handle);
  s.on = false;
  s.changes.clear();
}

bool family_clock_running() { return state().on; }

std::array<double, kOpFamilies> FamilyClock::seconds() const {
  auto& s = state();
  charge_and_switch(s, s.current);
  return s.seconds;
}

}  // namespace parity::kernels
