#include "pipelined/executor.h"

namespace parity::pipelined {

std::vector<std::vector<Action>> training_orders(const Schedule& s) {
  std::vector<std::vector<Action>> out;
  for (int r = 0; r < s.pp; ++r) out.push_back(s.rank_order(r));
  return out;
}

std::vector<std::vector<Action>> forward_only_orders(const Schedule& s) {
  std::vector<std::vector<Action>> out;
  for (int r = 0; r < s.pp; ++r) {
    std::vector<Action> fwd;
    for (const auto& a : s.rank_order(r))
      if (a.forward) fwd.push_back(a);
    out.push_back(fwd);
  }
  return out;
}

void run_in_process(const Schedule& grid, const std::vector<std::vector<Action>>& orders,
                    const ExecutorHooks& hooks) {
  const int ranks = static_cast<int>(orders.size());
  std::vector<size_t> next(ranks, 0);
  for (;;) {
    bool progress = false, done = true;
    for (int r = 0; r < ranks; ++r) {
      while (next[r] < orders[r].size() && hooks.ready(orders[r][next[r]])) {
        hooks.run(orders[r][next[r]]);
        ++next[r];
        progress = true;
      }
      done = done && next[r] == orders[r].size();
    }
    if (done) return;
    if (progress) continue;
    // Deadlock: mark each blocked rank's action on the grid.
    std::vector<int> stuck(grid.grid.size(), -1);
    std::string waits;
    for (int r = 0; r < ranks; ++r) {
      if (next[r] == orders[r].size()) continue;
      const Action& a = orders[r][next[r]];
      if (r < static_cast<int>(grid.grid.size()))
        for (size_t t = 0; t < grid.grid[r].size(); ++t)
          if (grid.grid[r][t] && *grid.grid[r][t] == a) stuck[r] = static_cast<int>(t);
      waits += "rank " + std::to_string(r) + " waits at " + a.str() + " for " +
               (a.forward ? std::to_string(a.stage - 1) + "F" : std::to_string(a.stage + 1) + "B") +
               std::to_string(a.microbatch) + "\n";
    }
    throw DeadlockError("pipeline deadlock: no rank can proceed\n" + format_grid(grid, stuck) +
                        waits);
  }
}

}  // namespace parity::pipelined
