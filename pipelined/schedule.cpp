#include "pipelined/schedule.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <sstream>
#include <utility>

namespace parity::pipelined {

// [Note: interleaved order]
// Reproduces torch/distributed/pipelining/schedules.py, ScheduleInterleaved1F1B.__init__ and
// _calculate_single_rank_operations, with _get_warmup_ops(multiply_factor=2) and
// _get_1f1b_rank_ops(enable_zero_bubble=False). For rank r, with v = vp local stages
// r, r+pp, ..., r+(v-1)*pp:
//   rounds   = max(1, M / pp)                 (must divide M)
//   mpr      = M / rounds                     ("microbatches_per_round")
//   warmup   = min((v-1)*mpr + 2*(pp-1-r), M*v)
//   steady   = M*v - warmup                   (each op: one F, then one B)
//   cooldown = warmup                         (each op: an idle slot, then one B)
//   forward stage of op i:  ((i / mpr) % v) * pp + r
//   backward stage of op i: (v - 1 - ((i - warmup) / mpr) % v) * pp + r
// Each stage hands out micro-batches 0, 1, 2, ... to its forwards and, separately, to its
// backwards, so per stage both run in micro-batch order. The grid row starts with r idle slots;
// after the last warmup forward come max(0, (v*pp + 2*(pp-1-r)) - (warmup + r)) idle slots
// (none when warmup == 0, as torch only pads after a warmup op).
//
// [Note: 1F1B order]
// Reproduces torch's Schedule1F1B._step_microbatches for stage r on rank r (vp = 1):
//   warmup = min(M, pp - r) forwards F0..F(warmup-1); then "1B1F": B(b), and unless every
//   forward is done, F(f); repeat; then the remaining backwards in order.
// This is the textbook 1F1B (pp-r-1 warmup forwards, then F/B pairs): the same sequence.

namespace {

using Row = std::vector<std::optional<Action>>;
using Grid = std::vector<Row>;

Row interleaved_row(int pp, int vp, int M, int rank) {
  const int rounds = std::max(1, M / pp);
  const int mpr = M / rounds;
  const int warmup = std::min((vp - 1) * mpr + 2 * (pp - 1 - rank), M * vp);
  const int steady = M * vp - warmup;
  const int cooldown = warmup;
  const int post_warmup_idle = (vp * pp + 2 * (pp - 1 - rank)) - (warmup + rank);

  auto forward_stage = [&](int op) { return ((op / mpr) % vp) * pp + rank; };
  auto backward_stage = [&](int op) {
    return (vp - 1 - ((op - warmup) / mpr) % vp) * pp + rank;
  };
  std::map<int, int> next_fwd_mb, next_bwd_mb;  // stage -> next micro-batch
  auto fwd = [&](int stage) { return Action{stage, next_fwd_mb[stage]++, true}; };
  auto bwd = [&](int stage) { return Action{stage, next_bwd_mb[stage]++, false}; };

  Row row(rank, std::nullopt);
  for (int op = 0; op < warmup + steady + cooldown; ++op) {
    if (op < warmup) {
      row.push_back(fwd(forward_stage(op)));
      if (op == warmup - 1) row.insert(row.end(), std::max(0, post_warmup_idle), std::nullopt);
    } else if (op < warmup + steady) {
      row.push_back(fwd(forward_stage(op)));
      row.push_back(bwd(backward_stage(op)));
    } else {
      row.push_back(std::nullopt);
      row.push_back(bwd(backward_stage(op)));
    }
  }
  return row;
}

std::vector<Action> one_f_one_b_order(int pp, int M, int rank) {
  const int stage = rank;
  const int warmup = std::min(M, pp - rank);
  std::vector<Action> order;
  int f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back({stage, f, true});
  while (true) {
    order.push_back({stage, b++, false});
    if (f == M) break;
    order.push_back({stage, f++, true});
  }
  for (; b < M; ++b) order.push_back({stage, b, false});
  return order;
}

std::string cell_text(const std::optional<Action>& a) { return a ? a->str() : "-"; }

std::string format_rows(const Grid& grid, const std::vector<int>& stuck) {
  const int ranks = static_cast<int>(grid.size());
  auto stuck_at = [&](int r) { return r < static_cast<int>(stuck.size()) ? stuck[r] : -1; };
  int steps = 0;
  for (int r = 0; r < ranks; ++r) {
    steps = std::max(steps, static_cast<int>(grid[r].size()));
    steps = std::max(steps, stuck_at(r) + 1);
  }
  auto cell = [&](int r, int t) {
    std::string s = t < static_cast<int>(grid[r].size()) ? cell_text(grid[r][t]) : "-";
    if (stuck_at(r) == t) s += " <-- stuck";
    return s;
  };
  const int label_digits = static_cast<int>(std::to_string(std::max(0, steps - 1)).size());
  auto step_label = [&](int t) {
    std::string n = std::to_string(t);
    return "Step " + std::string(label_digits - n.size(), '0') + n + ": ";
  };
  std::vector<size_t> width(ranks);
  for (int r = 0; r < ranks; ++r) {
    width[r] = ("Rank " + std::to_string(r)).size();
    for (int t = 0; t < steps; ++t) width[r] = std::max(width[r], cell(r, t).size());
  }
  auto emit_line = [](std::ostringstream& os, std::string line) {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    os << line << "\n";
  };
  std::ostringstream os;
  std::string header(step_label(0).size(), ' ');
  for (int r = 0; r < ranks; ++r) {
    std::string label = "Rank " + std::to_string(r);
    header += label + std::string(width[r] - label.size() + 1, ' ');
  }
  emit_line(os, header);
  for (int t = 0; t < steps; ++t) {
    std::string line = step_label(t);
    for (int r = 0; r < ranks; ++r) {
      std::string c = cell(r, t);
      line += c + std::string(width[r] - c.size() + 1, ' ');
    }
    emit_line(os, line);
  }
  return os.str();
}

// Synchronous-round simulation shared by both dry_run overloads and by make_schedule (1F1B
// timeline). display: the grid to print on deadlock, or null to print the simulated timeline.
struct Simulation {
  int rounds = 0;
  Grid timeline;  // timeline[rank][round]
};

Simulation simulate(const std::vector<std::vector<Action>>& orders, int num_stages, int pp,
                    const Grid* display) {
  if (pp < 1) throw ScheduleError("dry run: pp must be >= 1, got " + std::to_string(pp));
  if (num_stages < 1)
    throw ScheduleError("dry run: num_stages must be >= 1, got " + std::to_string(num_stages));
  if (static_cast<int>(orders.size()) != pp)
    throw ScheduleError("dry run: got orders for " + std::to_string(orders.size()) +
                        " ranks, expected pp = " + std::to_string(pp));
  int max_mb = 0;
  std::set<std::string> listed;
  for (int r = 0; r < pp; ++r) {
    for (const Action& a : orders[r]) {
      if (a.stage < 0 || a.stage >= num_stages)
        throw ScheduleError("dry run: rank " + std::to_string(r) + " lists " + a.str() +
                            " but stages are 0.." + std::to_string(num_stages - 1));
      if (a.stage % pp != r)
        throw ScheduleError("dry run: rank " + std::to_string(r) + " lists " + a.str() +
                            " but stage " + std::to_string(a.stage) + " lives on rank " +
                            std::to_string(a.stage % pp) + " (stage % pp)");
      if (a.microbatch < 0)
        throw ScheduleError("dry run: rank " + std::to_string(r) + " lists " + a.str() +
                            " with a negative micro-batch");
      if (!listed.insert(a.str()).second)
        throw ScheduleError("dry run: rank " + std::to_string(r) + " lists " + a.str() +
                            " twice; each action runs once");
      max_mb = std::max(max_mb, a.microbatch);
    }
  }
  std::vector<std::vector<char>> done_f(num_stages, std::vector<char>(max_mb + 1, 0));
  std::vector<std::vector<char>> done_b = done_f;
  // Dependencies of a not yet met, as actions.
  auto unmet = [&](const Action& a) {
    std::vector<Action> missing;
    if (a.forward) {
      if (a.stage > 0 && !done_f[a.stage - 1][a.microbatch])
        missing.push_back({a.stage - 1, a.microbatch, true});
    } else {
      if (!done_f[a.stage][a.microbatch]) missing.push_back({a.stage, a.microbatch, true});
      if (a.stage < num_stages - 1 && !done_b[a.stage + 1][a.microbatch])
        missing.push_back({a.stage + 1, a.microbatch, false});
    }
    return missing;
  };

  Simulation sim;
  sim.timeline.assign(pp, Row{});
  std::vector<size_t> pos(pp, 0);
  auto all_done = [&] {
    for (int r = 0; r < pp; ++r)
      if (pos[r] < orders[r].size()) return false;
    return true;
  };
  while (!all_done()) {
    std::vector<int> ready;
    for (int r = 0; r < pp; ++r)
      if (pos[r] < orders[r].size() && unmet(orders[r][pos[r]]).empty()) ready.push_back(r);
    if (ready.empty()) {
      // Deadlock: every unfinished rank is blocked. Build the picture and the reasons.
      Grid shown;
      std::vector<int> stuck(pp, -1);
      if (display) {
        shown = *display;
        for (int r = 0; r < pp; ++r) {
          if (pos[r] >= orders[r].size()) continue;
          size_t seen = 0;
          for (size_t t = 0; r < static_cast<int>(shown.size()) && t < shown[r].size(); ++t) {
            if (!shown[r][t]) continue;
            if (seen++ == pos[r]) {
              stuck[r] = static_cast<int>(t);
              break;
            }
          }
        }
      } else {
        shown = sim.timeline;
        for (int r = 0; r < pp; ++r) {
          if (pos[r] >= orders[r].size()) continue;
          shown[r].resize(sim.rounds, std::nullopt);
          stuck[r] = sim.rounds;
          for (size_t i = pos[r]; i < orders[r].size(); ++i) shown[r].push_back(orders[r][i]);
        }
      }
      int blocked = 0;
      std::ostringstream why;
      for (int r = 0; r < pp; ++r) {
        if (pos[r] >= orders[r].size()) continue;
        ++blocked;
        const Action& next = orders[r][pos[r]];
        why << "rank " << r << " waits at " << next.str() << " for ";
        const std::vector<Action> missing = unmet(next);
        for (size_t i = 0; i < missing.size(); ++i) {
          why << (i ? " and " : "") << missing[i].str();
          if (!listed.count(missing[i].str())) why << " (in no rank's order)";
        }
        why << "\n";
      }
      std::ostringstream msg;
      msg << "pipeline schedule deadlocks after " << sim.rounds << " rounds: " << blocked
          << " of " << pp << " ranks blocked, none can proceed\n"
          << format_rows(shown, stuck) << why.str();
      throw DeadlockError(msg.str());
    }
    for (int r = 0; r < pp; ++r) sim.timeline[r].resize(sim.rounds, std::nullopt);
    for (int r : ready) {
      const Action& a = orders[r][pos[r]++];
      (a.forward ? done_f : done_b)[a.stage][a.microbatch] = 1;
      sim.timeline[r].push_back(a);
    }
    ++sim.rounds;
  }
  return sim;
}

std::vector<std::vector<Action>> orders_of(const Schedule& s) {
  std::vector<std::vector<Action>> orders;
  for (int r = 0; r < s.pp; ++r) orders.push_back(s.rank_order(r));
  return orders;
}

// Nearest micro-batch counts below and above M that ScheduleInterleaved1F1B accepts.
std::string interleaved_alternatives(int pp, int M) {
  auto ok = [&](int m) { return m >= 1 && m % std::max(1, m / pp) == 0; };
  int below = M - 1, above = M + 1;
  while (below >= 1 && !ok(below)) --below;
  while (!ok(above)) ++above;
  std::string s = "use M=";
  if (below >= 1) s += std::to_string(below) + " or M=";
  return s + std::to_string(above);
}

}  // namespace


std::string Action::str() const {
  return std::to_string(stage) + (forward ? "F" : "B") + std::to_string(microbatch);
}

Action parse_action(const std::string& text) {
  const size_t k = text.find_first_of("FB");
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 9 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (k == std::string::npos || !digits(text.substr(0, k)) || !digits(text.substr(k + 1)))
    throw ScheduleError("bad action \"" + text +
                        "\": expected {stage}F{mb} or {stage}B{mb}, e.g. 2F0");
  return Action{std::stoi(text.substr(0, k)), std::stoi(text.substr(k + 1)), text[k] == 'F'};
}

std::vector<Action> parse_actions(const std::string& text) {
  std::istringstream is(text);
  std::vector<Action> out;
  for (std::string tok; is >> tok;) out.push_back(parse_action(tok));
  return out;
}

int Schedule::num_steps() const {
  size_t n = 0;
  for (const Row& row : grid) n = std::max(n, row.size());
  return static_cast<int>(n);
}

std::vector<Action> Schedule::rank_order(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(grid.size()))
    throw ScheduleError("rank " + std::to_string(rank) + " out of range: schedule has pp = " +
                        std::to_string(pp) + " ranks");
  std::vector<Action> order;
  for (const auto& a : grid[rank])
    if (a) order.push_back(*a);
  return order;
}

