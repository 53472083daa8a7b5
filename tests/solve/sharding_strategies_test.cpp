// Sharding strategies per operator kind (solve/sharding/strategies.h), checked by hand.
#include "kiwi/solve/sharding/strategies.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "kiwi/cost/collectives.h"
#include "sharding_lowering_test_util.h"

namespace kiwi::solve::sharding {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Not;
using test_util::Costs;
using test_util::MakeNode;
using test_util::Mesh1d;
using test_util::Mesh2x4;

std::vector<Strategy> Enumerate(const ir::Graph& g, ir::NodeId v, const ir::DeviceMesh& mesh,
                                StrategyOptions options = {}) {
  return EnumerateStrategies(g, g.node(v), Costs(), mesh, options);
}

std::vector<std::string> Names(const std::vector<Strategy>& strategies) {
  std::vector<std::string> names;
  for (const Strategy& s : strategies) names.push_back(s.sharding.strategy);
  return names;
}

const Strategy& Named(const std::vector<Strategy>& strategies, const std::string& name) {
  for (const Strategy& s : strategies)
    if (s.sharding.strategy == name) return s;
  ADD_FAILURE() << "no strategy " << name;
  return strategies.front();
}

TEST(ShardingStrategies, MatmulOn1dMeshIsAlpasFamilyWithCosts) {
  const ir::Graph g = test_util::MatmulGraph(8, 16, 4);
  const ir::DeviceMesh mesh = Mesh1d(4);
  const std::vector<Strategy> s = Enumerate(g, 2, mesh);
  EXPECT_THAT(Names(s), ElementsAre("RR = RR x RR", "S0R = S0R x RR", "RS0 = RR x RS0",
                                    "RR = RS0 x S0R (all-reduce@0)", "S0R = RS0 x S0R (reduce-scatter@0)"));
  // Roofline by hand: 896 bytes (x 512 + w 256 + y 128) at 0.8 TB/s beats 1024 flops at 7.5 TFLOP/s.
  EXPECT_NEAR(s[0].compute_seconds, 1.12e-9, 1e-21);
  for (size_t k = 1; k < s.size(); ++k) EXPECT_NEAR(s[k].compute_seconds, 1.12e-9 / 4, 1e-21) << k;
  EXPECT_EQ(s[0].communication_seconds, 0.0);
  // Ring on 4 devices, 100 GB/s, 1 us: all-reduce 2*3*(1e-6 + 128/(4*100e9)); reduce-scatter half.
  EXPECT_NEAR(s[3].communication_seconds, 6 * (1e-6 + 3.2e-10), 1e-18);
  EXPECT_NEAR(s[4].communication_seconds, 3 * (1e-6 + 3.2e-10), 1e-18);
  EXPECT_EQ(s[0].output_bytes, 128);
  EXPECT_EQ(s[1].output_bytes, 32);
  EXPECT_EQ(s[3].output_bytes, 128);
  EXPECT_EQ(s[4].output_bytes, 32);
  EXPECT_EQ(s[3].sharding.reduce_axes, ir::AxisBit(0));
}

TEST(ShardingStrategies, MatmulOn2dMeshSplitsOverAxisPairs) {
  const ir::Graph g = test_util::MatmulGraph(8, 16, 4);
  const ir::DeviceMesh mesh = Mesh2x4();
  const std::vector<Strategy> s = Enumerate(g, 2, mesh);
  const std::vector<std::string> names = Names(s);
  // Each axis picks none, M, N or K (16); N = 4 cannot split over both axes (8 devices): 15. Plus
  // the reduce-scatter variants of the 6 K splits, onto M when it divides: one per non-empty subset
  // of the reduce axes (1 each, 3 when both axes split K): 9.
  EXPECT_EQ(s.size(), 24u);
  EXPECT_EQ(Enumerate(g, 2, mesh, {.require_divisible = true, .reduce_scatter = false}).size(), 15u);
  EXPECT_THAT(names, Contains("S0S1 = S0R x RS1"));
  EXPECT_THAT(names, Contains("S1S0 = S1R x RS0"));
  EXPECT_THAT(names, Contains("RR = RS0 x S0R (all-reduce@0)"));
  EXPECT_THAT(names, Contains("RR = RS01 x S01R (all-reduce@01)"));
  EXPECT_THAT(names, Contains("S0R = S0S1 x S1R (all-reduce@1)"));
  EXPECT_THAT(names, Contains("S01R = RS01 x S01R (reduce-scatter@01)"));
  EXPECT_THAT(names, Contains("S0S1 = RS0 x S0S1 (reduce-scatter@0)"));
  EXPECT_THAT(names, Not(Contains("RS0 = RS0 x S0R (reduce-scatter@0)")));  // M comes first
  EXPECT_THAT(names, Contains("S01R = S01R x RR"));
  EXPECT_THAT(names, Not(Contains("RS01 = RR x RS01")));
  const Strategy& ss = Named(s, "S0S1 = S0R x RS1");
  EXPECT_DOUBLE_EQ(ss.compute_seconds, Costs().ComputeTime(g.node(2), 1.0 / 8));
  EXPECT_EQ(ss.output_bytes, 4 * 1 * 4);
  // The slow outer axis: all-reduce over 2 devices at 12.5 GB/s, 5 us.
  EXPECT_NEAR(Named(s, "RR = RS0 x S0R (all-reduce@0)").communication_seconds, 2 * (5e-6 + 128 / (2 * 12.5e9)),
              1e-18);
  std::set<std::string> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), names.size());
}

