// Schedules as data: torch's per-rank orders (derived by hand below from the formulas in
// torch/distributed/pipelining/schedules.py), the grid, JSON, the dry run and its deadlock report.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "pipelined/schedule.h"

namespace pl = parity::pipelined;
using pl::Action;
using pl::ScheduleKind;

namespace {

std::string join(const std::vector<Action>& actions) {
  std::string s;
  for (const Action& a : actions) s += (s.empty() ? "" : " ") + a.str();
  return s;
}

// A grid row as text, idle slots as "-".
std::string row_text(const std::vector<std::optional<Action>>& row) {
  std::string s;
  for (const auto& a : row) s += (s.empty() ? "" : " ") + (a ? a->str() : std::string("-"));
  return s;
}

void expect_orders(const pl::Schedule& s, const std::vector<std::string>& expected) {
  ASSERT_EQ(static_cast<int>(expected.size()), s.pp);
  for (int r = 0; r < s.pp; ++r)
    EXPECT_EQ(join(s.rank_order(r)), expected[r])
        << to_string(s.kind) << " pp" << s.pp << " vp" << s.vp << " M" << s.microbatches
        << " rank " << r;
}

// Runs f, expects it to throw E, returns what().
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Interleaved1F1B: torch's ScheduleInterleaved1F1B._calculate_single_rank_operations.
//   rounds = max(1, M // pp); mpr = M // rounds
//   warmup(r) = min((vp-1)*mpr + 2*(pp-1-r), M*vp); steady = M*vp - warmup; cooldown = warmup
//   fstage(op) = ((op // mpr) % vp)*pp + r
//   bstage(op) = (vp-1 - ((op - warmup) // mpr) % vp)*pp + r
//   warmup ops: F; steady ops: F then B; cooldown ops: idle then B; per-stage mb counters.
// ---------------------------------------------------------------------------------------------

// docs/design.md section 9 example, verbatim.
// pp2 vp2 M4: rounds 2, mpr 2, M*vp 8.
//   rank0: warmup min(2+2, 8) = 4; fstage: ops0,1->0  2,3->2  4,5->0  6,7->2
//          bstage(op-4): 0,1->2  2,3->0  4,5->2  6,7->0
//          warmup 0F0 0F1 2F0 2F1 | op4 0F2 2B0, op5 0F3 2B1, op6 2F2 0B0, op7 2F3 0B1 |
//          cooldown 2B2 2B3 0B2 0B3
//   rank1: warmup min(2+0, 8) = 2; fstage: 0,1->1  2,3->3  4,5->1  6,7->3
//          bstage(op-2): 0,1->3  2,3->1  4,5->3  6,7->1
//          1F0 1F1 | 3F0 3B0, 3F1 3B1, 1F2 1B0, 1F3 1B1, 3F2 3B2, 3F3 3B3 | 1B2 1B3
TEST(Schedule, Interleaved_pp2_vp2_M4_DesignExample) {
  const auto s = pl::make_schedule(ScheduleKind::Interleaved1F1B, 2, 2, 4);
  expect_orders(s, {"0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3",
                    "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3"});
  // Idle slots: `rank` leading, then post_warmup = (vp*pp + 2*(pp-1-r)) - (warmup + r) after the
  // warmup (rank0: 6-4 = 2; rank1: 4-3 = 1), then one before each cooldown backward.
  ASSERT_EQ(s.grid.size(), 2u);
  EXPECT_EQ(row_text(s.grid[0]),
            "0F0 0F1 2F0 2F1 - - 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 - 2B2 - 2B3 - 0B2 - 0B3");
  EXPECT_EQ(row_text(s.grid[1]),
            "- 1F0 1F1 - 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 - 1B2 - 1B3");
  EXPECT_EQ(s.num_steps(), 22);
  EXPECT_EQ(s.num_stages(), 4);
  EXPECT_EQ(s.stage_to_rank(3), 1);
}

// pp4 vp2 M4: rounds 1, mpr 4, M*vp 8. fstage: ops0-3 -> r, ops4-7 -> r+4.
//   bstage(op-w): 0-3 -> r+4, 4-7 -> r.
//   warmup = min(4 + 2*(3-r), 8): r0 8, r1 8, r2 6, r3 4 (steady 0, 0, 2, 4).
//   r0/r1: all 8 forwards, then cooldown: stage r+4 B0-3, stage r B0-3.
//   r2: 2F0-3 6F0 6F1 | op6 6F2 6B0, op7 6F3 6B1 | op8,9 (op-w 2,3) 6B2 6B3, op10-13 2B0-3.
//   r3: 3F0-3 | op4-7: 7Fk 7Bk | op8-11 (op-w 4-7) 3B0-3.
TEST(Schedule, Interleaved_pp4_vp2_M4) {
  expect_orders(pl::make_schedule(ScheduleKind::Interleaved1F1B, 4, 2, 4),
                {"0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 4B0 4B1 4B2 4B3 0B0 0B1 0B2 0B3",
                 "1F0 1F1 1F2 1F3 5F0 5F1 5F2 5F3 5B0 5B1 5B2 5B3 1B0 1B1 1B2 1B3",
                 "2F0 2F1 2F2 2F3 6F0 6F1 6F2 6B0 6F3 6B1 6B2 6B3 2B0 2B1 2B2 2B3",
                 "3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3B0 3B1 3B2 3B3"});
}

// pp4 vp4 M4: rounds 1, mpr 4, M*vp 16. fstage(op) = (op//4)*4 + r (stages r, r+4, r+8, r+12).
//   bstage(op) = (3 - (op-w)//4)*4 + r.
//   warmup = min(12 + 2*(3-r), 16): r0 16, r1 16, r2 14, r3 12.
//   r0/r1: 16 forwards, then backwards stage r+12, r+8, r+4, r (B0-3 each).
//   r2: 2F0-3 6F0-3 10F0-3 14F0 14F1 | op14 14F2 14B0, op15 14F3 14B1 |
//       op16,17 (op-w 2,3) 14B2 14B3; op18-21 10B0-3; op22-25 6B0-3; op26-29 2B0-3.
//   r3: 3F0-3 7F0-3 11F0-3 | op12-15 15Fk 15Bk | 11B0-3 7B0-3 3B0-3.
TEST(Schedule, Interleaved_pp4_vp4_M4) {
  expect_orders(
      pl::make_schedule(ScheduleKind::Interleaved1F1B, 4, 4, 4),
      {"0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 8F0 8F1 8F2 8F3 12F0 12F1 12F2 12F3 "
       "12B0 12B1 12B2 12B3 8B0 8B1 8B2 8B3 4B0 4B1 4B2 4B3 0B0 0B1 0B2 0B3",
       "1F0 1F1 1F2 1F3 5F0 5F1 5F2 5F3 9F0 9F1 9F2 9F3 13F0 13F1 13F2 13F3 "
       "13B0 13B1 13B2 13B3 9B0 9B1 9B2 9B3 5B0 5B1 5B2 5B3 1B0 1B1 1B2 1B3",
       "2F0 2F1 2F2 2F3 6F0 6F1 6F2 6F3 10F0 10F1 10F2 10F3 14F0 14F1 14F2 14B0 14F3 14B1 "
       "14B2 14B3 10B0 10B1 10B2 10B3 6B0 6B1 6B2 6B3 2B0 2B1 2B2 2B3",
       "3F0 3F1 3F2 3F3 7F0 7F1 7F2 7F3 11F0 11F1 11F2 11F3 15F0 15B0 15F1 15B1 15F2 15B2 "
       "15F3 15B3 11B0 11B1 11B2 11B3 7B0 7B1 7B2 7B3 3B0 3B1 3B2 3B3"});
}

// pp4 vp2 M8: rounds 2, mpr 4, M*vp 16. fstage: ops 0-3 r, 4-7 r+4, 8-11 r, 12-15 r+4.
//   bstage(op-w): 0-3 r+4, 4-7 r, 8-11 r+4, 12-15 r.
//   warmup = min(4 + 2*(3-r), 16): r0 10, r1 8, r2 6, r3 4.
//   r0: 0F0-3 4F0-3 0F4 0F5 | op10 0F6 4B0, op11 0F7 4B1, op12 4F4 4B2, op13 4F5 4B3,
//       op14 4F6 0B0, op15 4F7 0B1 | (op-w 6..15) 0B2 0B3 4B4-7 0B4-7
//   r1: 1F0-3 5F0-3 | op8-11 1F(4..7) 5B(0..3), op12-15 5F(4..7) 1B(0..3) | 5B4-7 1B4-7
//   r2: 2F0-3 6F0 6F1 | op6 6F2 6B0, op7 6F3 6B1, op8 2F4 6B2, op9 2F5 6B3, op10 2F6 2B0,
//       op11 2F7 2B1, op12 6F4 2B2, op13 6F5 2B3, op14 6F6 6B4, op15 6F7 6B5 |
//       (op-w 10..15) 6B6 6B7 2B4-7
//   r3: 3F0-3 | op4-7 7Fk 7Bk, op8-11 3F(4..7) 3B(0..3), op12-15 7F(4..7) 7B(4..7) | 3B4-7
TEST(Schedule, Interleaved_pp4_vp2_M8) {
  expect_orders(pl::make_schedule(ScheduleKind::Interleaved1F1B, 4, 2, 8),
                {"0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5 0F6 4B0 0F7 4B1 4F4 4B2 4F5 4B3 4F6 0B0 "
                 "4F7 0B1 0B2 0B3 4B4 4B5 4B6 4B7 0B4 0B5 0B6 0B7",
                 "1F0 1F1 1F2 1F3 5F0 5F1 5F2 5F3 1F4 5B0 1F5 5B1 1F6 5B2 1F7 5B3 5F4 1B0 5F5 1B1 "
                 "5F6 1B2 5F7 1B3 5B4 5B5 5B6 5B7 1B4 1B5 1B6 1B7",
                 "2F0 2F1 2F2 2F3 6F0 6F1 6F2 6B0 6F3 6B1 2F4 6B2 2F5 6B3 2F6 2B0 2F7 2B1 6F4 2B2 "
                 "6F5 2B3 6F6 6B4 6F7 6B5 6B6 6B7 2B4 2B5 2B6 2B7",
                 "3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3F4 3B0 3F5 3B1 3F6 3B2 3F7 3B3 "
                 "7F4 7B4 7F5 7B5 7F6 7B6 7F7 7B7 3B4 3B5 3B6 3B7"});
}

// M not a multiple of pp, accepted by torch: pp2 vp2 M3 has rounds max(1, 3//2) = 1, mpr 3.
//   fstage: ops0-2 -> r, 3-5 -> r+2; bstage(op-w): 0-2 -> r+2, 3-5 -> r.
//   r0: warmup min(3+2, 6) = 5: 0F0 0F1 0F2 2F0 2F1 | op5 2F2 2B0 | 2B1 2B2 0B0 0B1 0B2
//   r1: warmup min(3+0, 6) = 3: 1F0 1F1 1F2 | 3F0 3B0, 3F1 3B1, 3F2 3B2 | 1B0 1B1 1B2
TEST(Schedule, Interleaved_pp2_vp2_M3) {
  expect_orders(pl::make_schedule(ScheduleKind::Interleaved1F1B, 2, 2, 3),
                {"0F0 0F1 0F2 2F0 2F1 2F2 2B0 2B1 2B2 0B0 0B1 0B2",
                 "1F0 1F1 1F2 3F0 3B0 3F1 3B1 3F2 3B2 1B0 1B1 1B2"});
}

// M = 1: pp2 vp2 M1: rounds 1, mpr 1, M*vp 2. fstage(op) = (op%2)*2 + r.
//   r0: warmup min(1+2, 2) = 2: 0F0 2F0; post idle (4+2)-(2+0) = 4; cooldown op2 (op-w 0)
//       -> stage 2: idle 2B0; op3 -> stage 0: idle 0B0.
//   r1: warmup min(1+0, 2) = 1: 1F0; post idle (4+0)-(1+1) = 2; steady op1: 3F0 3B0;
//       cooldown op2 (op-w 1) -> stage 1: idle 1B0.
TEST(Schedule, Interleaved_pp2_vp2_M1) {
  const auto s = pl::make_schedule(ScheduleKind::Interleaved1F1B, 2, 2, 1);
  expect_orders(s, {"0F0 2F0 2B0 0B0", "1F0 3F0 3B0 1B0"});
  EXPECT_EQ(row_text(s.grid[0]), "0F0 2F0 - - - - - 2B0 - 0B0");
  EXPECT_EQ(row_text(s.grid[1]), "- 1F0 - - 3F0 3B0 - 1B0");
  EXPECT_GT(pl::dry_run(s), 0);
}

// pp1 vp2 M1: one rank holds both stages. warmup min(1*1 + 0, 2) = 1: 0F0; steady op1:
//   fstage (1%2)*1 = 1 -> 1F0, bstage (1 - 0) = 1 -> 1B0; cooldown op2 (op-w 1) -> 0B0.
TEST(Schedule, Interleaved_pp1_vp2_M1) {
  expect_orders(pl::make_schedule(ScheduleKind::Interleaved1F1B, 1, 2, 1), {"0F0 1F0 1B0 0B0"});
}

// ---------------------------------------------------------------------------------------------
// 1F1B: torch's Schedule1F1B._step_microbatches (stage r on rank r):
//   warmup = min(M, pp - r) forwards; then repeat { B(b); if all forwards done: stop; F(f) };
//   then the remaining backwards.
// ---------------------------------------------------------------------------------------------

// pp4 M4: warmup 4, 3, 2, 1.
//   r0: F0-3, B0 (all forwards done), B1-3.   r1: F0-2, B0 F3, B1, B2 B3.
//   r2: F0 F1, B0 F2, B1 F3, B2, B3.          r3: F0, B0 F1, B1 F2, B2 F3, B3.
TEST(Schedule, OneFOneB_pp4_M4) {
  expect_orders(pl::make_schedule(ScheduleKind::OneFOneB, 4, 1, 4),
                {"0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3", "1F0 1F1 1F2 1B0 1F3 1B1 1B2 1B3",
                 "2F0 2F1 2B0 2F2 2B1 2F3 2B2 2B3", "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3"});
}

// pp2 M4: warmup 2, 1. r0: F0 F1, B0 F2, B1 F3, B2, B3. r1: F0, B0 F1, B1 F2, B2 F3, B3.
// Grid = synchronous dry-run rounds, by hand:
//   round 0: r0 0F0; r1 1F0 waits for 0F0        round 5: r0 0B1; r1 1F2
//   round 1: r0 0F1; r1 1F0                       round 6: r0 0F3; r1 1B2
//   round 2: r0 0B0 waits for 1B0; r1 1B0         round 7: r0 0B2; r1 1F3
//   round 3: r0 0B0; r1 1F1                       round 8: r0 0B3 waits for 1B3; r1 1B3
//   round 4: r0 0F2; r1 1B1                       round 9: r0 0B3            -> 10 rounds
TEST(Schedule, OneFOneB_pp2_M4) {
  const auto s = pl::make_schedule(ScheduleKind::OneFOneB, 2, 1, 4);
  expect_orders(s, {"0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3", "1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3"});
  EXPECT_EQ(row_text(s.grid[0]), "0F0 0F1 - 0B0 0F2 0B1 0F3 0B2 - 0B3");
  EXPECT_EQ(row_text(s.grid[1]), "- 1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3");
  EXPECT_EQ(pl::dry_run(s), 10);
}

// M = 1 needs pp = 1 for 1f1b (torch requires M >= stages): warmup min(1, 1) = 1: F0, B0.
TEST(Schedule, OneFOneB_pp1_M1) {
  const auto s = pl::make_schedule(ScheduleKind::OneFOneB, 1, 1, 1);
  expect_orders(s, {"0F0 0B0"});
  EXPECT_EQ(pl::dry_run(s), 2);
  EXPECT_EQ(pl::to_json(s), R"({"ranks": [["0F0","0B0"]]})");
}

// ---------------------------------------------------------------------------------------------
// Properties over every accepted shape: pp 1..6, vp 1..4, M 1..16.
// ---------------------------------------------------------------------------------------------

namespace {

struct Shape {
  ScheduleKind kind;
  int pp, vp, M;
};

std::vector<Shape> accepted_shapes() {
  std::vector<Shape> out;
  for (int pp = 1; pp <= 6; ++pp)
    for (int M = 1; M <= 16; ++M) {
      if (M >= pp) out.push_back({ScheduleKind::OneFOneB, pp, 1, M});
      if (M % std::max(1, M / pp) != 0) continue;
      for (int vp = 1; vp <= 4; ++vp) out.push_back({ScheduleKind::Interleaved1F1B, pp, vp, M});
    }
  return out;
}

std::string name(const Shape& sh) {
  return std::string(to_string(sh.kind)) + " pp" + std::to_string(sh.pp) + " vp" +
         std::to_string(sh.vp) + " M" + std::to_string(sh.M);
}

}  // namespace

TEST(ScheduleProperties, EveryAcceptedShapeBuildsAndDryRuns) {
  const auto shapes = accepted_shapes();
  ASSERT_GT(shapes.size(), 300u);
  for (const Shape& sh : shapes) {
    pl::Schedule s;
    ASSERT_NO_THROW(s = pl::make_schedule(sh.kind, sh.pp, sh.vp, sh.M)) << name(sh);
    EXPECT_NO_THROW(pl::dry_run(s)) << name(sh);
  }
}

// Each (stage, mb) runs exactly once as F and once as B, on rank stage % pp.
TEST(ScheduleProperties, EveryActionOnceOnItsRank) {
  for (const Shape& sh : accepted_shapes()) {
    const auto s = pl::make_schedule(sh.kind, sh.pp, sh.vp, sh.M);
    std::vector<std::vector<int>> f(s.num_stages(), std::vector<int>(sh.M, 0)), b = f;
    for (int r = 0; r < s.pp; ++r)
      for (const Action& a : s.rank_order(r)) {
        ASSERT_GE(a.stage, 0) << name(sh);
        ASSERT_LT(a.stage, s.num_stages()) << name(sh);
        ASSERT_GE(a.microbatch, 0) << name(sh);
        ASSERT_LT(a.microbatch, sh.M) << name(sh);
        EXPECT_EQ(a.stage % s.pp, r) << name(sh) << " " << a.str();
        ++(a.forward ? f : b)[a.stage][a.microbatch];
      }
    for (int st = 0; st < s.num_stages(); ++st)
      for (int m = 0; m < sh.M; ++m) {
        EXPECT_EQ(f[st][m], 1) << name(sh) << " stage " << st << " mb " << m;
        EXPECT_EQ(b[st][m], 1) << name(sh) << " stage " << st << " mb " << m;
      }
  }
}

// The numerics contract: per stage, forwards and backwards each run in micro-batch order 0..M-1.
TEST(ScheduleProperties, PerStageMicrobatchOrderIsAscending) {
  for (const Shape& sh : accepted_shapes()) {
    const auto s = pl::make_schedule(sh.kind, sh.pp, sh.vp, sh.M);
    std::vector<int> next_f(s.num_stages(), 0), next_b(s.num_stages(), 0);
    for (int r = 0; r < s.pp; ++r)
      for (const Action& a : s.rank_order(r)) {
        int& next = (a.forward ? next_f : next_b)[a.stage];
        EXPECT_EQ(a.microbatch, next) << name(sh) << " rank " << r << " " << a.str();
        next = a.microbatch + 1;
      }
  }
}

// Where the grid is a lockstep timeline, every dependency sits at an earlier step: always for
// 1f1b (its grid is the dry-run timeline, and rounds == steps), and for torch's interleaved
// layout whenever M is a multiple of pp (for M < pp torch's layout is not; see schedule.h).
TEST(ScheduleProperties, GridIsCausalWhereClaimed) {
  for (const Shape& sh : accepted_shapes()) {
    if (sh.kind == ScheduleKind::Interleaved1F1B && (sh.M < sh.pp || sh.M % sh.pp != 0)) continue;
    const auto s = pl::make_schedule(sh.kind, sh.pp, sh.vp, sh.M);
    const int S = s.num_stages();
    std::vector<std::vector<int>> tf(S, std::vector<int>(sh.M, -1)), tb = tf;
    for (int r = 0; r < s.pp; ++r)
      for (int t = 0; t < static_cast<int>(s.grid[r].size()); ++t)
        if (const auto& a = s.grid[r][t]) (a->forward ? tf : tb)[a->stage][a->microbatch] = t;
    for (int st = 0; st < S; ++st)
      for (int m = 0; m < sh.M; ++m) {
        if (st > 0) {
          EXPECT_LT(tf[st - 1][m], tf[st][m]) << name(sh) << " F" << st << "," << m;
        }
        EXPECT_LT(tf[st][m], tb[st][m]) << name(sh);
        if (st < S - 1) {
          EXPECT_LT(tb[st + 1][m], tb[st][m]) << name(sh) << " B" << st << "," << m;
        }
      }
    if (sh.kind == ScheduleKind::OneFOneB) {
      EXPECT_EQ(pl::dry_run(s), s.num_steps()) << name(sh);
    }
  }
}

TEST(ScheduleProperties, RankOrderIsGridWithoutIdles) {
  const auto s = pl::make_schedule(ScheduleKind::Interleaved1F1B, 4, 2, 8);
  for (int r = 0; r < s.pp; ++r) {
    std::vector<Action> from_grid;
    for (const auto& a : s.grid[r])
      if (a) from_grid.push_back(*a);
    EXPECT_EQ(join(s.rank_order(r)), join(from_grid));
  }
  EXPECT_THROW(s.rank_order(4), pl::ScheduleError);
}

// ---------------------------------------------------------------------------------------------
// Dry run: deadlocks and invalid orders.
// ---------------------------------------------------------------------------------------------

// Rank 1 runs its backward before its forward: round 0 runs 0F0, then nobody can move.
TEST(DryRun, BackwardBeforeForwardDeadlocks) {
  const std::vector<std::vector<Action>> orders = {pl::parse_actions("0F0 0B0"),
                                                   pl::parse_actions("1B0 1F0")};
  const std::string msg = message_of<pl::DeadlockError>([&] { pl::dry_run(orders, 2, 2); });
  EXPECT_TRUE(contains(msg, "deadlocks after 1 rounds")) << msg;
  EXPECT_TRUE(contains(msg, "<-- stuck")) << msg;
  EXPECT_TRUE(contains(msg, "rank 0 waits at 0B0 for 1B0")) << msg;
  EXPECT_TRUE(contains(msg, "rank 1 waits at 1B0 for 1F0")) << msg;
  // The grid: round 0 as executed, then each rank's remaining actions from step 1.
  EXPECT_TRUE(contains(msg, "Step 1: 0B0 <-- stuck 1B0 <-- stuck")) << msg;
}

// Two ranks waiting on each other's forward: rank 0 at 2F0 needs 1F0, rank 1 at 3F0 needs 2F0.
TEST(DryRun, CrossRankWaitDeadlocks) {
  const std::vector<std::vector<Action>> orders = {pl::parse_actions("0F0 2F0 2B0 0B0"),
                                                   pl::parse_actions("3F0 1F0 3B0 1B0")};
  const std::string msg = message_of<pl::DeadlockError>([&] { pl::dry_run(orders, 4, 2); });
  EXPECT_TRUE(contains(msg, "<-- stuck")) << msg;
  EXPECT_TRUE(contains(msg, "rank 0 waits at 2F0 for 1F0")) << msg;
  EXPECT_TRUE(contains(msg, "rank 1 waits at 3F0 for 2F0")) << msg;
}

// An action nobody lists is named as such.
TEST(DryRun, MissingDependencyIsNamed) {
  const std::vector<std::vector<Action>> orders = {pl::parse_actions("0F0 0B0"),
                                                   pl::parse_actions("1B0")};
  const std::string msg = message_of<pl::DeadlockError>([&] { pl::dry_run(orders, 2, 2); });
  EXPECT_TRUE(contains(msg, "rank 1 waits at 1B0 for 1F0 (in no rank's order)")) << msg;
}

// A broken Schedule: swap 3F0 and 3B0 on rank 1 of the DESIGN example. The report uses the
// schedule's own grid, with the marker at each blocked rank's next action.
TEST(DryRun, BrokenScheduleReportsItsGrid) {
  auto s = pl::make_schedule(ScheduleKind::Interleaved1F1B, 2, 2, 4);
  ASSERT_EQ(s.grid[1][4]->str(), "3F0");
  ASSERT_EQ(s.grid[1][5]->str(), "3B0");
  std::swap(s.grid[1][4], s.grid[1][5]);
  const std::string msg = message_of<pl::DeadlockError>([&] { pl::dry_run(s); });
  EXPECT_TRUE(contains(msg, "rank 0 waits at 2B0 for 3B0")) << msg;
  EXPECT_TRUE(contains(msg, "rank 1 waits at 3B0 for 3F0")) << msg;
  EXPECT_TRUE(contains(msg, "Step 04: -             3B0 <-- stuck")) << msg;
  EXPECT_TRUE(contains(msg, "Step 07: 2B0 <-- stuck 3B1")) << msg;
}

TEST(DryRun, RefusesInvalidOrders) {
  auto msg = message_of<pl::ScheduleError>(
      [] { pl::dry_run({pl::parse_actions("1F0"), {}}, 2, 2); });
  EXPECT_TRUE(contains(msg, "stage 1 lives on rank 1")) << msg;
  msg = message_of<pl::ScheduleError>(
      [] { pl::dry_run({pl::parse_actions("0F0 0F0 0B0")}, 1, 1); });
  EXPECT_TRUE(contains(msg, "0F0 twice")) << msg;
  msg = message_of<pl::ScheduleError>([] { pl::dry_run({pl::parse_actions("2F0")}, 2, 1); });
  EXPECT_TRUE(contains(msg, "stages are 0..1")) << msg;
  msg = message_of<pl::ScheduleError>([] { pl::dry_run({{}}, 1, 2); });
  EXPECT_TRUE(contains(msg, "expected pp = 2")) << msg;
}

TEST(DryRun, ValidHandOrderCountsRounds) {
  // pp1, two stages on rank 0, sequential: one action per round.
  EXPECT_EQ(pl::dry_run({pl::parse_actions("0F0 1F0 1B0 0B0")}, 2, 1), 4);
  EXPECT_EQ(pl::dry_run({{}, {}}, 2, 2), 0);
}

// ---------------------------------------------------------------------------------------------
// Formatting, JSON, names, parameter checks.
// ---------------------------------------------------------------------------------------------

TEST(ScheduleFormat, GridTableOfDesignExample) {
  const auto s = pl::make_schedule(ScheduleKind::Interleaved1F1B, 2, 2, 4);
  const std::string expected =
      "         Rank 0 Rank 1\n"
      "Step 00: 0F0    -\n"
      "Step 01: 0F1    1F0\n"
      "Step 02: 2F0    1F1\n"
      "Step 03: 2F1    -\n"
      "Step 04: -      3F0\n"
      "Step 05: -      3B0\n"
      "Step 06: 0F2    3F1\n"
      "Step 07: 2B0    3B1\n"
      "Step 08: 0F3    1F2\n"
      "Step 09: 2B1    1B0\n"
      "Step 10: 2F2    1F3\n"
      "Step 11: 0B0    1B1\n"
      "Step 12: 2F3    3F2\n"
      "Step 13: 0B1    3B2\n"
      "Step 14: -      3F3\n"
      "Step 15: 2B2    3B3\n"
      "Step 16: -      -\n"
      "Step 17: 2B3    1B2\n"
      "Step 18: -      -\n"
      "Step 19: 0B2    1B3\n"
      "Step 20: -      -\n"
      "Step 21: 0B3    -\n";
  EXPECT_EQ(pl::format_grid(s), expected);
}

TEST(ScheduleFormat, GridContainsEveryActionAndMarksStuckCells) {
  const auto s = pl::make_schedule(ScheduleKind::Interleaved1F1B, 4, 2, 8);
  const std::string table = pl::format_grid(s);
  for (int r = 0; r < s.pp; ++r)
    for (const Action& a : s.rank_order(r)) EXPECT_TRUE(contains(table, a.str())) << a.str();
  EXPECT_FALSE(contains(table, "<-- stuck"));
  const std::string marked = pl::format_grid(s, {-1, 3});
  EXPECT_TRUE(contains(marked, "Step 03: 0F3")) << marked;
  EXPECT_TRUE(contains(marked, "1F2 <-- stuck")) << marked;
}

TEST(ScheduleFormat, JsonShape) {
  const auto s = pl::make_schedule(ScheduleKind::Interleaved1F1B, 2, 2, 4);
  const std::string json = pl::to_json(s);
  EXPECT_EQ(json,
            R"({"ranks": [["0F0","0F1","2F0","2F1",null,null,"0F2","2B0","0F3","2B1","2F2",)"
            R"("0B0","2F3","0B1",null,"2B2",null,"2B3",null,"0B2",null,"0B3"], )"
            R"([null,"1F0","1F1",null,"3F0","3B0","3F1","3B1","1F2","1B0","1F3","1B1","3F2",)"
            R"("3B2","3F3","3B3",null,"1B2",null,"1B3"]]})");
}

// Parsing and the refusal of a schedule name are the specification's table (tests/test_spec.cpp);
// here: the pipeline prints its kinds through it, and its errors are of the right kinds.
TEST(ScheduleNames, PrintThroughTheSpecificationsTable) {
  EXPECT_STREQ(pl::to_string(ScheduleKind::OneFOneB), "1f1b");
  EXPECT_STREQ(pl::to_string(ScheduleKind::Interleaved1F1B), "interleaved1f1b");
  static_assert(std::is_base_of_v<parity::spec::BadInput, pl::ScheduleError>);
  static_assert(std::is_base_of_v<std::runtime_error, pl::DeadlockError>);
}

TEST(ScheduleNames, ActionText) {
  EXPECT_EQ((Action{2, 0, true}).str(), "2F0");
  EXPECT_EQ((Action{13, 11, false}).str(), "13B11");
  EXPECT_EQ(pl::parse_action("13B11"), (Action{13, 11, false}));
  EXPECT_THROW(pl::parse_action("2X0"), pl::ScheduleError);
  EXPECT_THROW(pl::parse_action("F0"), pl::ScheduleError);
  EXPECT_THROW(pl::parse_action("2F"), pl::ScheduleError);
}

TEST(ScheduleParams, RefusedWithParameterAndRemedy) {
  auto msg = message_of<pl::ScheduleError>(
      [] { pl::make_schedule(ScheduleKind::OneFOneB, 2, 2, 4); });
  EXPECT_TRUE(contains(msg, "vp must be 1")) << msg;
  EXPECT_TRUE(contains(msg, "interleaved1f1b")) << msg;

  msg = message_of<pl::ScheduleError>(
      [] { pl::make_schedule(ScheduleKind::Interleaved1F1B, 0, 2, 4); });
  EXPECT_TRUE(contains(msg, "pp (pipeline ranks) must be >= 1, got 0")) << msg;

  msg = message_of<pl::ScheduleError>(
      [] { pl::make_schedule(ScheduleKind::Interleaved1F1B, 2, 0, 4); });
  EXPECT_TRUE(contains(msg, "vp (stages per rank) must be >= 1, got 0")) << msg;

  msg = message_of<pl::ScheduleError>(
      [] { pl::make_schedule(ScheduleKind::Interleaved1F1B, 2, 2, 0); });
  EXPECT_TRUE(contains(msg, "microbatches (M) must be >= 1, got 0")) << msg;

  // torch's Schedule1F1B: M >= number of stages.
  msg = message_of<pl::ScheduleError>([] { pl::make_schedule(ScheduleKind::OneFOneB, 4, 1, 3); });
  EXPECT_TRUE(contains(msg, "M=3, pp=4")) << msg;
  EXPECT_TRUE(contains(msg, "raise M to at least 4")) << msg;

  // torch's ScheduleInterleaved1F1B: M % max(1, M // pp) == 0. pp2 M5: 2 rounds, 5 % 2 != 0.
  msg = message_of<pl::ScheduleError>(
      [] { pl::make_schedule(ScheduleKind::Interleaved1F1B, 2, 2, 5); });
  EXPECT_TRUE(contains(msg, "pp=2, M=5 gives 2 rounds")) << msg;
  EXPECT_TRUE(contains(msg, "use M=4 or M=6")) << msg;
  // pp4 M9: 2 rounds -> refused; M10 (2 rounds) and M3 (1 round) are accepted.
  EXPECT_THROW(pl::make_schedule(ScheduleKind::Interleaved1F1B, 4, 2, 9), pl::ScheduleError);
  EXPECT_NO_THROW(pl::make_schedule(ScheduleKind::Interleaved1F1B, 4, 2, 10));
  EXPECT_NO_THROW(pl::make_schedule(ScheduleKind::Interleaved1F1B, 4, 2, 3));
}
