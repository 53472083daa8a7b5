// Galvatron-BMW §III-B decision trees: the paper's counts (44 strategies for one layer on 8 GPUs, 68
// without Takeaway #3), the construction rules, and the strategies the estimator tells apart.
#include "kiwi/solve/hybrid/strategy_space.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "kiwi/solve/hybrid/search.h"

namespace kiwi::solve::hybrid {
namespace {

TEST(DecisionTreeStrategies, FortyFourForOneLayerOnEightGpus) {
  EXPECT_EQ(DecisionTreeStrategies(8, StrategySpaceOptions{}).size(), 44u);
  // Per PP degree: 8 devices per group -> 11 trees, 4 -> 7, 2 -> 3, 1 -> 1; each with and without CKPT.
  EXPECT_EQ(DecisionTreeStrategies(8, 1, {}).size(), 22u);
  EXPECT_EQ(DecisionTreeStrategies(8, 2, {}).size(), 14u);
  EXPECT_EQ(DecisionTreeStrategies(8, 4, {}).size(), 6u);
  EXPECT_EQ(DecisionTreeStrategies(8, 8, {}).size(), 2u);
}

TEST(DecisionTreeStrategies, SixtyEightWithDpSdpMixes) {
  StrategySpaceOptions o;
  o.mix_dp_sdp = true;  // before Takeaway #3
  EXPECT_EQ(DecisionTreeStrategies(8, o).size(), 68u);
  // Without CKPT: Galvatron's 22 (Fig. 6b); DP+TP alone: 4 per layer on 8 GPUs with PP 1.
  StrategySpaceOptions no_ckpt;
  no_ckpt.allow_checkpoint = false;
  EXPECT_EQ(DecisionTreeStrategies(8, no_ckpt).size(), 22u);
}

TEST(DecisionTreeStrategies, FollowTheConstructionRules) {
  std::set<std::string> names;
  for (const TreeStrategy& s : DecisionTreeStrategies(8, StrategySpaceOptions{})) {
    int product = 1;
    std::set<Paradigm> used;
    for (const TreeLevel& l : s.levels) {
      EXPECT_TRUE(used.insert(l.paradigm).second) << s.Name() << ": a paradigm twice";
      EXPECT_GE(l.degree, 2);
      EXPECT_EQ(l.degree & (l.degree - 1), 0) << s.Name();
      product *= l.degree;
    }
    EXPECT_EQ(product * s.pp, 8) << s.Name();
    EXPECT_FALSE(used.count(Paradigm::kDp) && used.count(Paradigm::kSdp)) << s.Name() << ": Takeaway #3";
    names.insert(s.Name());
  }
  EXPECT_EQ(names.size(), 44u);
  EXPECT_TRUE(names.count("PP2-TP2-DP2+CKPT"));
  EXPECT_TRUE(names.count("DP2-TP4"));
  EXPECT_TRUE(names.count("SDP8"));
  EXPECT_TRUE(names.count("PP8"));
}

TEST(DecisionTreeStrategies, LevelOrderIsKeptAndMapsToTheEstimatorsView) {
  const auto trees = DecisionTreeStrategies(4, 1, {});
  auto find = [&](const std::string& name) {
    return *std::find_if(trees.begin(), trees.end(), [&](const TreeStrategy& t) { return t.Name() == name; });
  };
  const TreeStrategy inner = find("DP2-TP2"), outer = find("TP2-DP2");
  EXPECT_TRUE(inner.TpInnermost());
  EXPECT_FALSE(outer.TpInnermost());
  EXPECT_EQ(inner.ToLayerStrategy(), (plan::LayerStrategy{2, 2, plan::Zero::kNone, false}));
  EXPECT_EQ(outer.ToLayerStrategy(), inner.ToLayerStrategy());
  EXPECT_EQ(find("SDP4+CKPT").ToLayerStrategy(), (plan::LayerStrategy{1, 4, plan::Zero::kParameters, true}));
}

TEST(LayerStrategies, CollapseTheTreesOfOneGroup) {
  for (int devices : {1, 2, 4, 8, 16}) {
    std::set<std::tuple<int, int, plan::Zero, bool>> from_trees, listed;
    for (const TreeStrategy& t : DecisionTreeStrategies(devices, 1, {})) {
      const plan::LayerStrategy s = t.ToLayerStrategy();
      from_trees.insert({s.tp, s.dp, s.zero, s.checkpoint});
    }
    for (const plan::LayerStrategy& s : LayerStrategies(devices, {})) {
      EXPECT_EQ(s.tp * s.dp, devices);
      listed.insert({s.tp, s.dp, s.zero, s.checkpoint});
    }
    EXPECT_EQ(listed, from_trees) << devices << " devices";
  }
  EXPECT_EQ(LayerStrategies(8, {}).size(), 14u);  // tp 1,2,4: DP and SDP; tp 8: one; x CKPT
}

TEST(LayerStrategies, HonourTheParadigmSwitches) {
  StrategySpaceOptions dp_only;
  dp_only.allow_tp = dp_only.allow_sdp = dp_only.allow_checkpoint = false;
  ASSERT_EQ(LayerStrategies(8, dp_only).size(), 1u);
  EXPECT_EQ(LayerStrategies(8, dp_only).front(), (plan::LayerStrategy{1, 8, plan::Zero::kNone, false}));
  StrategySpaceOptions tp_only;
  tp_only.allow_dp = tp_only.allow_sdp = false;
  for (const plan::LayerStrategy& s : LayerStrategies(4, tp_only)) EXPECT_EQ(s.tp, 4);
  EXPECT_EQ(PowerOfTwoDivisors(12), (std::vector<int>{1, 2, 4}));
}

// kiwi's space adds ZeRO-1 and ZeRO-2 wherever DP has more than one rank: tp 1, 2, 4 on 8 devices
// get DP, ZeRO-1, ZeRO-2, SDP; tp 8 one strategy; each with and without CKPT.
TEST(LayerStrategies, ZeroStagesOnlyWhereAsked) {
  StrategySpaceOptions kiwi;
  kiwi.allow_zero12 = true;
  const std::vector<plan::LayerStrategy> all = LayerStrategies(8, kiwi);
  EXPECT_EQ(all.size(), 26u);
  std::set<std::tuple<int, plan::Zero>> seen;
  for (const plan::LayerStrategy& s : all) {
    seen.insert({s.tp, s.zero});
    if (s.dp == 1) {
      EXPECT_EQ(s.zero, plan::Zero::kNone);
    }
  }
  EXPECT_TRUE(seen.count({4, plan::Zero::kOptimizerStates}) && seen.count({1, plan::Zero::kGradients}));
  for (const plan::LayerStrategy& s : LayerStrategies(8, {})) {  // Galvatron-BMW's space: none
    EXPECT_TRUE(s.zero == plan::Zero::kNone || s.zero == plan::Zero::kParameters);
  }
  kiwi.allow_dp = kiwi.allow_sdp = false;
  for (const plan::LayerStrategy& s : LayerStrategies(8, kiwi)) {
    EXPECT_TRUE(s.dp == 1 || s.zero == plan::Zero::kOptimizerStates || s.zero == plan::Zero::kGradients);
  }
}

// Sequence parallelism doubles each TP strategy (tp 2, 4, 8 on 8 devices) and never comes without TP.
TEST(LayerStrategies, SequenceParallelOnlyWithTensorParallelism) {
  StrategySpaceOptions kiwi;
  kiwi.allow_zero12 = true;
  const size_t without = LayerStrategies(8, kiwi).size();
  kiwi.allow_sequence_parallel = true;
  const std::vector<plan::LayerStrategy> all = LayerStrategies(8, kiwi);
  // tp 2 and 4: 4 ZeRO choices each, tp 8: one; each with and without CKPT
  EXPECT_EQ(all.size(), without + 2 * (4 + 4 + 1));
  int sp = 0;
  for (const plan::LayerStrategy& s : all) {
    if (!s.sequence_parallel) continue;
    ++sp;
    EXPECT_GT(s.tp, 1);
    EXPECT_TRUE(s.SequenceParallel());
    plan::LayerStrategy off = s;
    off.sequence_parallel = false;
    EXPECT_EQ(std::count(all.begin(), all.end(), off), 1);  // its twin without SP is there too
  }
  EXPECT_EQ(sp, 18);
  for (const plan::LayerStrategy& s : LayerStrategies(8, {})) EXPECT_FALSE(s.sequence_parallel);  // BMW's space
}

// Galvatron's run-wide sequence_parallel: every TP strategy is its SP twin, in BMW's space as in kiwi's.
TEST(LayerStrategies, TpSequenceParallelMakesEveryTpStrategySp) {
  for (bool kiwi_space : {false, true}) {
    StrategySpaceOptions o;
    o.allow_zero12 = kiwi_space;
    o.allow_sequence_parallel = kiwi_space;
    std::vector<plan::LayerStrategy> expected;
    for (plan::LayerStrategy s : LayerStrategies(8, o)) {
      if (kiwi_space && s.tp > 1 && !s.sequence_parallel) continue;  // kiwi's space: only the SP twin stays
      if (s.tp > 1) s.sequence_parallel = true;                      // BMW's space: TP becomes SP-TP
      expected.push_back(s);
    }
    o.tp_sequence_parallel = true;
    const std::vector<plan::LayerStrategy> got = LayerStrategies(8, o);
    EXPECT_EQ(got, expected) << kiwi_space;
    for (const plan::LayerStrategy& s : got) EXPECT_EQ(s.sequence_parallel, s.tp > 1);
  }
}

// Selective recomputation is a third recomputation choice of every strategy, ordered between none and
// CKPT, never combined with CKPT; BMW's space leaves it out.
TEST(LayerStrategies, SelectiveRecomputationBetweenNoneAndCheckpointing) {
  StrategySpaceOptions kiwi = SpaceOf(Method::kKiwi, 8, 8).strategies;
  ASSERT_TRUE(kiwi.allow_selective_recompute);
  const std::vector<plan::LayerStrategy> all = LayerStrategies(8, kiwi);
  kiwi.allow_selective_recompute = false;
  const std::vector<plan::LayerStrategy> without = LayerStrategies(8, kiwi);
  ASSERT_EQ(all.size(), without.size() / 2 * 3);
  for (size_t i = 0; i < all.size(); i += 3) {
    EXPECT_FALSE(all[i].checkpoint || all[i].selective_recompute);
    EXPECT_TRUE(all[i + 1].SelectiveRecompute());
    EXPECT_TRUE(all[i + 2].checkpoint && !all[i + 2].selective_recompute);
    plan::LayerStrategy base = all[i + 1];
    base.selective_recompute = false;
    EXPECT_EQ(base, all[i]);
    EXPECT_EQ(plan::StrategyName(all[i + 1]), plan::StrategyName(all[i]) + "+SEL");
  }
  for (const plan::LayerStrategy& s : LayerStrategies(8, SpaceOf(Method::kBmw, 8, 8).strategies))
    EXPECT_FALSE(s.selective_recompute);
}

// Expert parallelism in kiwi's space for a model with experts: every power-of-two ep below dp that
// divides the experts, beside ep 1, with DP, ZeRO-1 or ZeRO-2 (never SDP); none without experts or
// outside kiwi's space.
TEST(LayerStrategies, ExpertParallelismWithinDpForModelsWithExperts) {
  StrategySpaceOptions kiwi = SpaceOf(Method::kKiwi, 8, 8).strategies;
  kiwi.allow_offload = false;  // counted apart (OffloadTwinsOfShardedOrSingleRankStrategies)
  const std::vector<plan::LayerStrategy> dense = LayerStrategies(8, kiwi);
  for (const plan::LayerStrategy& s : dense) EXPECT_EQ(s.ep, 1);
  kiwi.experts = 4;
  const std::vector<plan::LayerStrategy> moe = LayerStrategies(8, kiwi);
  size_t with_ep = 0;
  for (const plan::LayerStrategy& s : moe) {
    if (s.ep == 1) continue;
    ++with_ep;
    EXPECT_EQ(s.dp % s.ep, 0) << plan::StrategyName(s);
    EXPECT_EQ(4 % s.ep, 0) << plan::StrategyName(s);
    EXPECT_NE(s.zero, plan::Zero::kParameters) << plan::StrategyName(s);
    plan::LayerStrategy twin = s;
    twin.ep = 1;
    EXPECT_NE(std::find(dense.begin(), dense.end(), twin), dense.end()) << plan::StrategyName(s);
  }
  // dp 8: ep 2, 4 (8 does not divide 4 experts); dp 4: ep 2, 4; dp 2: ep 2; each with DP, ZeRO-1,
  // ZeRO-2 (x SP off/on where tp > 1) and none / selective / CKPT.
  EXPECT_EQ(with_ep, (2 * 3 + 2 * 3 * 2 + 1 * 3 * 2) * 3);
  EXPECT_EQ(moe.size(), dense.size() + with_ep);
  StrategySpaceOptions bmw = SpaceOf(Method::kBmw, 8, 8).strategies;
  bmw.experts = 4;
  for (const plan::LayerStrategy& s : LayerStrategies(8, bmw)) EXPECT_EQ(s.ep, 1);
}

// Context parallelism in kiwi's space for a model whose attention a ring splits: every power-of-two cp
// dividing dp and the sequence into 2 cp chunks, beside cp 1, under TP only with sequence parallelism,
// never beside EP; none without a sequence or outside kiwi's space.
TEST(LayerStrategies, ContextParallelismWithinDpForRingAttention) {
  StrategySpaceOptions kiwi = SpaceOf(Method::kKiwi, 8, 8).strategies;
  kiwi.allow_offload = false;  // counted apart (OffloadTwinsOfShardedOrSingleRankStrategies)
  kiwi.experts = 4;
  const std::vector<plan::LayerStrategy> without = LayerStrategies(8, kiwi);
  for (const plan::LayerStrategy& s : without) EXPECT_EQ(s.cp, 1);
  kiwi.context_sequence = 8;  // 2 x cp chunks: cp 2 or 4, not 8
  const std::vector<plan::LayerStrategy> with = LayerStrategies(8, kiwi);
  size_t with_cp = 0;
  for (const plan::LayerStrategy& s : with) {
    if (s.cp == 1) continue;
    ++with_cp;
    EXPECT_EQ(s.dp % s.cp, 0) << plan::StrategyName(s);
    EXPECT_LE(s.cp, 4) << plan::StrategyName(s);
    EXPECT_EQ(s.ep, 1) << plan::StrategyName(s);
    EXPECT_TRUE(s.tp == 1 || s.SequenceParallel()) << plan::StrategyName(s);
    plan::LayerStrategy twin = s;
    twin.cp = 1;
    EXPECT_NE(std::find(without.begin(), without.end(), twin), without.end()) << plan::StrategyName(s);
  }
  // dp 8 (tp 1): cp 2, 4 x 4 ZeRO stages; dp 4 (SP-TP2): cp 2, 4 x 4; dp 2 (SP-TP4): cp 2 x 4; each
  // none / selective / CKPT.
  EXPECT_EQ(with_cp, (2 * 4 + 2 * 4 + 1 * 4) * 3);
  EXPECT_EQ(with.size(), without.size() + with_cp);
  StrategySpaceOptions bmw = SpaceOf(Method::kBmw, 8, 8).strategies;
  bmw.context_sequence = 8;
  for (const plan::LayerStrategy& s : LayerStrategies(8, bmw)) EXPECT_EQ(s.cp, 1);
}

// ZeRO-Offload in kiwi's space where asked: a twin of every strategy with a ZeRO stage or one rank.
TEST(LayerStrategies, OffloadTwinsOfShardedOrSingleRankStrategies) {
  StrategySpaceOptions kiwi = SpaceOf(Method::kKiwi, 8, 8).strategies;
  kiwi.allow_offload = false;
  const std::vector<plan::LayerStrategy> without = LayerStrategies(8, kiwi);
  kiwi.allow_offload = true;
  size_t twins = 0;
  for (const plan::LayerStrategy& s : LayerStrategies(8, kiwi)) {
    if (!s.offload) continue;
    ++twins;
    EXPECT_TRUE(s.dp == 1 || s.ZeroStage() != plan::Zero::kNone) << plan::StrategyName(s);
    plan::LayerStrategy twin = s;
    twin.offload = false;
    EXPECT_NE(std::find(without.begin(), without.end(), twin), without.end()) << plan::StrategyName(s);
  }
  size_t eligible = 0;
  for (const plan::LayerStrategy& s : without) eligible += s.dp == 1 || s.ZeroStage() != plan::Zero::kNone;
  EXPECT_EQ(twins, eligible);
  for (const plan::LayerStrategy& s : LayerStrategies(8, SpaceOf(Method::kBmw, 8, 8).strategies)) EXPECT_FALSE(s.offload);
}

}  // namespace
}  // namespace kiwi::solve::hybrid
