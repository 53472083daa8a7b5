// plan::CheckpointAllSchedule: every node once in graph order, each output freed right after its last
// consumer, an output with no consumer right after it is computed, persistent nodes never freed.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kiwi/ir/graph.h"
#include "kiwi/plan/plan.h"

namespace kiwi::plan {
namespace {

using ir::DType;
using ir::NodeId;
using ir::OpKind;

Step C(NodeId v) { return {StepKind::kCompute, v}; }
Step F(NodeId v) { return {StepKind::kFree, v}; }

NodeId AddOp(ir::Graph& g, const std::string& name, std::vector<NodeId> inputs, OpKind kind = OpKind::kOpaque) {
  ir::Node node;
  node.name = name;
  node.kind = kind;
  node.output = {DType::kU8, {8}};
  node.inputs = std::move(inputs);
  return g.Add(std::move(node));
}

TEST(CheckpointAllSchedule, ChainFreesEachOutputAfterItsConsumer) {
  ir::Graph g("chain");
  const NodeId a = AddOp(g, "a", {});
  const NodeId b = AddOp(g, "b", {a});
  const NodeId c = AddOp(g, "c", {b});
  EXPECT_EQ(CheckpointAllSchedule(g), (std::vector<Step>{C(a), C(b), F(a), C(c), F(b), F(c)}));
}

TEST(CheckpointAllSchedule, OutputWithNoConsumerIsFreedRightAfterItsCompute) {
  ir::Graph g("dead_end");
  const NodeId a = AddOp(g, "a", {});
  const NodeId side = AddOp(g, "side", {a});  // nobody reads it
  const NodeId b = AddOp(g, "b", {a});
  EXPECT_EQ(CheckpointAllSchedule(g), (std::vector<Step>{C(a), C(side), F(side), C(b), F(a), F(b)}));
}

TEST(CheckpointAllSchedule, DiamondKeepsTheSharedInputUntilItsLastConsumer) {
  ir::Graph g("diamond");
  const NodeId a = AddOp(g, "a", {});
  const NodeId b = AddOp(g, "b", {a});
  const NodeId c = AddOp(g, "c", {a});
  const NodeId d = AddOp(g, "d", {b, c});
  EXPECT_EQ(CheckpointAllSchedule(g), (std::vector<Step>{C(a), C(b), C(c), F(a), C(d), F(b), F(c), F(d)}));
}

TEST(CheckpointAllSchedule, PersistentNodesAreNeverFreed) {
  ir::Graph g("persistent");
  const NodeId x = AddOp(g, "x", {}, OpKind::kInput);
  const NodeId w = AddOp(g, "w", {}, OpKind::kParameter);
  const NodeId m = AddOp(g, "m", {}, OpKind::kOptimizerState);
  const NodeId y = AddOp(g, "y", {x, w});
  const NodeId u = AddOp(g, "update", {w, m, y}, OpKind::kOptimizer);
  EXPECT_EQ(CheckpointAllSchedule(g), (std::vector<Step>{C(x), C(w), C(m), C(y), F(x), C(u), F(y), F(u)}));
}

TEST(CheckpointAllSchedule, FollowsTheExplicitOrder) {
  ir::Graph g("ordered");
  const NodeId a = AddOp(g, "a", {});
  const NodeId b = AddOp(g, "b", {});
  const NodeId c = AddOp(g, "c", {a, b});
  g.set_order({b, a, c});
  EXPECT_EQ(CheckpointAllSchedule(g), (std::vector<Step>{C(b), C(a), C(c), F(a), F(b), F(c)}));
}

TEST(CheckpointAllSchedule, InputReadTwiceByOneConsumerIsFreedOnce) {
  ir::Graph g("square");
  const NodeId a = AddOp(g, "a", {});
  const NodeId sq = AddOp(g, "sq", {a, a});
  EXPECT_EQ(CheckpointAllSchedule(g), (std::vector<Step>{C(a), C(sq), F(a), F(sq)}));
}

TEST(CheckpointAllSchedule, EmptyGraphGivesEmptySchedule) { EXPECT_TRUE(CheckpointAllSchedule(ir::Graph()).empty()); }

// On random DAGs: each node computed exactly once in order; each non-persistent node freed exactly
// once, after its last consumer's compute and before the next compute; persistent nodes never freed.
TEST(CheckpointAllSchedule, RandomDagsSatisfyTheDefinition) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 50; ++trial) {
    ir::Graph g("random");
    const int n = 2 + static_cast<int>(rng() % 30);
    for (int v = 0; v < n; ++v) {
      std::vector<NodeId> inputs;
      const int k = v == 0 ? 0 : static_cast<int>(rng() % 4);
      for (int j = 0; j < k; ++j) inputs.push_back(static_cast<NodeId>(rng() % static_cast<unsigned>(v)));
      AddOp(g, "n" + std::to_string(v), inputs, rng() % 6 == 0 ? OpKind::kParameter : OpKind::kOpaque);
    }
    const std::vector<Step> steps = CheckpointAllSchedule(g);
    std::vector<int> compute_at(static_cast<size_t>(n), -1), free_at(static_cast<size_t>(n), -1);
    int computes = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      const auto v = static_cast<size_t>(steps[i].node);
      if (steps[i].kind == StepKind::kCompute) {
        ASSERT_EQ(compute_at[v], -1) << "node computed twice";
        ASSERT_EQ(steps[i].node, computes) << "computes follow graph order";
        compute_at[v] = computes++;
      } else {
        ASSERT_EQ(free_at[v], -1) << "node freed twice";
        free_at[v] = computes - 1;  // freed right after this compute
      }
    }
    ASSERT_EQ(computes, n);
    const auto consumers = g.Consumers();
    for (int v = 0; v < n; ++v) {
      const auto sv = static_cast<size_t>(v);
      if (g.node(v).is_persistent()) {
        EXPECT_EQ(free_at[sv], -1);
        continue;
      }
      const int last = consumers[sv].empty() ? v : consumers[sv].back();
      EXPECT_EQ(free_at[sv], last) << "trial " << trial << " node " << v;
    }
  }
}

}  // namespace
}  // namespace kiwi::plan
