// Lowering a graph to the sharding problem (solve/sharding/lowering.h): hand-checked pieces, the
// simulator agreement that makes any solver's answer trustworthy, and the error paths.
#include "kiwi/solve/sharding/lowering.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kiwi/sim/simulator.h"
#include "sharding_lowering_test_util.h"

namespace kiwi::solve::sharding {
namespace {

using ::testing::HasSubstr;
using test_util::Costs;
using test_util::Mesh1d;
using test_util::Mesh2x4;

LoweredSharding Lower(const ir::Graph& g, const ir::DeviceMesh& mesh, LoweringOptions options = {}) {
  Result<LoweredSharding> l = LowerToShardingProblem(g, Costs(), mesh, options);
  EXPECT_TRUE(l.ok()) << l.error().message;
  return l.ok() ? *std::move(l) : LoweredSharding{};
}

int64_t Units(double seconds) { return std::llround(seconds / 1e-12); }

// KIWI's claim check: the problem's cost and peak of `s` are the simulator's time and peak memory of
// the plan `s` stands for (each node and edge cost is rounded to whole picoseconds).
void ExpectSimulatorAgrees(const ir::Graph& g, const LoweredSharding& l, const ir::Solution& s,
                           const ir::DeviceMesh& mesh, const std::string& what) {
  SCOPED_TRACE(what);
  const ir::Evaluation e = ir::Evaluate(l.problem, s);
  ASSERT_TRUE(e.valid) << e.violation;
  Result<plan::OperatorPlan> plan = ToOperatorPlan(l, s, mesh);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  Result<sim::SimResult> r = sim::SimulateOperatorPlan(g, *plan, Costs(), mesh);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const double rounding = 0.5 * static_cast<double>(l.problem.nodes.size() + l.problem.edges.size()) * 1e-12;
  EXPECT_NEAR(l.Seconds(e.cost), r->iteration_seconds, rounding + 1e-9 * r->iteration_seconds);
  EXPECT_EQ(e.peak_usage, r->peak_memory_bytes);
}

ir::Solution Replicated(const LoweredSharding& l) { return ir::Solution(l.problem.nodes.size(), 0); }

ir::Solution RandomSolution(const LoweredSharding& l, std::mt19937& rng) {
  ir::Solution s;
  for (const ir::ShardingNode& n : l.problem.nodes)
    s.push_back(std::uniform_int_distribution<int32_t>(0, n.strategies() - 1)(rng));
  return s;
}

// Per node, the strategy minimizing `key` (lowest index among ties).
template <typename Key>
ir::Solution PerNodeBest(const LoweredSharding& l, Key key) {
  ir::Solution s;
  for (const ir::ShardingNode& n : l.problem.nodes) {
    int32_t best = 0;
    for (int32_t k = 1; k < n.strategies(); ++k)
      if (key(n, k) < key(n, best)) best = k;
    s.push_back(best);
  }
  return s;
}

ir::Solution Cheapest(const LoweredSharding& l) {
  return PerNodeBest(l, [](const ir::ShardingNode& n, int32_t k) { return n.cost[static_cast<size_t>(k)]; });
}
ir::Solution Smallest(const LoweredSharding& l) {
  return PerNodeBest(l, [](const ir::ShardingNode& n, int32_t k) { return n.usage[static_cast<size_t>(k)]; });
}

TEST(ShardingLowering, MatmulNodesEdgesAndIntervalsByHand) {
  const ir::Graph g = test_util::MatmulGraph(8, 16, 4);
  const ir::DeviceMesh mesh = Mesh1d(4);
  const LoweredSharding l = Lower(g, mesh, {.memory_limit_bytes = 4096});
  const ir::ShardingProblem& p = l.problem;
  ASSERT_EQ(p.nodes.size(), 3u);
  EXPECT_EQ(p.usage_limit, 4096);
  // Order x, w, y: x is freed after y (its last use), w is persistent, y is freed right away.
  EXPECT_EQ(std::make_pair(p.nodes[0].start, p.nodes[0].end), std::make_pair(int64_t{0}, int64_t{3}));
  EXPECT_EQ(std::make_pair(p.nodes[1].start, p.nodes[1].end), std::make_pair(int64_t{1}, int64_t{3}));
  EXPECT_EQ(std::make_pair(p.nodes[2].start, p.nodes[2].end), std::make_pair(int64_t{2}, int64_t{3}));
  EXPECT_EQ(p.nodes[0].usage, (std::vector<int64_t>{512, 128, 128}));  // x: RR, S0R, RS0
  EXPECT_EQ(p.nodes[0].cost, (std::vector<int64_t>{0, 0, 0}));
  constexpr size_t kY = 5;  // strategies of y (sharding_strategies_test.cpp)
  ASSERT_EQ(p.nodes[2].strategies(), static_cast<int32_t>(kY));
  for (size_t k = 0; k < kY; ++k) {
    const Strategy& s = l.strategies[2][k];
    EXPECT_EQ(p.nodes[2].cost[k], Units(s.compute_seconds + s.communication_seconds));
    EXPECT_EQ(p.nodes[2].usage[k], s.output_bytes);
  }
  EXPECT_EQ(p.nodes[2].cost[3], Units(1.12e-9 / 4 + 6 * (1e-6 + 3.2e-10)));  // K split + all-reduce
  ASSERT_EQ(p.edges.size(), 2u);
  const ir::ShardingEdge& e = p.edges[0];  // x -> y operand 0
  EXPECT_EQ(std::make_pair(e.u, e.v), std::make_pair(0, 2));
  ASSERT_EQ(e.cost.size(), 3 * kY);
  EXPECT_EQ(e.cost[0 * kY + 1], 0);  // RR -> S0R: a free local slice
  EXPECT_EQ(e.cost[1 * kY + 1], 0);  // S0R as required
  const double gather = 3 * (1e-6 + 512.0 / (4 * 100e9));  // all-gather of the 512-byte x
  EXPECT_EQ(e.cost[1 * kY + 0], Units(gather));
  EXPECT_EQ(e.cost[2 * kY + 0], Units(gather));
  EXPECT_EQ(e.cost[1 * kY + 3], Units(Costs().ReshardTime(g.node(0).output, l.strategies[0][1].sharding.output,
                                                          l.strategies[2][3].sharding.operands[0], mesh)));
  EXPECT_EQ(p.strategy_names[2], "RR = RR x RR;S0R = S0R x RR;RS0 = RR x RS0;RR = RS0 x S0R (all-reduce@0);"
                                 "S0R = RS0 x S0R (reduce-scatter@0)");
  EXPECT_EQ(ir::Evaluate(p, Replicated(l)).peak_usage, 512 + 256 + 128);
}

TEST(ShardingLowering, TransformerLayerOn2x4MeshAgreesWithTheSimulator) {
  const ir::Graph g = test_util::SmallGpt(1);
  const ir::DeviceMesh mesh = Mesh2x4();
  const LoweredSharding l = Lower(g, mesh);
  ASSERT_EQ(l.problem.nodes.size(), static_cast<size_t>(g.size()));
  ASSERT_EQ(static_cast<int64_t>(l.problem.edges.size()), g.NumEdges());
  ASSERT_TRUE(ir::ValidateShardingProblem(l.problem, "lowered"));
  ExpectSimulatorAgrees(g, l, Replicated(l), mesh, "all replicated");
  ExpectSimulatorAgrees(g, l, Cheapest(l), mesh, "greedy per-node cheapest");
  ExpectSimulatorAgrees(g, l, Smallest(l), mesh, "per-node smallest");
  std::mt19937 rng(7);
  for (int trial = 0; trial < 5; ++trial)
    ExpectSimulatorAgrees(g, l, RandomSolution(l, rng), mesh, "random " + std::to_string(trial));
}

TEST(ShardingLowering, TwoLayersOn1dMeshWithUnevenSplitsAgreeWithTheSimulator) {
  const ir::Graph g = test_util::SmallGpt(2);
  const ir::DeviceMesh mesh = Mesh1d(8);
  const LoweredSharding l = Lower(g, mesh, {.strategies = {.require_divisible = false}});
  ExpectSimulatorAgrees(g, l, Cheapest(l), mesh, "greedy per-node cheapest");
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3; ++trial)
    ExpectSimulatorAgrees(g, l, RandomSolution(l, rng), mesh, "random " + std::to_string(trial));
}

TEST(ShardingLowering, ShardingShrinksThePeakToTheProblemsLowerBound) {
  const ir::Graph g = test_util::SmallGpt(1);
  const LoweredSharding l = Lower(g, Mesh2x4());
  const int64_t replicated = ir::Evaluate(l.problem, Replicated(l)).peak_usage;
  const int64_t smallest = ir::Evaluate(l.problem, Smallest(l)).peak_usage;
  EXPECT_EQ(smallest, ir::MinimumPeakUsage(l.problem));
  // Almost every tensor splits 8 ways; a few (labels of odd size, scalars) do not.
  EXPECT_LT(smallest, replicated / 4);
  EXPECT_GT(smallest, replicated / 8 - 1);
}

TEST(ShardingLowering, ReplicatedSolutionCostsTheSingleDeviceComputeTime) {
  const ir::Graph g = test_util::SmallGpt(1);
  const LoweredSharding l = Lower(g, Mesh2x4());
  int64_t expected = 0;
  for (const ir::Node& node : g.nodes()) expected += Units(Costs().ComputeTime(node));
  EXPECT_EQ(ir::Evaluate(l.problem, Replicated(l)).cost, expected);  // no collectives, no resharding
}

TEST(ShardingLowering, FourLayerGptLowersWholly) {
  const ir::Graph g = test_util::SmallGpt(4);
  const LoweredSharding l = Lower(g, Mesh2x4());
  EXPECT_EQ(l.problem.nodes.size(), static_cast<size_t>(g.size()));
  EXPECT_EQ(static_cast<int64_t>(l.problem.edges.size()), g.NumEdges());
  EXPECT_EQ(l.schedule, plan::CheckpointAllSchedule(g));
  Result<plan::OperatorPlan> plan = ToOperatorPlan(l, Cheapest(l), Mesh2x4());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->shardings.size(), static_cast<size_t>(g.size()));
  EXPECT_EQ(plan->mesh_shape, (std::vector<int>{2, 4}));
}