TEST(ShardingStrategies, MatmulHonorsTransposes) {
  ir::Graph g("transposed");
  g.Add(MakeNode("a", ir::OpKind::kInput, "input", {16, 8}, {}));   // A^T: [K, M]
  g.Add(MakeNode("b", ir::OpKind::kParameter, "parameter", {4, 16}, {}));  // B^T: [N, K]
  ir::Node y = MakeNode("y", ir::OpKind::kMatmul, "matmul", {8, 4}, {0, 1});
  y.attrs.transpose_a = y.attrs.transpose_b = true;
  g.Add(y);
  const std::vector<std::string> names = Names(Enumerate(g, 2, Mesh1d(4), {.reduce_scatter = false}));
  EXPECT_THAT(names, ElementsAre("RR = RR x RR", "S0R = RS0 x RR", "RS0 = RR x S0R", "RR = S0R x RS0 (all-reduce@0)"));
}

TEST(ShardingStrategies, MatmulGradientsContractWhatTheirOutputLacks) {
  ir::Graph g("grads");
  g.Add(MakeNode("x", ir::OpKind::kInput, "input", {8, 16}, {}));      // A [M, K]
  g.Add(MakeNode("w", ir::OpKind::kParameter, "parameter", {16, 4}, {}));  // B [K, N]
  g.Add(MakeNode("dy", ir::OpKind::kInput, "input", {8, 4}, {}));      // dY [M, N]
  g.Add(MakeNode("dx", ir::OpKind::kMatmul, "matmul_grad_a", {8, 16}, {2, 1}));
  g.Add(MakeNode("dw", ir::OpKind::kMatmul, "matmul_grad_b", {16, 4}, {0, 2}));
  const StrategyOptions no_scatter{.reduce_scatter = false};
  // dX = dY W^T contracts N; dW = X^T dY contracts M (data parallel: the gradient all-reduce).
  EXPECT_THAT(Names(Enumerate(g, 3, Mesh1d(4), no_scatter)),
              ElementsAre("RR = RR x RR", "S0R = S0R x RR", "RR = RS0 x RS0 (all-reduce@0)", "RS0 = RR x S0R"));
  EXPECT_THAT(Names(Enumerate(g, 4, Mesh1d(4), no_scatter)),
              ElementsAre("RR = RR x RR", "RR = S0R x S0R (all-reduce@0)", "RS0 = RR x RS0", "S0R = RS0 x RR"));
  // ZeRO: the data-parallel gradient reduce-scattered onto either dim of dW.
  EXPECT_THAT(Names(Enumerate(g, 4, Mesh1d(4))), Contains("S0R = S0R x S0R (reduce-scatter@0)"));
}

