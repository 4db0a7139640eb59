// Where a step's time goes, by op family (`parity bench --what step --breakdown`).
//
// The model marks its parts with FamilyScope. While a FamilyClock runs, wall time is charged
// to one family at a time: forward time to the innermost open scope; the time of each
// backward node to the scope that was open when the forward created it (found by the
// autograd sequence number); everything else (the embedding, the engine between nodes,
// gradient accumulation, the trainer's own work) to Other. The families partition the
// clock's wall time exactly. Without a running clock a FamilyScope costs one branch.
#pragma once

#include <array>

namespace parity::kernels {

enum class OpFamily { Kda, Mla, MoeFfn, AttnRes, Norms, HeadLoss, Optimizer, Other };
constexpr int kOpFamilies = 8;
const char* op_family_name(OpFamily f);

class FamilyScope {
 public:
  explicit FamilyScope(OpFamily f);
  ~FamilyScope();
  FamilyScope(const FamilyScope&) = delete;
  FamilyScope& operator=(const FamilyScope&) = delete;

 private:
  OpFamily prev_ = OpFamily::Other;
  bool active_ = false;
};

// One at a time, on the thread that runs the steps (the CPU autograd engine runs backward
// nodes on that thread too).
class FamilyClock {
 public:
  FamilyClock();
  ~FamilyClock();
  FamilyClock(const FamilyClock&) = delete;
  FamilyClock& operator=(const FamilyClock&) = delete;

  // Seconds charged to each family since the clock started, indexed by OpFamily.
  std::array<double, kOpFamilies> seconds() const;
};

// Whether a FamilyClock runs (work split across threads must then keep to one thread).
bool family_clock_running();

}  // namespace parity::kernels
