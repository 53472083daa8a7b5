// The IR path end to end (issue 4): a transformer layer from the model zoo on a 2x4 mesh lowers to
// the sharding problem, is solved, and the simulator replays the chosen shardings with the same cost
// and a peak within the memory limit.
#include <gtest/gtest.h>

#include "kiwi/sim/simulator.h"
#include "kiwi/solve/sharding/lowering.h"
#include "kiwi/solve/sharding/solver.h"
#include "kiwi/solve/sharding/strategies.h"
#include "sharding_lowering_test_util.h"

namespace kiwi::solve::sharding {
namespace {

using test_util::Costs;
using test_util::Mesh2x4;

struct Replayed {
  ShardingResult result;
  sim::SimResult sim;
};

Replayed SolveAndReplay(const ir::Graph& g, const LoweredSharding& l, ShardingSolverKind kind) {
  ShardingSolveOptions options;
  options.time_limit_seconds = 20;  // the ILP proves its optimum in seconds; the fast solver may search on
  options.relative_gap = 0.0;
  Result<ShardingResult> r = SolveSharding(l.problem, kind, options);
  EXPECT_TRUE(r.ok()) << r.error().message;
  if (!r.ok()) return {};
  Result<plan::OperatorPlan> plan = ToOperatorPlan(l, r->solution, Mesh2x4());
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  Result<sim::SimResult> replay = sim::SimulateOperatorPlan(g, *plan, Costs(), Mesh2x4());
  EXPECT_TRUE(replay.ok()) << replay.error().message;
  return {*r, *replay};
}

TEST(ShardingEndToEnd, GptLayerOn2x4IsSolvedAndReplayedWithTheSameCost) {
  const ir::Graph g = test_util::SmallGpt(1);
  Result<LoweredSharding> unlimited = LowerToShardingProblem(g, Costs(), Mesh2x4(), {});
  ASSERT_TRUE(unlimited.ok()) << unlimited.error().message;
  // A limit between the smallest possible peak and the unconstrained optimum's peak makes it bind.
  const Replayed free = SolveAndReplay(g, *unlimited, ShardingSolverKind::kIlp);
  const int64_t floor = ir::MinimumPeakUsage(unlimited->problem);
  ASSERT_LT(floor, free.sim.peak_memory_bytes);
  LoweringOptions options;
  options.memory_limit_bytes = floor + (free.sim.peak_memory_bytes - floor) / 3;
  Result<LoweredSharding> l = LowerToShardingProblem(g, Costs(), Mesh2x4(), options);
  ASSERT_TRUE(l.ok());
  const double rounding = static_cast<double>(l->problem.nodes.size() + l->problem.edges.size()) * 1e-12;
  for (ShardingSolverKind kind : {ShardingSolverKind::kIlp, ShardingSolverKind::kAuto}) {
    const Replayed r = SolveAndReplay(g, *l, kind);
    SCOPED_TRACE(r.result.solver);
    EXPECT_TRUE(r.result.evaluation.feasible);
    EXPECT_NEAR(l->Seconds(r.result.evaluation.cost), r.sim.iteration_seconds, rounding);
    EXPECT_EQ(r.result.evaluation.peak_usage, r.sim.peak_memory_bytes);
    EXPECT_LE(r.sim.peak_memory_bytes, options.memory_limit_bytes);
    EXPECT_GE(r.sim.iteration_seconds, free.sim.iteration_seconds - rounding);  // the limit costs time
    if (kind == ShardingSolverKind::kIlp) {
      EXPECT_TRUE(r.result.optimal);
    }
  }
  // Sharding beats running every op replicated on every device.
  const ir::Evaluation replicated = ir::Evaluate(unlimited->problem, ir::Solution(g.size(), 0));
  EXPECT_LT(free.result.evaluation.cost, replicated.cost / 2);
}

// Fused attention (one kAttention op and its three gradients): batch, heads and query rows split; the
// keys and head dims never; dk and dv sum over the query rows (partial sums). The solver's plan of a
// fused GPT replays at the solver's cost and peak.
TEST(ShardingEndToEnd, FusedAttentionSplitsAndReplaysWithTheSameCost) {
  const ir::Graph g = test_util::SmallZooTransformer("gpt", 1, true, models::AttentionKernel::kFused);
  int attention_ops = 0;
  for (const ir::Node& n : g.nodes()) {
    if (n.kind != ir::OpKind::kAttention) continue;
    ++attention_ops;
    const std::vector<Strategy> all = EnumerateStrategies(g, n, Costs(), Mesh2x4(), {});
    bool heads = false, keys = false, partial = false;
    for (const Strategy& s : all) {
      const std::vector<ir::AxisMask>& q = s.sharding.operands[n.op == "attention" ? 0 : 1].dim_axes;
      const std::vector<ir::AxisMask>& k = s.sharding.operands[n.op == "attention" ? 1 : 2].dim_axes;
      heads = heads || (!q.empty() && q[1] != 0);
      keys = keys || (!k.empty() && (k[2] != 0 || k[3] != 0));
      partial = partial || s.sharding.reduce_axes != 0;
    }
    EXPECT_GT(all.size(), 1u) << n.name;
    EXPECT_TRUE(heads) << n.name;
    EXPECT_FALSE(keys) << n.name;
    EXPECT_EQ(partial, n.op == "attention_grad_k" || n.op == "attention_grad_v") << n.name;
  }
  EXPECT_EQ(attention_ops, 4);  // the forward and its three gradients
  Result<LoweredSharding> l = LowerToShardingProblem(g, Costs(), Mesh2x4(), {});
  ASSERT_TRUE(l.ok()) << l.error().message;
  const Replayed r = SolveAndReplay(g, *l, ShardingSolverKind::kIlp);
  const double rounding = static_cast<double>(l->problem.nodes.size() + l->problem.edges.size()) * 1e-12;
  EXPECT_TRUE(r.result.optimal);
  EXPECT_NEAR(l->Seconds(r.result.evaluation.cost), r.sim.iteration_seconds, rounding);
  EXPECT_EQ(r.result.evaluation.peak_usage, r.sim.peak_memory_bytes);
}

}  // namespace
}  // namespace kiwi::solve::sharding