TEST(ShardingStrategies, UnevenSplitsOnlyWhenAllowed) {
  const ir::Graph g = test_util::MatmulGraph(8, 16, 6);
  EXPECT_THAT(Names(Enumerate(g, 2, Mesh1d(4))), Not(Contains("RS0 = RR x RS0")));
  const std::vector<Strategy> uneven = Enumerate(g, 2, Mesh1d(4), {.require_divisible = false});
  EXPECT_EQ(Named(uneven, "RS0 = RR x RS0").output_bytes, 8 * 2 * 4);  // ceil(6 / 4) = 2 columns
}

TEST(ShardingStrategies, ElementwiseFollowsItsOperandAndBroadcasts) {
  ir::Graph g("bias");
  g.Add(MakeNode("x", ir::OpKind::kInput, "input", {8, 4}, {}));
  g.Add(MakeNode("b", ir::OpKind::kParameter, "parameter", {4}, {}));
  g.Add(MakeNode("y", ir::OpKind::kElementwise, "add", {8, 4}, {0, 1}));
  const std::vector<Strategy> s = Enumerate(g, 2, Mesh1d(4));
  EXPECT_THAT(Names(s), ElementsAre("RR = RR x R", "S0R = S0R x R", "RS0 = RS0 x S0"));
  for (const Strategy& st : s) {
    EXPECT_EQ(st.sharding.operands[0], st.sharding.output);
    EXPECT_EQ(st.sharding.reduce_axes, 0u);
  }
  EXPECT_DOUBLE_EQ(s[1].compute_seconds, Costs().ComputeTime(g.node(2), 0.25));
}

TEST(ShardingStrategies, SoftmaxNeverSplitsItsLastDim) {
  ir::Graph g("softmax");
  g.Add(MakeNode("x", ir::OpKind::kInput, "input", {4, 8, 16}, {}));
  g.Add(MakeNode("p", ir::OpKind::kSoftmax, "softmax", {4, 8, 16}, {0}));
  const std::vector<Strategy> s = Enumerate(g, 1, Mesh2x4());
  // Axes pick none, dim 0 or dim 1 (9); dim 0 (4) cannot take both axes (8 devices).
  EXPECT_EQ(s.size(), 8u);
  for (const Strategy& st : s) {
    EXPECT_EQ(st.sharding.output.AxesOf(2), 0u) << st.sharding.strategy;
    EXPECT_EQ(st.sharding.operands[0], st.sharding.output);
  }
  EXPECT_THAT(Names(s), Contains("S0S1R = S0S1R"));
}

TEST(ShardingStrategies, ReduceSplitsKeptDimsOrLeavesPartialSums) {
  ir::Graph g("reduce");
  g.Add(MakeNode("x", ir::OpKind::kInput, "input", {8, 16}, {}));
  ir::Node r = MakeNode("r", ir::OpKind::kReduce, "sum", {8}, {0});
  r.attrs.axes = {1};
  g.Add(r);
  EXPECT_THAT(Names(Enumerate(g, 1, Mesh1d(4))),
              ElementsAre("R = RR", "S0 = S0R", "R = RS0 (all-reduce@0)", "S0 = RS0 (reduce-scatter@0)"));
}

TEST(ShardingStrategies, NormParameterGradientsSumOverRows) {
  ir::Graph g("norm");
  g.Add(MakeNode("dy", ir::OpKind::kInput, "input", {8, 16}, {}));
  g.Add(MakeNode("x", ir::OpKind::kInput, "input", {8, 16}, {}));
  g.Add(MakeNode("gamma", ir::OpKind::kParameter, "parameter", {16}, {}));
  g.Add(MakeNode("ln", ir::OpKind::kLayerNorm, "layernorm", {8, 16}, {1, 2}));
  g.Add(MakeNode("dgamma", ir::OpKind::kLayerNorm, "layernorm_grad_gamma", {16}, {0, 1}));
  EXPECT_THAT(Names(Enumerate(g, 3, Mesh1d(4))), ElementsAre("RR = RR x R", "S0R = S0R x R"));
  EXPECT_THAT(Names(Enumerate(g, 4, Mesh1d(4))),
              ElementsAre("R = RR x RR", "R = S0R x S0R (all-reduce@0)", "S0 = S0R x S0R (reduce-scatter@0)"));
}