void ExpectBadInput(const Result<LoweredSharding>& r, const std::string& field) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  EXPECT_THAT(r.error().message, HasSubstr(field));
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
}

TEST(ShardingLowering, RefusesAGraphCapturedFromPyTorch) {
  ir::Graph g = test_util::MatmulGraph(8, 16, 4);
  g.set_operands(ir::Operands::kStorages);
  ExpectBadInput(LowerToShardingProblem(g, Costs(), Mesh2x4(), {}), "operator sharding needs kiwi's own operators");
}

TEST(ShardingLowering, BadMeshesAndOptionsAreBadInput) {
  const ir::Graph g = test_util::MatmulGraph(8, 16, 4);
  ir::DeviceMesh mesh = Mesh2x4();
  mesh.axes[1].size = 0;
  ExpectBadInput(LowerToShardingProblem(g, Costs(), mesh, {}), "mesh: axes[1].size");
  mesh = Mesh2x4();
  mesh.axes[0].bandwidth = 0.0;
  ExpectBadInput(LowerToShardingProblem(g, Costs(), mesh, {}), "mesh: axes[0].bandwidth");
  mesh = Mesh2x4();
  mesh.axes[1].latency = -1.0;
  ExpectBadInput(LowerToShardingProblem(g, Costs(), mesh, {}), "mesh: axes[1].latency");
  mesh.axes.assign(9, {1, 1e9, 0.0, "x"});
  ExpectBadInput(LowerToShardingProblem(g, Costs(), mesh, {}), "mesh: 9 axes");
  ExpectBadInput(LowerToShardingProblem(g, Costs(), Mesh2x4(), {.seconds_per_unit = 0.0}), "seconds_per_unit");
  ExpectBadInput(LowerToShardingProblem(g, Costs(), Mesh2x4(), {.memory_limit_bytes = -1}), "memory_limit_bytes");
  // Units so fine that a collective's cost passes the forbidden-cost mark.
  ExpectBadInput(LowerToShardingProblem(g, Costs(), Mesh2x4(), {.seconds_per_unit = 1e-30}), "node 2 'y'");
  // Said as a time kiwi cannot plan with, in seconds (it read "not a finite time below 10^18 units of 1e-30 s").
  ExpectBadInput(LowerToShardingProblem(g, Costs(), Mesh2x4(), {.seconds_per_unit = 1e-30}),
                 "which kiwi cannot plan with (times must be finite, >= 0 and under 1e-12 s)");
}

