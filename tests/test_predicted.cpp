// The predicted set without a ledger (compare/predicted.h): the --layout spec, parameter units
// from names, and the blocks read from a rank's store on the seed's shapes, worked by hand.
// Exact checks only.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "compare/predicted.h"

namespace parity::compare {
namespace {

TEST(Layout, ParsesEveryKeyAndTheSplitLastExact) {
  auto l = parse_layout("layers=17,block=4,pp=2,vp=4,split=emb,0|1-2|3-4|5-6|7-8|9-11|12-14|15-16,head");
  EXPECT_EQ(l.layers, 17);
  EXPECT_EQ(l.block, 4);
  EXPECT_EQ(l.pp, 2);
  EXPECT_EQ(l.vp, 4);
  EXPECT_EQ(l.split, "emb,0|1-2|3-4|5-6|7-8|9-11|12-14|15-16,head");
  EXPECT_EQ(parse_layout("vp=1,pp=4,block=12,layers=93").layers, 93);
}

TEST(Layout, RefusesBadSpecsNamingTheKey) {
  struct Bad {
    const char* spec;
    const char* says;
  };
  for (const Bad& b : {Bad{"layers=17,block=4,pp=2", "lacks vp="},
                       Bad{"layers=17,block=4,pp=2,vp=2,depth=3", "unknown key 'depth'"},
                       Bad{"layers=17,block=0,pp=2,vp=2", "block=0"},
                       Bad{"layers=x,block=4,pp=2,vp=2", "layers=x"},
                       Bad{"layers=17,layers=16,block=4,pp=2,vp=2", "'layers' is given twice"},
                       Bad{"layers", "key=value"},
                       Bad{"layers=17,block=4,pp=2,vp=2,split=", "split= is empty"}}) {
    try {
      parse_layout(b.spec);
      ADD_FAILURE() << b.spec << " was accepted";
    } catch (const LayoutError& e) {
      EXPECT_NE(std::string(e.what()).find(b.says), std::string::npos) << e.what();
    }
  }
}

TEST(UnitOfName, FollowsTorchtitansNamesExact) {
  EXPECT_EQ(unit_of_name("tok_embeddings.weight", 17), -1);
  EXPECT_EQ(unit_of_name("layers.0.attention_norm.weight", 17), 0);
  EXPECT_EQ(unit_of_name("layers.16.moe.router.gate.weight", 17), 16);
  EXPECT_EQ(unit_of_name("lm_head.weight", 17), 17);
  EXPECT_EQ(unit_of_name("norm.weight", 17), 17);
  EXPECT_EQ(unit_of_name("output_res_proj.weight", 17), 17);
  EXPECT_EQ(unit_of_name("layers.17.x", 17), 17);   // no such layer: not a layer's name
  EXPECT_EQ(unit_of_name("layers.x.y", 17), 17);
  EXPECT_EQ(unit_of_name("model.layers.3.w", 17), 17);  // other names: map them first
}

// pp2 x vp2 on 17 layers in blocks of 4, the default split of 19 units over 4 stages (5, 5,
// 5, 4): stage 0 = emb, 0-3 (rank 0); 1 = 4-8 (rank 1); 2 = 9-13 (rank 0); 3 = 14-16, head
// (rank 1). Blocks commit at layers 0, 4, 8, 12, 16: b0 at stage 0, b1 and b2 at stage 1, b3
// at stage 2, b4 at stage 3. Stage 2 reads every block before it; its rank holds b0 (stage 0's
// commit): b0 is deposited. Stage 3's rank holds b0 (received by stage 1), b1 and b2 (stage 1's
// commits): deposited. So blocks {0, 1, 2}: the parameters upstream of block 2 (units < 8:
// the embedding and layers 0-7) may differ; layer 8 on, and the head, may not.
TEST(Prediction, Pp2Vp2OnTheDebugmodelShapeByHandExact) {
  const auto p = predict(parse_layout("layers=17,block=4,pp=2,vp=2"));
  EXPECT_EQ(p.deposited, (std::set<int>{0, 1, 2}));
  EXPECT_TRUE(p.predicts("tok_embeddings.weight"));
  EXPECT_TRUE(p.predicts("layers.0.feed_forward.w13.weight"));
  EXPECT_TRUE(p.predicts("layers.7.attention.wq_a.weight"));
  EXPECT_FALSE(p.predicts("layers.8.delta_attention.A_log"));
  EXPECT_FALSE(p.predicts("layers.16.ffn_res_proj.weight"));
  EXPECT_FALSE(p.predicts("lm_head.weight"));
  EXPECT_FALSE(p.predicts("norm.weight"));
}

// Plain 1F1B (vp 1) has one stage per rank: nothing is read from a store, nothing may differ.
TEST(Prediction, OneStagePerRankPredictsNothingExact) {
  const auto p = predict(parse_layout("layers=17,block=4,pp=4,vp=1"));
  EXPECT_TRUE(p.deposited.empty());
  EXPECT_FALSE(p.predicts("tok_embeddings.weight"));
}

}  // namespace
}  // namespace parity::compare