TEST(ShardingStrategies, EmbeddingSplitsTokensHiddenOrVocabulary) {
  ir::Graph g("embedding");
  g.Add(MakeNode("table", ir::OpKind::kParameter, "parameter", {32, 8}, {}));
  ir::Node ids = MakeNode("ids", ir::OpKind::kInput, "input", {4, 6}, {});
  ids.output.dtype = ir::DType::kI32;
  g.Add(ids);
  g.Add(MakeNode("e", ir::OpKind::kEmbedding, "embedding", {4, 6, 8}, {0, 1}));
  const std::vector<Strategy> s = Enumerate(g, 2, Mesh1d(2));
  // Tokens (2 dims), hidden, vocabulary (partial sums: Megatron's vocab-parallel embedding), and
  // the vocabulary split reduce-scattered onto the first output dim.
  EXPECT_THAT(Names(s), ElementsAre("RRR = RR x RR", "S0RR = RR x S0R", "RS0R = RR x RS0", "RRS0 = RS0 x RR",
                                    "RRR = S0R x RR (all-reduce@0)", "S0RR = S0R x RR (reduce-scatter@0)"));
}

TEST(ShardingStrategies, ConvSplitsBatchAndChannelsNeverSpace) {
  ir::Graph g("conv");
  g.Add(MakeNode("x", ir::OpKind::kInput, "input", {2, 4, 8, 8}, {}));
  g.Add(MakeNode("w", ir::OpKind::kParameter, "parameter", {6, 4, 3, 3}, {}));
  g.Add(MakeNode("y", ir::OpKind::kConv, "conv2d", {2, 6, 6, 6}, {0, 1}));
  const std::vector<std::string> names = Names(Enumerate(g, 2, Mesh1d(2), {.reduce_scatter = false}));
  EXPECT_THAT(names, ElementsAre("RRRR = RRRR x RRRR", "S0RRR = S0RRR x RRRR", "RRRR = RS0RR x RS0RR (all-reduce@0)",
                                 "RS0RR = RRRR x S0RRR"));
}

TEST(ShardingStrategies, ReshapeMapsHeadSplitsThroughContiguousBlocks) {
  ir::Graph g("heads");
  g.Add(MakeNode("x", ir::OpKind::kInput, "input", {2, 4, 8}, {}));
  g.Add(MakeNode("split", ir::OpKind::kReshape, "reshape", {2, 4, 2, 4}, {0}));
  // [B, s, h] -> [B, s, n, d]: h splits as n does.
  EXPECT_THAT(Names(Enumerate(g, 1, Mesh1d(2))),
              ElementsAre("RRRR = RRR", "S0RRR = S0RR", "RS0RR = RS0R", "RRS0R = RRS0"));
  // 4 devices: B = 2 and n = 2 are too small, h cannot take a split n does not divide.
  EXPECT_THAT(Names(Enumerate(g, 1, Mesh1d(4), {.require_divisible = false})),
              ElementsAre("RRRR = RRR", "RS0RR = RS0R"));
}

TEST(ShardingStrategies, TransposeMovesTheSplitWithItsDim) {
  ir::Graph g("transpose");
  g.Add(MakeNode("x", ir::OpKind::kInput, "input", {2, 4, 8}, {}));
  ir::Node t = MakeNode("t", ir::OpKind::kTranspose, "transpose", {2, 8, 4}, {0});
  t.attrs.axes = {0, 2, 1};
  g.Add(t);
  EXPECT_THAT(Names(Enumerate(g, 1, Mesh1d(2))), ElementsAre("RRR = RRR", "S0RR = S0RR", "RRS0 = RS0R", "RS0R = RRS0"));
}

TEST(ShardingStrategies, ParametersShardOverAxesAndDims) {
  const ir::Graph g = test_util::MatmulGraph(8, 16, 4);
  const std::vector<Strategy> s = Enumerate(g, 1, Mesh2x4());
  EXPECT_THAT(Names(s), ElementsAre("RR", "S1R", "RS1", "S0R", "S01R", "S0S1", "RS0", "S1S0"));
  EXPECT_EQ(s.back().output_bytes, 16 * 4 * 4 / 8);
  for (const Strategy& st : s) EXPECT_EQ(st.compute_seconds + st.communication_seconds, 0.0);
}

