// Pipeline schedules as data: per-rank lists of compute actions ("2F0", "3B1"), generated with
// the same per-rank order as torch.distributed.pipelining, printed as a step x rank grid and
// dry-run for deadlocks before any tensor moves. Plain C++17, no torch.
//
// Vocabulary (docs/design.md section 5):
//   pp            pipeline ranks
//   vp            stages per rank (virtual pipeline size)
//   num_stages    pp * vp; stage s lives on rank s % pp (the "loop" stage->rank map)
//   microbatches  M; every (stage, micro-batch) runs exactly one F and one B
//
// Order contract the numerics depend on: on every stage, forwards run in micro-batch order
// 0..M-1 and backwards run in micro-batch order 0..M-1 (both schedules; the tests assert it).
// Gradient accumulation on a stage therefore sums micro-batches in ascending order.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "spec/options.h"

namespace parity::pipelined {

// A schedule that cannot be built or an order that cannot be simulated: bad parameters, an
// unknown schedule name, an action on the wrong rank. The message names the parameter and the
// remedy.
class ScheduleError : public spec::BadInput {
 public:
  using spec::BadInput::BadInput;
};

// A dry run that stops making progress. what() holds the step x rank grid with "<-- stuck" at
// each blocked rank's next action and one line per blocked rank, "rank 1 waits at 3F0 for 2F0".
class DeadlockError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Named by spec::schedules() ("1f1b", "interleaved1f1b", case-insensitive).
using spec::ScheduleKind;
using spec::to_string;

// One compute action: the forward (F) or full backward (B) of one micro-batch on one stage.
struct Action {
  int stage = 0;
  int microbatch = 0;
  bool forward = true;

  std::string str() const;  // torch's spelling: "{stage}F{mb}" / "{stage}B{mb}", e.g. "2F0"
  bool operator==(const Action& o) const {
    return stage == o.stage && microbatch == o.microbatch && forward == o.forward;
  }
  bool operator!=(const Action& o) const { return !(*this == o); }
};

// Reverse of Action::str(): "2F0" -> {2, 0, true}. Throws ScheduleError on anything else.
Action parse_action(const std::string& text);
// Whitespace-separated actions: "0F0 0F1 0B0" -> three actions.
std::vector<Action> parse_actions(const std::string& text);

struct Schedule {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int pp = 1;
  int vp = 1;
  int microbatches = 1;

  // grid[rank][step]: the action rank runs at that step, std::nullopt for an idle slot.
  // Rows are ragged (a rank's row ends with its last action), as torch's pipeline_order.
  //   Interleaved1F1B: exactly torch's ScheduleInterleaved1F1B.pipeline_order, idle slots
  //     included. It is a lockstep picture, not a timeline: for M % pp == 0 every action's
  //     dependencies sit at earlier steps; for M < pp they do not (torch's layout, kept).
  //   OneFOneB: torch's Schedule1F1B order, placed at the round the synchronous dry run
  //     (below) executes it, so step t = round t and the grid is a valid unit-time timeline.
  //     (torch's own Schedule1F1B._get_pipeline_order is informational and mislabels the last
  //     rank's forwards as 1..M; we do not reproduce that.)
  std::vector<std::vector<std::optional<Action>>> grid;

  int stage_to_rank(int stage) const { return stage % pp; }  // loop-style
  int num_stages() const { return pp * vp; }
  int num_steps() const;                     // the longest row of grid
  std::vector<Action> rank_order(int rank) const;  // compute order: grid row without idles
};

// Builds the schedule. Refuses (ScheduleError naming the parameter and the remedy):
//   pp < 1, vp < 1, microbatches < 1;
//   1f1b with vp != 1 (one stage per rank; use interleaved1f1b for vp > 1);
//   1f1b with microbatches < pp (torch's Schedule1F1B requires M >= number of stages);
//   interleaved1f1b with M % rounds != 0, rounds = max(1, M / pp) (torch's
//     ScheduleInterleaved1F1B requires it; M % pp == 0 is NOT required: pp4 M10 and pp4 M3
//     are accepted, pp4 M9 is refused).
// interleaved1f1b with vp == 1 is accepted, as torch accepts a single local stage; its order
// differs from 1f1b's (warmup 2*(pp-1-rank) forwards instead of pp-rank-1, F before B).
Schedule make_schedule(ScheduleKind kind, int pp, int vp, int microbatches);

// Step x rank table in the style of torch's _format_pipeline_order: a header row of ranks,
// then one row per step ("Step 07: 0F2  2B0"), idle cells as "-". Where
// stuck_step_per_rank[r] >= 0 the cell of rank r at that step reads "3F0 <-- stuck".
// Entries missing from stuck_step_per_rank count as -1.
std::string format_grid(const Schedule& schedule, const std::vector<int>& stuck_step_per_rank = {});

// {"ranks": [["0F0","0F1",null,...],["1F0",...]]}: grid rows, idle slots as null. Hand-built
// because the values are action strings and null only, and this library must build where
// nlohmann-json is absent (the GPU machine, see CMakeLists.txt).
std::string to_json(const Schedule& schedule);

// Dry run (the same rules as the in-process executor). Dependencies:
//   F(s,m) needs F(s-1,m) done (s > 0);
//   B(s,m) needs F(s,m) done, and B(s+1,m) done unless s is the last stage.
// Each round, every rank whose next action has its dependencies met at the start of the round
// executes it (synchronous rounds: the result does not depend on rank order). A round with no
// progress before every rank is done throws DeadlockError. Returns the number of rounds.
int dry_run(const Schedule& schedule);

// The same over arbitrary orders: per_rank_orders[r] is rank r's compute order, stage s on rank
// s % pp, per_rank_orders.size() == pp. Throws ScheduleError for an action on the wrong rank, a
// stage out of range, a negative micro-batch or an action listed twice; DeadlockError (grid =
// the rounds executed so far, then each rank's remaining actions) on a deadlock.
int dry_run(const std::vector<std::vector<Action>>& per_rank_orders, int num_stages, int pp);

}  // namespace parity::pipelined
