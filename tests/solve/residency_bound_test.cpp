#include "kiwi/solve/remat/residency_bound.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kiwi/solve/remat/checkmate_ilp.h"
#include "kiwi/solve/remat/solvers.h"
#include "remat_brute_force.h"
#include "remat_test_util.h"

namespace kiwi::solve::remat {
namespace {

using testing::BruteForceAnySchedule;
using testing::BruteForceStages;
using testing::RandomGraphSpec;
using testing::RandomRematGraph;
using test_util::AddOpaque;
using test_util::Costs;
using test_util::Problem;

// Budgets between the memory lower bound and checkpoint-all, where recomputation is needed.
std::vector<int64_t> Budgets(const RematProblem& p) {
  const int64_t lb = MemoryLowerBound(p);
  const int64_t all = p.checkpoint_all_peak;
  return {all, lb + (all - lb) * 7 / 10, lb + (all - lb) * 4 / 10, lb + (all - lb) / 10, lb};
}

// The bound never exceeds the best frontier-advancing stage schedule (brute force, apart from any
// MILP), nor the best schedule of any form whose first computations follow the order (the argument
// uses only frontier computes), on any DAGs and training-like ones; and it is strictly above the
// baseline somewhere, so the test would notice a bound that degenerated to "every node once".
TEST(ResidencyBound, NeverAboveTheStageBruteForceOptimum) {
  int instances = 0, above_baseline = 0, tight = 0;
  for (uint64_t seed = 1; seed <= 80; ++seed) {
    const RandomGraphSpec spec{.seed = seed, .n = 4 + static_cast<int>(seed % 5), .kind = static_cast<int>(seed % 2),
                               .parameter = seed % 5 == 3, .input = seed % 5 == 1};
    const ir::Graph g = RandomRematGraph(spec);
    for (int64_t budget : Budgets(Problem(g, 0))) {
      const RematProblem p = Problem(g, budget);
      const testing::BruteForceResult bf = BruteForceStages(p);
      const ResidencyBound rb = SolveResidencyBound(p, MakeStageGraph(p), 30, 1);
      const std::string label = "seed " + std::to_string(seed) + " budget " + std::to_string(budget);
      EXPECT_GE(rb.bound, p.baseline_cost - 1e-9) << label;
      if (!bf.feasible) continue;
      ++instances;
      EXPECT_FALSE(rb.infeasible) << label;
      EXPECT_LE(rb.bound, bf.cost + 1e-6) << label << ": bound " << rb.bound << " optimum " << bf.cost;
      // With the input rows thinned to one per gap (what a cap on large graphs does), still a bound,
      // and no stronger.
      const ResidencyBound thinned = SolveResidencyBound(p, MakeStageGraph(p), 30, 1, 1);
      EXPECT_LE(thinned.bound, bf.cost + 1e-6) << label;
      EXPECT_LE(thinned.bound, rb.bound + 1e-6) << label;
      const testing::BruteForceResult any = BruteForceAnySchedule(p);
      if (any.feasible) {
        EXPECT_LE(rb.bound, any.cost + 1e-6) << label << ": bound " << rb.bound << " any " << any.cost;
      }
      above_baseline += rb.bound > p.baseline_cost + 1e-9 ? 1 : 0;
      tight += rb.bound >= bf.cost - 1e-6 && bf.cost > p.baseline_cost + 1e-9 ? 1 : 0;
    }
  }
  EXPECT_GE(instances, 100);
  EXPECT_GE(above_baseline, 10);
  std::printf("[ info ] %d feasible instances, bound above every-node-once on %d, equal to a recomputing optimum on %d\n",
              instances, above_baseline, tight);
}

// a (4 B, cost 3) is read by b and by d; c sits between. Keeping a through c's compute needs
// a + b + c = 4 + 2 + 2 = 8 B; at 7 B a must be recomputed before d, which costs 3: the bound is exact.
TEST(ResidencyBound, HandCheckedGapThatCannotBeKept) {
  ir::Graph g("gap");
  const ir::NodeId a = AddOpaque(g, "a", 4, 3, {});
  const ir::NodeId b = AddOpaque(g, "b", 2, 1, {a});
  const ir::NodeId c = AddOpaque(g, "c", 2, 1, {b});
  AddOpaque(g, "d", 1, 1, {c, a});
  const RematProblem fits = Problem(g, 8);
  EXPECT_DOUBLE_EQ(SolveResidencyBound(fits, MakeStageGraph(fits), 10, 1).bound, 6.0);
  const RematProblem tight = Problem(g, 7);
  const ResidencyBound rb = SolveResidencyBound(tight, MakeStageGraph(tight), 10, 1);
  EXPECT_DOUBLE_EQ(rb.bound, 9.0);
  EXPECT_TRUE(rb.proven_optimal);
  const testing::BruteForceResult bf = BruteForceStages(tight);
  ASSERT_TRUE(bf.feasible);
  EXPECT_DOUBLE_EQ(bf.cost, 9.0);
}

// i (1 B, cost 1) is read by j and by d, and c sits between: at 3 B, i cannot stay through c's compute
// (j + c + i = 4), so it is computed again from p (1 B, cost 5), whose last use was i. p cannot be held
// until then either (i + j + p = 4 at j's compute), nor can i come back early (j + c + i), so p is
// computed again too: 9 + 1 + 5 = 15, which is what the brute force finds. Without the rows that tie a
// recomputation to its inputs the bound would be 10.
TEST(ResidencyBound, HandCheckedRecomputationThatNeedsItsInput) {
  ir::Graph g("input");
  const ir::NodeId p = AddOpaque(g, "p", 1, 5, {});
  const ir::NodeId i = AddOpaque(g, "i", 1, 1, {p});
  const ir::NodeId j = AddOpaque(g, "j", 2, 1, {i});
  const ir::NodeId c = AddOpaque(g, "c", 1, 1, {j});
  AddOpaque(g, "d", 1, 1, {c, i});
  const RematProblem tight = Problem(g, 3);
  const ResidencyBound rb = SolveResidencyBound(tight, MakeStageGraph(tight), 10, 1);
  EXPECT_DOUBLE_EQ(rb.bound, 15.0) << rb.note;
  EXPECT_TRUE(rb.proven_optimal);
  const testing::BruteForceResult bf = BruteForceAnySchedule(tight);
  ASSERT_TRUE(bf.feasible);
  EXPECT_DOUBLE_EQ(bf.cost, 15.0);
}

// A frontier compute whose own inputs and output exceed the budget: no schedule fits, and the bound
// says so instead of solving.
TEST(ResidencyBound, AFrontierComputeOverTheBudgetIsInfeasible) {
  ir::Graph g("big");
  const ir::NodeId a = AddOpaque(g, "a", 4, 1, {});
  AddOpaque(g, "b", 4, 1, {a});
  const RematProblem p = Problem(g, 7);
  const ResidencyBound rb = SolveResidencyBound(p, MakeStageGraph(p), 10, 1);
  EXPECT_TRUE(rb.infeasible);
  EXPECT_NE(rb.note.find("stage 1"), std::string::npos) << rb.note;
}

// auto reports the residency bound when the MILP proves less: with no time for the MILP's root on a
// layered graph, its lower bound is still above every-node-once and below its own cost. In auto's
// 0.05 s CBC does not prove the reduced model's optimum (197 here, in about 0.5 s), but its root LP
// (what a zero time limit gives) is a floor that auto's bound never falls below.
TEST(ResidencyBound, AutoReportsItWhenTheMilpCannot) {
  ir::Graph g("layers");
  std::vector<ir::NodeId> previous = {AddOpaque(g, "in", 8, 1, {})};
  for (int layer = 0; layer < 12; ++layer) {
    std::vector<ir::NodeId> current;
    for (int k = 0; k < 3; ++k)
      current.push_back(AddOpaque(g, "n" + std::to_string(layer) + "_" + std::to_string(k), 4 + k * 3 + layer % 4,
                                  2 + (layer + k) % 5, previous));
    if (layer >= 2) current.push_back(AddOpaque(g, "skip" + std::to_string(layer), 6, 3, {static_cast<ir::NodeId>(layer)}));
    previous = current;
  }
  AddOpaque(g, "out", 1, 1, previous);
  const RematProblem all = Problem(g, 0);
  const RematProblem p = Problem(g, all.checkpoint_all_peak * 8 / 10);
  const ResidencyBound rb = SolveResidencyBound(p, MakeStageGraph(p), 10, 1);
  ASSERT_FALSE(rb.infeasible);
  ASSERT_GT(rb.bound, p.baseline_cost);
  RematOptions o;
  o.time_limit_seconds = 0.5;
  o.threads = 1;
  Result<RematResult> r = SolveRemat(p, Costs(), SolverKind::kAuto, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->feasible && r->lower_bound.has_value());
  const ResidencyBound root = SolveResidencyBound(p, MakeStageGraph(p), 0.0, 1);
  ASSERT_GT(root.bound, p.baseline_cost);
  EXPECT_GE(*r->lower_bound, root.bound - 1e-6);
  EXPECT_LE(*r->lower_bound, r->cost + 1e-6);
  EXPECT_LE(root.bound, rb.bound + 1e-6);
}

}  // namespace
}  // namespace kiwi::solve::remat