TEST(ShardingStrategies, OptimizerUpdatesShardsOverEachAxisSet) {
  ir::Graph g("optimizer");
  g.Add(MakeNode("w", ir::OpKind::kParameter, "parameter", {6, 8}, {}));
  g.Add(MakeNode("w.adam_m", ir::OpKind::kOptimizerState, "adam_m", {6, 8}, {}));
  ir::Node opt = MakeNode("optimizer", ir::OpKind::kOptimizer, "adam", {}, {0, 1});
  g.Add(opt);
  ir::AnnotateFlopsAndBytes(g);
  const ir::DeviceMesh mesh = Mesh2x4();
  const std::vector<Strategy> s = Enumerate(g, 2, mesh);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].sharding.strategy, "update replicated");
  // The first dim each group divides: 6 by 2 (axis 0), else 8 by 4 (axis 1) and by 8 (both).
  const std::vector<std::string> expected = {"RR", "S0R", "RS1", "RS01"};
  for (size_t k = 0; k < s.size(); ++k) {
    EXPECT_EQ(s[k].sharding.operands[0].ToString(), expected[k]) << k;
    EXPECT_EQ(s[k].sharding.operands[1].ToString(), expected[k]) << k;
  }
  EXPECT_EQ(s[3].sharding.reduce_axes, ir::AxisBit(0) | ir::AxisBit(1));
  EXPECT_DOUBLE_EQ(s[1].compute_seconds, Costs().ComputeTime(g.node(2), 0.5));
  EXPECT_DOUBLE_EQ(s[1].communication_seconds, cost::CollectiveTime(cost::Collective::kAllReduce, 4, mesh, 1));
}

TEST(ShardingStrategies, OpaqueAndSingleDeviceMeshesRunReplicated) {
  ir::Graph g("opaque");
  g.Add(MakeNode("x", ir::OpKind::kInput, "input", {8, 4}, {}));
  g.Add(MakeNode("f", ir::OpKind::kOpaque, "custom", {8, 4}, {0}));
  EXPECT_THAT(Names(Enumerate(g, 1, Mesh2x4())), ElementsAre("RR = RR"));
  const ir::Graph mm = test_util::MatmulGraph(8, 16, 4);
  EXPECT_THAT(Names(Enumerate(mm, 2, Mesh1d(1))), ElementsAre("RR = RR x RR"));
  EXPECT_THAT(Names(Enumerate(mm, 2, ir::DeviceMesh{})), ElementsAre("RR = RR x RR"));
}

TEST(ShardingStrategies, EveryGptNodeHasValidDistinctStrategiesReplicatedFirst) {
  const ir::Graph g = test_util::SmallGpt(1);
  const ir::DeviceMesh mesh = Mesh2x4();
  for (const ir::Node& node : g.nodes()) {
    const std::vector<Strategy> s = Enumerate(g, node.id, mesh);
    ASSERT_FALSE(s.empty());
    EXPECT_TRUE(s[0].sharding.output.IsReplicated() && s[0].sharding.reduce_axes == 0) << node.name;
    std::set<std::string> names;
    for (const Strategy& st : s) {
      EXPECT_TRUE(names.insert(st.sharding.strategy).second) << node.name << ": " << st.sharding.strategy;
      EXPECT_EQ(st.sharding.output.dim_axes.size(), static_cast<size_t>(node.output.Rank())) << node.name;
      ASSERT_EQ(st.sharding.operands.size(), node.inputs.size()) << node.name;
      for (size_t i = 0; i < node.inputs.size(); ++i)
        EXPECT_EQ(st.sharding.operands[i].dim_axes.size(), static_cast<size_t>(g.node(node.inputs[i]).output.Rank()));
    }
    // Every node with a tensor to split (the scalar loss and optimizer output aside) has a split.
    if (node.output.Rank() > 0) {
      EXPECT_GT(s.size(), 1u) << node.name;
    }
  }
}

}  // namespace
}  // namespace kiwi::solve::sharding
