#include "kiwi/solve/hybrid/uniform_plans.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

namespace kiwi::solve {
namespace {

TEST(EvenPartition, SpreadsTheRemainderOverEarlyStages) {
  EXPECT_EQ(EvenPartition(5, 2), (std::vector<int>{3, 2}));
  EXPECT_EQ(EvenPartition(8, 4), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(EvenPartition(7, 3), (std::vector<int>{3, 2, 2}));
}

TEST(UniformLayerPlans, CoversEveryFactorizationOfEightDevices) {
  const auto plans = UniformLayerPlans({.num_layers = 4, .num_devices = 8, .global_batch = 8});
  std::set<std::string> names;
  for (const auto& p : plans) {
    names.insert(p.name);
    const auto& s = p.plan.layers.front();
    EXPECT_EQ(p.plan.pp_degree * s.tp * s.dp, 8) << p.name;
    EXPECT_EQ(p.plan.layers.size(), 4u);
    int covered = 0;
    for (int n : p.plan.pp_partition) covered += n;
    EXPECT_EQ(covered, 4);
    EXPECT_EQ(p.plan.global_batch % (s.dp * p.plan.micro_batches), 0) << p.name;
  }
  // pp in {1,2,4} (8 > 4 layers), tp | 8/pp; dp > 1 adds ZeRO-1, ZeRO-2 and SDP twins; each twice
  // for CKPT. pp=1: tp 1,2,4 (dp 8,4,2) x 4 + tp 8 = 13; pp=2: tp 1,2 x 4 + tp 4 = 9; pp=4: 4 + 1 = 5
  // -> 27; tp > 1 adds a sequence-parallel twin: pp=1: 4 + 4 + 1, pp=2: 4 + 1, pp=4: 1 -> 15; x3 for
  // no recomputation, selective recomputation and CKPT = 126.
  EXPECT_EQ(plans.size(), 126u);
  EXPECT_EQ(names.size(), plans.size());
  EXPECT_TRUE(names.count("DP8"));
  EXPECT_TRUE(names.count("SDP8+CKPT"));
  EXPECT_TRUE(names.count("TP2xZeRO1-DP4"));
  EXPECT_TRUE(names.count("PP2xZeRO2-DP4+CKPT"));
  EXPECT_TRUE(names.count("TP8"));
  EXPECT_TRUE(names.count("PP2xTP2xDP2"));
  EXPECT_TRUE(names.count("PP2xSP-TP2xDP2+CKPT"));
  EXPECT_TRUE(names.count("SP-TP8"));
  EXPECT_TRUE(names.count("SP-TP8+SEL"));
  EXPECT_TRUE(names.count("PP2xTP2xZeRO1-DP2+SEL"));
  EXPECT_FALSE(names.count("PP8"));
}

// A model whose every layer is a mixture of experts: each plan with dp > 1 and DP or ZeRO-1/2 gets an
// expert-parallel twin per ep dividing both dp and the experts; none without experts.
TEST(UniformLayerPlans, ExpertParallelTwinsForMixturesOfExperts) {
  const auto dense = UniformLayerPlans({.num_layers = 4, .num_devices = 8, .global_batch = 8});
  const auto moe = UniformLayerPlans({.num_layers = 4, .num_devices = 8, .global_batch = 8, .experts = 4});
  std::set<std::string> names;
  size_t twins = 0;
  for (const auto& p : moe) {
    names.insert(p.name);
    const plan::LayerStrategy& s = p.plan.layers.front();
    if (s.ep == 1) continue;
    ++twins;
    EXPECT_EQ(s.dp % s.ep, 0) << p.name;
    EXPECT_EQ(4 % s.ep, 0) << p.name;
    EXPECT_NE(s.zero, plan::Zero::kParameters) << p.name;
  }
  for (const auto& p : dense) EXPECT_EQ(p.plan.layers.front().ep, 1) << p.name;
  EXPECT_GT(twins, 0u);
  EXPECT_EQ(moe.size(), dense.size() + twins);
  EXPECT_EQ(names.size(), moe.size());
  EXPECT_TRUE(names.count("ZeRO1-DP8xEP4"));
  EXPECT_FALSE(names.count("ZeRO1-DP8xEP8"));  // 8 does not divide 4 experts
}

// A model whose attention a ring splits: where the batch does not divide over dp, the least CP degree
// that gives each replica whole samples splits them (one sample on 8 devices: every dp rank in one CP
// group); where it divides, no CP plan (its cp 1 twin does the same work without the ring).
TEST(UniformLayerPlans, ContextParallelPlansWhereTheBatchDoesNotDivideOverDp) {
  const auto one = UniformLayerPlans({.num_layers = 4, .num_devices = 8, .global_batch = 1, .context_sequence = 64});
  std::set<std::string> names;
  for (const auto& p : one) {
    names.insert(p.name);
    const plan::LayerStrategy& s = p.plan.layers.front();
    EXPECT_EQ(s.cp, s.dp) << p.name;  // one replica
    EXPECT_TRUE(s.tp == 1 || s.cp == 1 || s.SequenceParallel()) << p.name;
    EXPECT_EQ(p.plan.micro_batches, 1) << p.name;
  }
  EXPECT_TRUE(names.count("DP8xCP8"));
  EXPECT_TRUE(names.count("SP-TP2xSDP4xCP4"));
  EXPECT_TRUE(names.count("PP2xSP-TP4"));
  EXPECT_FALSE(names.count("TP2xSDP4xCP4"));  // CP under TP only with SP
  const auto without = UniformLayerPlans({.num_layers = 4, .num_devices = 8, .global_batch = 1});
  for (const auto& p : without) EXPECT_EQ(p.plan.layers.front().dp, 1) << p.name;
  EXPECT_LT(without.size(), one.size());
  for (const auto& p : UniformLayerPlans({.num_layers = 4, .num_devices = 8, .global_batch = 8, .context_sequence = 64}))
    EXPECT_EQ(p.plan.layers.front().cp, 1) << p.name;
  // 2 samples on PP2 x DP4: CP2 gives its 2 replicas one sample each, in one micro-batch.
  const auto two = UniformLayerPlans({.num_layers = 4, .num_devices = 8, .global_batch = 2, .context_sequence = 64});
  bool found = false;
  for (const auto& p : two) {
    if (p.name != "PP2xDP4xCP2") continue;
    found = true;
    EXPECT_EQ(p.plan.micro_batches, 1);
  }
  EXPECT_TRUE(found);
}

TEST(UniformLayerPlans, SelectiveRecomputationOnlyWhenAsked) {
  const auto with = UniformLayerPlans({.num_layers = 2, .num_devices = 2, .global_batch = 2});
  const auto without = UniformLayerPlans({.num_layers = 2, .num_devices = 2, .global_batch = 2, .allow_selective_recompute = false});
  EXPECT_EQ(with.size(), without.size() * 3 / 2);  // one more of three recomputation choices per strategy
  for (const auto& p : without) EXPECT_FALSE(p.plan.layers.front().selective_recompute) << p.name;
}

// Each recompute set is one more recomputation choice per strategy without EP (with none, SEL, CKPT).
TEST(UniformLayerPlans, RecomputeSetsBesideTheOtherChoices) {
  const auto without = UniformLayerPlans({.num_layers = 2, .num_devices = 2, .global_batch = 2});
  const auto with = UniformLayerPlans({.num_layers = 2, .num_devices = 2, .global_batch = 2,
                                       .recompute_sets = {{"mlp.act"}, {"mlp.act", "attn.norm"}}});
  EXPECT_EQ(with.size(), without.size() * 5 / 3);
  int sets = 0;
  for (const auto& p : with) {
    const plan::LayerStrategy& s = p.plan.layers.front();
    if (s.recompute.empty()) continue;
    ++sets;
    EXPECT_FALSE(s.checkpoint || s.selective_recompute) << p.name;
    EXPECT_NE(p.name.find("+RC[mlp.act"), std::string::npos) << p.name;
  }
  EXPECT_EQ(sets, static_cast<int>(without.size() * 2 / 3));
}

TEST(UniformLayerPlans, SkipsBatchesThatDoNotSplitOverReplicas) {
  const auto plans = UniformLayerPlans({.num_layers = 2, .num_devices = 4, .global_batch = 2,
                                        .allow_sdp = false, .allow_zero12 = false, .allow_sequence_parallel = false,
                                        .allow_checkpoint = false, .allow_selective_recompute = false});
  for (const auto& p : plans) EXPECT_LE(p.plan.layers.front().dp, 2) << p.name;
  // tp 1 (dp 4) is skipped; tp 2, tp 4; pp=2: tp 1 (dp 2), tp 2.
  EXPECT_EQ(plans.size(), 4u);
}

// Megatron-LM's grid (solve/hybrid/alternatives.h): every micro-batch count dividing the batch over the
// replicas, and interleaving where the layers split into pp x v equal chunks and m is a multiple of pp.
TEST(UniformLayerPlans, SweepsMicroBatchesAndInterleaving) {
  const auto plans = UniformLayerPlans({.num_layers = 8, .num_devices = 4, .global_batch = 8, .allow_sdp = false,
                                        .allow_zero12 = false, .allow_sequence_parallel = false,
                                        .allow_checkpoint = false, .allow_selective_recompute = false,
                                        .sweep_micro_batches = true, .interleave = true, .compact = true});
  std::set<std::tuple<int, int, int, int>> seen;  // pp, dp, m, v
  for (const auto& p : plans) {
    const auto& s = p.plan.layers.front();
    const int m = p.plan.micro_batches, v = p.plan.virtual_stages;
    EXPECT_EQ(p.plan.global_batch % (int64_t{m} * s.dp), 0) << p.name;
    EXPECT_EQ(static_cast<int>(p.plan.pp_partition.size()), p.plan.pp_degree * v) << p.name;
    if (v > 1) {
      EXPECT_GT(p.plan.pp_degree, 1) << p.name;
      EXPECT_EQ(m % p.plan.pp_degree, 0) << p.name;
      EXPECT_EQ(8 % (p.plan.pp_degree * v), 0) << p.name;
    }
    seen.insert({p.plan.pp_degree, s.dp, m, v});
  }
  // pp 1, dp 4 (tp 1): 2 samples per replica, m in {1, 2}
  EXPECT_TRUE(seen.count({1, 4, 1, 1}));
  EXPECT_TRUE(seen.count({1, 4, 2, 1}));
  EXPECT_FALSE(seen.count({1, 4, 4, 1}));
  // pp 2, dp 2: 4 samples per replica, m in {1, 2, 4}; v in {2, 4} where m is even
  for (int m : {1, 2, 4}) EXPECT_TRUE(seen.count({2, 2, m, 1})) << m;
  EXPECT_TRUE(seen.count({2, 2, 2, 2}));
  EXPECT_TRUE(seen.count({2, 2, 4, 4}));
  EXPECT_FALSE(seen.count({2, 2, 1, 2}));
  EXPECT_FALSE(seen.count({2, 2, 2, 3}));  // 8 layers do not split into 6 chunks
  // pp 4, dp 1: m in {1, 2, 4, 8}, interleaving v = 2 with m 4 and 8
  EXPECT_TRUE(seen.count({4, 1, 8, 2}));
  EXPECT_FALSE(seen.count({4, 1, 2, 2}));
}

}  // namespace
}  // namespace kiwi::solve