Schedule make_schedule(ScheduleKind kind, int pp, int vp, int microbatches) {
  const std::string name = to_string(kind);
  if (pp < 1)
    throw ScheduleError("schedule " + name + ": pp (pipeline ranks) must be >= 1, got " +
                        std::to_string(pp));
  if (vp < 1)
    throw ScheduleError("schedule " + name + ": vp (stages per rank) must be >= 1, got " +
                        std::to_string(vp));
  if (microbatches < 1)
    throw ScheduleError("schedule " + name + ": microbatches (M) must be >= 1, got " +
                        std::to_string(microbatches));
  const int M = microbatches;
  Schedule s;
  s.kind = kind;
  s.pp = pp;
  s.vp = vp;
  s.microbatches = M;
  if (kind == ScheduleKind::OneFOneB) {
    if (vp != 1)
      throw ScheduleError("schedule 1f1b runs one stage per rank: vp must be 1, got vp=" +
                          std::to_string(vp) + "; use interleaved1f1b for vp > 1");
    if (M < pp)
      throw ScheduleError("schedule 1f1b needs microbatches >= pp (torch's Schedule1F1B "
                          "requires M >= number of stages): got M=" + std::to_string(M) +
                          ", pp=" + std::to_string(pp) + "; raise M to at least " +
                          std::to_string(pp));
    std::vector<std::vector<Action>> orders;
    for (int r = 0; r < pp; ++r) orders.push_back(one_f_one_b_order(pp, M, r));
    s.grid = simulate(orders, pp, pp, nullptr).timeline;
    for (Row& row : s.grid)  // trim trailing idle slots: a row ends with its last action
      while (!row.empty() && !row.back()) row.pop_back();
    return s;
  }
  const int rounds = std::max(1, M / pp);
  if (M % rounds != 0)
    throw ScheduleError("schedule interleaved1f1b needs microbatches to be a multiple of "
                        "rounds = max(1, M / pp) (torch's ScheduleInterleaved1F1B requires it): "
                        "pp=" + std::to_string(pp) + ", M=" + std::to_string(M) + " gives " +
                        std::to_string(rounds) + " rounds; " + interleaved_alternatives(pp, M) +
                        " (any multiple of pp works)");
  for (int r = 0; r < pp; ++r) s.grid.push_back(interleaved_row(pp, vp, M, r));
  return s;
}

std::string format_grid(const Schedule& schedule, const std::vector<int>& stuck_step_per_rank) {
  return format_rows(schedule.grid, stuck_step_per_rank);
}

std::string to_json(const Schedule& schedule) {
  std::string out = "{\"ranks\": [";
  for (size_t r = 0; r < schedule.grid.size(); ++r) {
    out += r ? ", [" : "[";
    for (size_t t = 0; t < schedule.grid[r].size(); ++t) {
      if (t) out += ",";
      const auto& a = schedule.grid[r][t];
      out += a ? "\"" + a->str() + "\"" : "null";
    }
    out += "]";
  }
  return out + "]}";
}

int dry_run(const Schedule& schedule) {
  return simulate(orders_of(schedule), schedule.num_stages(), schedule.pp, &schedule.grid).rounds;
}

int dry_run(const std::vector<std::vector<Action>>& per_rank_orders, int num_stages, int pp) {
  return simulate(per_rank_orders, num_stages, pp, nullptr).rounds;
}

}  // namespace parity::pipelined
