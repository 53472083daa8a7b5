// The IR path end to end (issue 4): a transformer layer from the model zoo on a 2x4 mesh lowers to
// the sharding problem, is solved, and the simulator replays the chosen shardings with the same cost
// and a peak within the memory limit.
#include <gtest/gtest.h>

#include "kiwi/sim/simulator.h"
#include "kiwi/solve/sharding/lowering.h"
#include "kiwi/solve/sharding/solver.h"
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

}  // namespace
}  // namespace kiwi::solve::sharding
