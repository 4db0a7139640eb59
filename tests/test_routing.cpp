// The split and the block-stack routing tables (docs/design.md sections 5 and 9). Every expected
// value below is written out by hand from the seed pull request's review tables
// ("2 blocks x 4 layers, with pp2 x vp2" and "4 blocks x 4 layers, pp4 x vp4", forward and
// backward) or from docs/design.md section 9; the seed's stack entries e, x4, x8, x12 are our
// blocks 0, 1, 2, 3.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipelined/routing.h"
#include "pipelined/split.h"

namespace pl = parity::pipelined;
using pl::Blocks;

namespace {

constexpr int E = pl::kEmbUnit;

// Units of one stage for layers a..b inclusive.
std::vector<int> range(int a, int b) {
  std::vector<int> v;
  for (int i = a; i <= b; ++i) v.push_back(i);
  return v;
}

std::vector<std::vector<int>> all_units(const pl::Split& s) {
  std::vector<std::vector<int>> out;
  for (int i = 0; i < s.num_stages(); ++i) out.push_back(s.units(i));
  return out;
}

// Collects as (from_stage, block) pairs, sorted: the order within a stage is not specified.
using Collects = std::vector<std::pair<int, int>>;
Collects collects_of(const pl::StageRoute& r) {
  Collects c;
  for (const auto& d : r.collects) c.push_back({d.from_stage, d.block});
  std::sort(c.begin(), c.end());
  return c;
}
// {from_stage, {blocks}} groups, as the seed prints "s7 stored: [de, dx4]".
Collects collects_from(const std::vector<std::pair<int, Blocks>>& groups) {
  Collects c;
  for (const auto& g : groups)
    for (int b : g.second) c.push_back({g.first, b});
  std::sort(c.begin(), c.end());
  return c;
}

// Runs f and returns the SplitError message; fails the test when f does not throw SplitError.
template <class F>
std::string split_error(F f) {
  try {
    f();
  } catch (const pl::SplitError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-SplitError exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

}  // namespace

// ------------------------------------------------------------------------------------------
// 1. Split
// ------------------------------------------------------------------------------------------

// Seed, 2 blocks x 4 layers at pp2 x vp2: s0 emb, 0-1; s1 2-4; s2 5-6; s3 7, head.
// (E = 8 + 2 = 10 units over 4 stages: 2 each, the first 2 stages one more: 3, 3, 2, 2.)
TEST(Split, Default8Layers4Stages) {
  const auto s = pl::default_split(8, 4);
  EXPECT_EQ(s.spec(), "emb,0-1|2-4|5-6|7,head");
  ASSERT_EQ(s.num_stages(), 4);
  EXPECT_EQ(s.units(0), (std::vector<int>{E, 0, 1}));
  EXPECT_EQ(s.units(1), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(s.units(2), (std::vector<int>{5, 6}));
  EXPECT_EQ(s.units(3), (std::vector<int>{7, 8}));
  EXPECT_TRUE(s.has_emb(0));
  EXPECT_FALSE(s.has_emb(1));
  EXPECT_TRUE(s.has_head(3));
  EXPECT_FALSE(s.has_head(2));
  EXPECT_EQ(s.layers(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(s.layers(3), (std::vector<int>{7}));
  EXPECT_EQ(s.head_unit(), 8);
  EXPECT_EQ(s.stage_of_unit(E), 0);
  EXPECT_EQ(s.stage_of_unit(4), 1);
  EXPECT_EQ(s.stage_of_unit(8), 3);
}

// Seed, 4 blocks x 4 layers at pp4 x vp4: s0 emb, 0; s1 1-2; s2..s14 layers 3..15; s15 head.
// (E = 18 over 16 stages: 1 each, the first 2 stages one more.)
TEST(Split, Default16Layers16Stages) {
  const auto s = pl::default_split(16, 16);
  ASSERT_EQ(s.num_stages(), 16);
  EXPECT_EQ(s.units(0), (std::vector<int>{E, 0}));
  EXPECT_EQ(s.units(1), (std::vector<int>{1, 2}));
  for (int st = 2; st <= 14; ++st) EXPECT_EQ(s.units(st), (std::vector<int>{st + 1})) << st;
  EXPECT_EQ(s.units(15), (std::vector<int>{16}));
  EXPECT_FALSE(s.has_layers(15));
  EXPECT_TRUE(s.has_head(15));
  EXPECT_EQ(s.spec(), "emb,0|1-2|3|4|5|6|7|8|9|10|11|12|13|14|15|head");
}

// The seed's CI cell (17 layers, 16 stages): "one layer per stage from layer 5 on, the head
// alone on the last, the second block opening inside stage 2". E = 19 over 16: the first 3
// stages hold 2 units.
TEST(Split, Default17Layers16Stages) {
  const auto s = pl::default_split(17, 16);
  EXPECT_EQ(s.spec(), "emb,0|1-2|3-4|5|6|7|8|9|10|11|12|13|14|15|16|head");
  EXPECT_EQ(s.units(2), (std::vector<int>{3, 4}));  // layer 4 opens block 1 (lpb 4)
  EXPECT_EQ(s.units(15), (std::vector<int>{17}));
}

// 93 layers over 8 stages: E = 95, 95 / 8 = 11 rem 7, so stages 0-6 hold 12 units, stage 7 11.
// s0 = emb + 11 layers (0-10), s1..s6 12 layers each, s7 = 10 layers (83-92) + head.
TEST(Split, Default93Layers8Stages) {
  const auto s = pl::default_split(93, 8);
  EXPECT_EQ(s.spec(), "emb,0-10|11-22|23-34|35-46|47-58|59-70|71-82|83-92,head");
  const std::vector<size_t> sizes{12, 12, 12, 12, 12, 12, 12, 11};
  for (int st = 0; st < 8; ++st) EXPECT_EQ(s.units(st).size(), sizes[st]) << st;
}

TEST(Split, DefaultRefusesMoreStagesThanUnits) {
  // 8 layers + emb + head = 10 units: 11 stages cannot each hold one.
  split_error([] { pl::default_split(8, 11); });
  split_error([] { pl::default_split(8, 0); });
  EXPECT_EQ(pl::default_split(8, 10).spec(), "emb|0|1|2|3|4|5|6|7|head");
}

TEST(ParseSplit, RoundTripsSpec) {
  const std::vector<std::pair<int, int>> shapes{{8, 4}, {16, 16}, {17, 16}, {93, 8},
                                                {93, 32}, {8, 1}, {8, 10}};
  for (const auto& [L, S] : shapes) {
    const auto s = pl::default_split(L, S);
    const auto p = pl::parse_split(s.spec(), L, S);
    EXPECT_EQ(all_units(p), all_units(s)) << s.spec();
    EXPECT_EQ(p.spec(), s.spec());
  }
  // An uneven hand-written split round-trips too.
  const auto p = pl::parse_split("emb|0-5|6,7,head", 8, 3);
  EXPECT_EQ(p.units(0), (std::vector<int>{E}));
  EXPECT_EQ(p.units(1), range(0, 5));
  EXPECT_EQ(p.units(2), (std::vector<int>{6, 7, 8}));
  EXPECT_EQ(p.spec(), "emb|0-5|6-7,head");
  EXPECT_EQ(all_units(pl::parse_split(p.spec(), 8, 3)), all_units(p));
}

TEST(ParseSplit, EmbAndHeadMayBeLeftOut) {
  EXPECT_EQ(pl::parse_split("0-1|2-4|5-6|7", 8, 4).spec(), "emb,0-1|2-4|5-6|7,head");
  EXPECT_EQ(pl::parse_split("0-1|2-4|5-6|7,head", 8).spec(), "emb,0-1|2-4|5-6|7,head");
  EXPECT_EQ(pl::parse_split("emb,0-1|2-4|5-6|7", 8).spec(), "emb,0-1|2-4|5-6|7,head");
  // docs/design.md section 5's example shape: a stage holding only the head is written `head`.
  EXPECT_EQ(pl::parse_split("0|1-2|3-4|5|6|7|8|9|10|11|12|13|14|15|16|head", 17, 16).spec(),
            "emb,0|1-2|3-4|5|6|7|8|9|10|11|12|13|14|15|16|head");
  // Spaces around items are allowed.
  EXPECT_EQ(pl::parse_split(" 0-1 | 2-4 | 5-6 | 7 ", 8, 4).spec(), "emb,0-1|2-4|5-6|7,head");
}

TEST(ParseSplit, ErrorsNameTheFirstBadStage) {
  // A gap: layer 5 is missing, stage 2 starts at 6.
  EXPECT_NE(split_error([] { pl::parse_split("emb,0-1|2-4|6|7,head", 8, 4); })
                .find("split stage 2"),
            std::string::npos);
  // A gap at the end: layer 7 is missing before the head joins stage 2.
  EXPECT_NE(split_error([] { pl::parse_split("emb,0-1|2-4|5-6", 8); }).find("split stage 2"),
            std::string::npos);
  // An overlap: layer 4 on stages 1 and 2.
  EXPECT_NE(split_error([] { pl::parse_split("emb,0-1|2-4|4-6|7,head", 8, 4); })
                .find("split stage 2"),
            std::string::npos);
  // A descending range.
  EXPECT_NE(split_error([] { pl::parse_split("emb,0-1|2-4|6-5|7,head", 8, 4); })
                .find("split stage 2"),
            std::string::npos);
  // Garbage text.
  for (const char* spec : {"emb,0-1|2-4|x|7,head", "emb,0-1|2-4|5-|7,head",
                           "emb,0-1|2-4|-6|7,head", "emb,0-1|2-4|5-6-7|head",
                           "emb,0-1|2-4|5,,6|7,head"}) {
    EXPECT_NE(split_error([&] { pl::parse_split(spec, 8); }).find("split stage 2"),
              std::string::npos)
        << spec;
  }
  // An empty stage.
  EXPECT_NE(split_error([] { pl::parse_split("emb,0-1|2-4||5-7,head", 8); }).find("split stage 2"),
            std::string::npos);
  // A layer that does not exist (stage 2 reaches layer 9 of an 8-layer model).
  EXPECT_NE(split_error([] { pl::parse_split("emb,0-1|2-4|5-9", 8); }).find("split stage 2"),
            std::string::npos);
  // Errors name the first bad stage, not a later one: stages 1 and 2 are both bad here.
  const auto msg = split_error([] { pl::parse_split("emb,0-1|3-4|4-6|7,head", 8, 4); });
  EXPECT_NE(msg.find("split stage 1"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("split stage 2"), std::string::npos) << msg;
}

TEST(ParseSplit, WrongStageCount) {
  // 4 stages given, pp x vp = 3 (or 5): SplitError stating both counts.
  const auto m3 = split_error([] { pl::parse_split("emb,0-1|2-4|5-6|7,head", 8, 3); });
  EXPECT_NE(m3.find('4'), std::string::npos) << m3;
  EXPECT_NE(m3.find('3'), std::string::npos) << m3;
  const auto m5 = split_error([] { pl::parse_split("emb,0-1|2-4|5-6|7,head", 8, 5); });
  EXPECT_NE(m5.find('5'), std::string::npos) << m5;
  // num_stages 0 skips the check.
  EXPECT_EQ(pl::parse_split("emb,0-1|2-4|5-6|7,head", 8, 0).num_stages(), 4);
}

TEST(ParseSplit, ErrorTypeIsSplitErrorAnInvalidArgument) {
  static_assert(std::is_base_of_v<std::invalid_argument, pl::SplitError>);
  EXPECT_THROW(pl::parse_split("emb,0-1|2-4|6|7,head", 8, 4), pl::SplitError);
  EXPECT_THROW(pl::parse_split("", 8), pl::SplitError);
  EXPECT_THROW(pl::Split(8, {}), pl::SplitError);
}

// Garbage text must give a SplitError naming the stage, whatever the garbage is: a number too
// large for an int is garbage too (std::stoi would throw std::out_of_range).
TEST(ParseSplit, HugeNumberIsASplitError) {
  EXPECT_NE(split_error([] { pl::parse_split("emb,0-1|2-4|99999999999|7,head", 8); })
                .find("split stage 2"),
            std::string::npos);
}

// A layer number N names layer N (0..L-1, split.h); writing "8" in an 8-layer model names a
// layer that does not exist and must not silently mean the head (unit 8).
TEST(ParseSplit, LayerNumberEqualToLayerCountIsRefused) {
  EXPECT_NE(split_error([] { pl::parse_split("emb,0-3|4-8", 8); }).find("split stage 1"),
            std::string::npos);
  EXPECT_NE(split_error([] { pl::parse_split("emb,0-7|8", 8); }).find("split stage 1"),
            std::string::npos);
}

// ------------------------------------------------------------------------------------------
// 2. docs/design.md section 9: volumes, 93 layers, blocks of 12 (8 entries), default split.
// ------------------------------------------------------------------------------------------

TEST(RoutingVolume, Section9Figures) {
  struct Row {
    int pp, vp;
    int64_t option1, naive, cached, cached_peak, naive_peak;
  };
  // "option1 / naive / cached / cached peak / naive peak".
  const std::vector<Row> rows{
      {8, 1, 28, 28, 28, 7, 7},  {4, 2, 18, 28, 18, 3, 7},   {2, 4, 7, 28, 7, 1, 7},
      {8, 4, 52, 136, 52, 2, 8}, {4, 8, 24, 136, 24, 1, 8}, {16, 2, 96, 136, 96, 4, 8},
  };
  for (const auto& r : rows) {
    const auto t = pl::make_routing_tables(93, 12, pl::default_split(93, r.pp * r.vp), r.pp);
    const std::string cell = "pp" + std::to_string(r.pp) + "xvp" + std::to_string(r.vp);
    EXPECT_EQ(t.n_blocks(), 8) << cell;
    EXPECT_EQ(t.pp, r.pp) << cell;
    EXPECT_EQ(t.vp, r.vp) << cell;
    EXPECT_EQ(t.volume.option1, r.option1) << cell;
    EXPECT_EQ(t.volume.naive, r.naive) << cell;
    EXPECT_EQ(t.volume.cached, r.cached) << cell;
    EXPECT_EQ(t.volume.cached_peak, r.cached_peak) << cell;
    EXPECT_EQ(t.volume.naive_peak, r.naive_peak) << cell;
    EXPECT_EQ(t.volume.cached, t.volume.option1) << cell;  // section 5: cached == option 1
  }
}

TEST(Routing, EntryBytesAndArgumentChecks) {
  EXPECT_EQ(pl::entry_bytes(2, 4096, 7168, 2), int64_t{2} * 4096 * 7168 * 2);
  EXPECT_THROW(pl::make_routing_tables(8, 4, pl::default_split(8, 4), 3), std::invalid_argument);
  EXPECT_THROW(pl::make_routing_tables(9, 4, pl::default_split(8, 4), 2), std::invalid_argument);
  EXPECT_THROW(pl::make_routing_tables(8, 0, pl::default_split(8, 4), 2), std::invalid_argument);
  EXPECT_THROW(pl::make_routing_tables(8, 4, pl::default_split(8, 4), 0), std::invalid_argument);
}

// ------------------------------------------------------------------------------------------
// 3. Seed: 2 blocks x 4 layers, pp2 x vp2 (stage s on rank s % 2).
// ------------------------------------------------------------------------------------------

TEST(Routing2x4, SeedTables) {
  const auto t = pl::make_routing_tables(8, 4, pl::default_split(8, 4), 2);
  ASSERT_EQ(t.stages.size(), 4u);
  EXPECT_EQ(t.n_blocks(), 2);  // "block 2's result ... never enters the stack"
  EXPECT_EQ(t.vp, 2);
  // "Stack entries sent per micro-batch in forward: 5 with the cache off, 2 with it on."
  EXPECT_EQ(t.volume.naive, 5);
  EXPECT_EQ(t.volume.cached, 2);

  const std::vector<int> rank{0, 1, 0, 1};
  // Forward table: "Block AttnRes stored stack" (commits), "PP Comm, fwd (no cache)",
  // "PP Comm, fwd (cache)", "already cached".
  const std::vector<Blocks> commits{{0}, {1}, {}, {}};
  const std::vector<Blocks> recv_naive{{}, {0}, {0, 1}, {0, 1}};
  const std::vector<Blocks> recv_cached{{}, {0}, {1}, {}};
  const std::vector<Blocks> held{{}, {}, {0}, {0, 1}};
  // Sequence diagram: s0 puts e; s1 puts e (received) and x4 (committed); s2 puts x4
  // (received); s3 puts nothing. s2 reads e from the cache, s3 reads e and x4.
  const std::vector<Blocks> stores{{0}, {0, 1}, {1}, {}};
  // Backward table: "deposits into the rank cache"; gradients of send[s] arrive from s+1:
  // s2 <- s3 [de, dx4] / no op; s1 <- s2 [de, dx4] / [dx4]; s0 <- s1 [de] / [de].
  const std::vector<Blocks> deposits{{}, {}, {0}, {0, 1}};
  const std::vector<Blocks> send_naive{{0}, {0, 1}, {0, 1}, {}};
  const std::vector<Blocks> send_cached{{0}, {1}, {}, {}};
  // "collects from the rank cache": s1 "s3 stored: [de, dx4]", s0 "s2 stored: [de]".
  const std::vector<Collects> collects{collects_from({{2, {0}}}), collects_from({{3, {0, 1}}}),
                                       {}, {}};
  for (int s = 0; s < 4; ++s) {
    const auto& r = t.stages[s];
    SCOPED_TRACE("stage " + std::to_string(s));
    EXPECT_EQ(r.stage, s);
    EXPECT_EQ(r.rank, rank[s]);
    EXPECT_EQ(r.commits, commits[s]);
    EXPECT_EQ(r.recv_naive, recv_naive[s]);
    EXPECT_EQ(r.recv_cached, recv_cached[s]);
    EXPECT_EQ(r.held_at_entry, held[s]);
    EXPECT_EQ(r.entry, recv_naive[s]);  // the whole stack arrives with the cache off
    EXPECT_EQ(r.stores, stores[s]);
    EXPECT_EQ(r.deposits, deposits[s]);
    EXPECT_EQ(r.send_naive, send_naive[s]);
    EXPECT_EQ(r.send_cached, send_cached[s]);
    EXPECT_EQ(collects_of(r), collects[s]);
  }
  EXPECT_EQ(t.stages[2].reads, (Blocks{0, 1}));
  EXPECT_EQ(t.stages[3].reads, (Blocks{0, 1}));
  EXPECT_EQ(t.stages[1].deposits_expected(0), 1);
  EXPECT_EQ(t.stages[1].deposits_expected(1), 1);
  EXPECT_EQ(t.stages[0].deposits_expected(0), 1);
  EXPECT_EQ(t.stages[0].deposits_expected(1), 0);
  EXPECT_EQ(t.stages[2].deposits_expected(0), 0);
}

// ------------------------------------------------------------------------------------------
// 4. Seed: 4 blocks x 4 layers, pp4 x vp4 (16 stages, stage s on rank s % 4).
// ------------------------------------------------------------------------------------------

TEST(Routing4x4, SeedForwardTable) {
  const auto t = pl::make_routing_tables(16, 4, pl::default_split(16, 16), 4);
  ASSERT_EQ(t.stages.size(), 16u);
  EXPECT_EQ(t.n_blocks(), 4);
  EXPECT_EQ(t.vp, 4);
  // "Stack entries sent per micro-batch in forward: 39 with the cache off, 12 with it on."
  EXPECT_EQ(t.volume.naive, 39);
  EXPECT_EQ(t.volume.cached, 12);

  struct Row {
    std::vector<int> units;
    Blocks commits, recv_naive, recv_cached, held;
  };
  // Columns: layers, Block AttnRes stored stack, PP Comm fwd (no cache), PP Comm fwd (cache),
  // already cached. "-" and "[] (empty payload)" are empty lists.
  const std::vector<Row> rows{
      {{E, 0}, {0}, {}, {}, {}},                      // s0  emb, 0   e
      {{1, 2}, {}, {0}, {0}, {}},                     // s1  1-2
      {{3}, {}, {0}, {0}, {}},                        // s2  3
      {{4}, {1}, {0}, {0}, {}},                       // s3  4       x4
      {{5}, {}, {0, 1}, {1}, {0}},                    // s4
      {{6}, {}, {0, 1}, {1}, {0}},                    // s5
      {{7}, {}, {0, 1}, {1}, {0}},                    // s6
      {{8}, {2}, {0, 1}, {}, {0, 1}},                 // s7  8       x8
      {{9}, {}, {0, 1, 2}, {2}, {0, 1}},              // s8
      {{10}, {}, {0, 1, 2}, {2}, {0, 1}},             // s9
      {{11}, {}, {0, 1, 2}, {2}, {0, 1}},             // s10
      {{12}, {3}, {0, 1, 2}, {}, {0, 1, 2}},          // s11 12      x12
      {{13}, {}, {0, 1, 2, 3}, {3}, {0, 1, 2}},       // s12
      {{14}, {}, {0, 1, 2, 3}, {3}, {0, 1, 2}},       // s13
      {{15}, {}, {0, 1, 2, 3}, {3}, {0, 1, 2}},       // s14
      {{16}, {}, {0, 1, 2, 3}, {}, {0, 1, 2, 3}},     // s15 head
  };
  for (int s = 0; s < 16; ++s) {
    const auto& r = t.stages[s];
    SCOPED_TRACE("stage " + std::to_string(s));
    EXPECT_EQ(r.rank, s % 4);
    EXPECT_EQ(t.split.units(s), rows[s].units);
    EXPECT_EQ(r.commits, rows[s].commits);
    EXPECT_EQ(r.recv_naive, rows[s].recv_naive);
    EXPECT_EQ(r.recv_cached, rows[s].recv_cached);
    EXPECT_EQ(r.held_at_entry, rows[s].held);
    EXPECT_EQ(r.entry, rows[s].recv_naive);
  }
}

TEST(Routing4x4, SeedBackwardTable) {
  const auto t = pl::make_routing_tables(16, 4, pl::default_split(16, 16), 4);
  ASSERT_EQ(t.stages.size(), 16u);
  struct Row {
    Blocks recv_naive, recv_cached, deposits;  // bwd recv = the gradients of send[s]
    Collects collects;
  };
  // Seed backward table, rows s15 .. s0, stored here in stage order. "sN stored: [...]" in the
  // collects column is a deposit made by stage N.
  const std::vector<Row> rows{
      /* s0  */ {{0}, {0}, {}, collects_from({{4, {0}}, {8, {0}}, {12, {0}}})},
      /* s1  */ {{0}, {0}, {}, collects_from({{5, {0}}, {9, {0}}, {13, {0}}})},
      /* s2  */ {{0}, {0}, {}, collects_from({{6, {0}}, {10, {0}}, {14, {0}}})},
      /* s3  */ {{0, 1}, {1}, {}, collects_from({{7, {0, 1}}, {11, {0, 1}}, {15, {0, 1}}})},
      /* s4  */ {{0, 1}, {1}, {0}, collects_from({{8, {1}}, {12, {1}}})},
      /* s5  */ {{0, 1}, {1}, {0}, collects_from({{9, {1}}, {13, {1}}})},
      /* s6  */ {{0, 1}, {}, {0}, collects_from({{10, {1}}, {14, {1}}})},
      /* s7  */ {{0, 1, 2}, {2}, {0, 1}, collects_from({{11, {2}}, {15, {2}}})},
      /* s8  */ {{0, 1, 2}, {2}, {0, 1}, collects_from({{12, {2}}})},
      /* s9  */ {{0, 1, 2}, {2}, {0, 1}, collects_from({{13, {2}}})},
      /* s10 */ {{0, 1, 2}, {}, {0, 1}, collects_from({{14, {2}}})},
      /* s11 */ {{0, 1, 2, 3}, {3}, {0, 1, 2}, collects_from({{15, {3}}})},
      /* s12 */ {{0, 1, 2, 3}, {3}, {0, 1, 2}, {}},
      /* s13 */ {{0, 1, 2, 3}, {3}, {0, 1, 2}, {}},
      /* s14 */ {{0, 1, 2, 3}, {}, {0, 1, 2}, {}},
      /* s15 */ {{}, {}, {0, 1, 2, 3}, {}},
  };
  for (int s = 0; s < 16; ++s) {
    const auto& r = t.stages[s];
    SCOPED_TRACE("stage " + std::to_string(s));
    EXPECT_EQ(r.send_naive, rows[s].recv_naive);
    EXPECT_EQ(r.send_cached, rows[s].recv_cached);
    EXPECT_EQ(r.deposits, rows[s].deposits);
    EXPECT_EQ(collects_of(r), rows[s].collects);
  }
  // Per-block deposit counts the owners check: s3 collects e and x4 three times each, s7 x8
  // twice, s11 x12 once, s0-s2 e three times, s4-s6 x4 twice, s8-s10 x8 once.
  EXPECT_EQ(t.stages[3].deposits_expected(0), 3);
  EXPECT_EQ(t.stages[3].deposits_expected(1), 3);
  EXPECT_EQ(t.stages[7].deposits_expected(2), 2);
  EXPECT_EQ(t.stages[7].deposits_expected(0), 0);
  EXPECT_EQ(t.stages[11].deposits_expected(3), 1);
  for (int s : {0, 1, 2}) EXPECT_EQ(t.stages[s].deposits_expected(0), 3) << s;
  for (int s : {4, 5, 6}) EXPECT_EQ(t.stages[s].deposits_expected(1), 2) << s;
  for (int s : {8, 9, 10}) EXPECT_EQ(t.stages[s].deposits_expected(2), 1) << s;
  for (int s = 12; s < 16; ++s)
    for (int b = 0; b < 4; ++b) EXPECT_EQ(t.stages[s].deposits_expected(b), 0) << s << " " << b;
}

// ------------------------------------------------------------------------------------------
// 5. Structure over many shapes, against closed forms for the loop map. With prod(b) the
// stage committing block b (the one holding layer b * lpb) and stage s on rank s % pp:
//   entry[s] = {b : prod(b) < s}; held_at_entry[s] = {b : prod(b) <= s - pp} (an earlier stage
//   of the rank ran after b's commit); deposits[s] = entry & held = {b : prod(b) <= s - pp};
//   send_cached[s] = {b : s + 1 - pp < prod(b) <= s}; a deposit of b by s is collected by
//   owner = the first stage o = s (mod pp) with o >= prod(b) (the one that stored b);
//   cached volume = sum_b min(pp - 1, S - 1 - prod(b)) = option 1.
// ------------------------------------------------------------------------------------------

TEST(RoutingStructure, DepositsCollectedExactlyOnceOnTheSameRank) {
  int shapes = 0;
  for (int pp : {1, 2, 4})
    for (int vp : {1, 2, 4})
      for (int L : {8, 16, 17, 93})
        for (int lpb : {4, 12}) {
          const int S = pp * vp;
          if (S > L + 2) continue;  // default_split cannot give every stage a unit
          ++shapes;
          const auto split = pl::default_split(L, S);
          const auto t = pl::make_routing_tables(L, lpb, split, pp);
          const std::string cell = "L" + std::to_string(L) + " lpb" + std::to_string(lpb) +
                                   " pp" + std::to_string(pp) + " vp" + std::to_string(vp);
          SCOPED_TRACE(cell);
          const int B = (L - 1) / lpb + 1;
          ASSERT_EQ(t.n_blocks(), B);
          ASSERT_EQ(static_cast<int>(t.stages.size()), S);
          std::vector<int> prod(B);
          for (int b = 0; b < B; ++b) prod[b] = split.stage_of_unit(b * lpb);

          // Every deposit, (block, reader) -> the collecting stage.
          std::map<std::pair<int, int>, int> collected_by;
          int n_collects = 0;
          for (int o = 0; o < S; ++o)
            for (const auto& d : t.stages[o].collects) {
              ++n_collects;
              const bool fresh =
                  collected_by.emplace(std::make_pair(d.block, d.from_stage), o).second;
              EXPECT_TRUE(fresh) << "block " << d.block << " from " << d.from_stage
                                 << " collected twice";
            }
          int n_deposits = 0;
          int64_t cached_closed_form = 0;
          for (int s = 0; s < S; ++s) {
            const auto& r = t.stages[s];
            Blocks entry, held, send_cached;
            for (int b = 0; b < B; ++b) {
              if (prod[b] < s) entry.push_back(b);
              if (prod[b] <= s - pp) held.push_back(b);
              if (s + 1 < S && s + 1 - pp < prod[b] && prod[b] <= s) send_cached.push_back(b);
            }
            EXPECT_EQ(r.rank, s % pp) << s;
            EXPECT_EQ(r.entry, entry) << s;
            EXPECT_EQ(r.held_at_entry, held) << s;
            EXPECT_EQ(r.deposits, held) << s;  // every stage with a nonempty entry reads it
            EXPECT_EQ(r.send_cached, send_cached) << s;
            for (int b : r.deposits) {
              ++n_deposits;
              int owner = s % pp;
              while (owner < prod[b]) owner += pp;
              const auto it = collected_by.find({b, s});
              ASSERT_NE(it, collected_by.end()) << "block " << b << " from " << s;
              EXPECT_EQ(it->second, owner) << "block " << b << " from " << s;
              EXPECT_EQ(it->second % pp, s % pp);
              EXPECT_LT(it->second, s);
              const auto& st = t.stages[it->second].stores;
              EXPECT_TRUE(std::binary_search(st.begin(), st.end(), b));
            }
          }
          EXPECT_EQ(n_collects, n_deposits);
          // deposits_expected(b) at each owner = the deposits of b that go to it.
          for (int o = 0; o < S; ++o)
            for (int b = 0; b < B; ++b) {
              int expected = 0;
              for (int s = o + pp; s < S; s += pp) {
                int owner = s % pp;
                while (owner < prod[b]) owner += pp;
                if (prod[b] <= s - pp && owner == o) ++expected;
              }
              EXPECT_EQ(t.stages[o].deposits_expected(b), expected) << o << " " << b;
            }
          for (int b = 0; b < B; ++b) cached_closed_form += std::min(pp - 1, S - 1 - prod[b]);
          EXPECT_EQ(t.volume.cached, cached_closed_form);
          EXPECT_EQ(t.volume.cached, t.volume.option1);
          if (pp == 1) {
            EXPECT_EQ(t.volume.cached, 0);
          }
          if (vp == 1) {
            EXPECT_EQ(t.volume.cached, t.volume.naive);
          }
        }
  EXPECT_GT(shapes, 60);
}

// ------------------------------------------------------------------------------------------
// 6. check_loop_map
// ------------------------------------------------------------------------------------------

TEST(CheckLoopMap, LoopPassesVShapeIsRefused) {
  EXPECT_NO_THROW(pl::check_loop_map({0, 1, 0, 1}, 2, "Interleaved1F1B"));
  EXPECT_NO_THROW(pl::check_loop_map({0, 1, 2, 3, 0, 1, 2, 3}, 4, "Interleaved1F1B"));
  EXPECT_NO_THROW(pl::check_loop_map({0, 0, 0}, 1, "1F1B"));
  // V shape, pp2 vp2: stages 0, 1, 2, 3 on ranks 0, 1, 1, 0; stage 2 is the first off the loop.
  try {
    pl::check_loop_map({0, 1, 1, 0}, 2, "ZBVZeroBubble");
    FAIL() << "a V-shaped map passed";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ZBVZeroBubble"), std::string::npos) << msg;
    EXPECT_NE(msg.find("stage 2"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("stage 3"), std::string::npos) << msg;
  }
  EXPECT_THROW(pl::check_loop_map({0, 1, 2, 3, 3, 2, 1, 0}, 4, "V"), std::invalid_argument);
}

// ------------------------------------------------------------------------------------------
// 7. format_tables, the 2 x 4 example.
// ------------------------------------------------------------------------------------------

TEST(FormatTables, MentionsEveryStageAndTheVolume) {
  const auto t = pl::make_routing_tables(8, 4, pl::default_split(8, 4), 2);
  const std::string text = pl::format_tables(t);
  // Stage ids as the seed prints them: "s2 (r0, v1)".
  for (const char* id : {"s0 (r0, v0)", "s1 (r1, v0)", "s2 (r0, v1)", "s3 (r1, v1)"}) {
    const auto first = text.find(id);
    ASSERT_NE(first, std::string::npos) << id << "\n" << text;
    EXPECT_NE(text.find(id, first + 1), std::string::npos)
        << id << " should appear in the forward and the backward table\n"
        << text;
  }
  EXPECT_NE(text.find("emb,0-1|2-4|5-6|7,head"), std::string::npos) << text;
  // Volume (hand-derived): option 1 = block 0 to rank 1 + block 1 to rank 0 = 2; naive 5,
  // cached 2 (seed); largest hop naive s1 -> s2 [e, x4] = 2, cached 1.
  EXPECT_NE(text.find("option 1 2, naive 5, cached 2; peak per hop: naive 2, cached 1"),
            std::string::npos)
      << text;
  EXPECT_EQ(pl::blocks_text({0, 1}, "b"), "[b0, b1]");
  EXPECT_EQ(pl::blocks_text({}), "[]");
}
