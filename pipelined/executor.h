// The in-process executor (docs/design.md section 5): every rank is an object in one process, and a
// deterministic scheduler runs, rank by rank in rank order, whichever rank's next action has
// its inputs. A pass over all ranks that runs nothing is a deadlock, reported with the
// step x rank grid and `<-- stuck` at each blocked rank's action.
#pragma once

#include <functional>
#include <vector>

#include "pipelined/schedule.h"

namespace parity::pipelined {

struct ExecutorHooks {
  std::function<bool(const Action&)> ready;  // have the action's inputs arrived?
  std::function<void(const Action&)> run;
};

// Runs per_rank_orders[r] in order on every rank. The grid is only used for the deadlock
// report. Throws DeadlockError.
void run_in_process(const Schedule& grid, const std::vector<std::vector<Action>>& per_rank_orders,
                    const ExecutorHooks& hooks);

// The forward actions of each rank's order (a forward-only pass).
std::vector<std::vector<Action>> forward_only_orders(const Schedule& s);
std::vector<std::vector<Action>> training_orders(const Schedule& s);

}  // namespace parity::pipelined