TEST(ShardingLowering, UnverifiableGraphIsBadInput) {
  ir::Graph g = test_util::MatmulGraph(8, 16, 4);
  g.mutable_node(1).output.shape = {15, 4};  // contraction dims disagree
  ExpectBadInput(LowerToShardingProblem(g, Costs(), Mesh2x4(), {}), "node 2 'y'");
}

TEST(ShardingLowering, ToOperatorPlanRejectsAnotherMeshOrABadSolution) {
  const ir::Graph g = test_util::MatmulGraph(8, 16, 4);
  const LoweredSharding l = Lower(g, Mesh2x4());
  const auto expect_bad = [](const Result<plan::OperatorPlan>& r, const std::string& field) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
    EXPECT_THAT(r.error().message, HasSubstr(field));
  };
  expect_bad(ToOperatorPlan(l, Replicated(l), Mesh1d(8)), "mesh: 8 is not the mesh 2x4");
  expect_bad(ToOperatorPlan(l, ir::Solution{0, 0}, Mesh2x4()), "solution: 2 strategies for 3 nodes");
  expect_bad(ToOperatorPlan(l, ir::Solution{0, 0, 99}, Mesh2x4()), "solution[2]: strategy 99 out of range");
  expect_bad(ToOperatorPlan(l, ir::Solution{-1, 0, 0}, Mesh2x4()), "solution[0]");
  // A plan for the 2x4 mesh does not replay on another one either.
  Result<plan::OperatorPlan> plan = ToOperatorPlan(l, Replicated(l), Mesh2x4());
  ASSERT_TRUE(plan.ok());
  Result<sim::SimResult> r = sim::SimulateOperatorPlan(g, *plan, Costs(), Mesh1d(8));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
}

}  // namespace
}  // namespace kiwi::solve::sharding
