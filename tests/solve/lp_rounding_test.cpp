#include "kiwi/solve/remat/lp_rounding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "kiwi/solve/milp/solve.h"
#include "kiwi/solve/remat/checkmate_ilp.h"
#include "kiwi/solve/remat/checkmate_schedule.h"
#include "kiwi/solve/remat/optimal_r.h"
#include "kiwi/io/graph_json.h"
#include "remat_brute_force.h"
#include "remat_test_util.h"

namespace kiwi::solve::remat {
namespace {

using testing::RandomGraphSpec;
using testing::RandomRematGraph;

using test_util::Costs;
using test_util::Problem;

milp::SolveOptions ExactMilp() {
  milp::SolveOptions o;
  o.relative_gap = 1e-9;
  o.threads = 1;
  return o;
}

RematOptions Exact() {
  RematOptions o;
  o.relative_gap = 1e-9;
  o.threads = 1;
  return o;
}

// A chain 0 -> 1 -> 2 -> 3 with costs 1, 2, 3, 4 and sizes 1, 2, 4, 8.
ir::Graph Chain() {
  ir::Graph g("chain");
  for (int i = 0; i < 4; ++i) {
    ir::Node n;
    n.name = "n" + std::to_string(i);
    n.output = {ir::DType::kU8, {int64_t{1} << i}};
    n.measured_cost = i + 1;
    if (i > 0) n.inputs = {i - 1};
    g.Add(std::move(n));
  }
  return g;
}

StoredSets NoneStored(int n) {
  StoredSets s(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) s[static_cast<size_t>(t)].assign(static_cast<size_t>(t), 0);
  return s;
}

TEST(OptimalR, NothingStoredRecomputesEveryAncestor) {
  const ir::Graph chain = Chain();
  const RematProblem p = Problem(chain, 100);
  const StageGraph g = MakeStageGraph(p);
  const StageSolution sol = OptimalR(g, NoneStored(4));
  ASSERT_TRUE(CheckStageSolution(g, sol).ok());
  // Stage t recomputes 0..t: 1 + (1+2) + (1+2+3) + (1+2+3+4).
  EXPECT_DOUBLE_EQ(StageCost(g, sol), 20.0);
  // Peak: stage 3 computes 0 (1 B), 1 (2 B; 0 freed), 2 (4 B; 1 freed), 3 (8 B; 2 still held): 12.
  EXPECT_EQ(StagePeakMemory(g, sol), 12);
}

TEST(OptimalR, StoredInputIsNotRecomputedAndCarriedTensorsAreComputedOnce) {
  const ir::Graph chain = Chain();
  const RematProblem p = Problem(chain, 100);
  const StageGraph g = MakeStageGraph(p);
  StoredSets s = NoneStored(4);
  s[3][1] = 1;  // keep 1 for stage 3: stage 2 computes it (needed anyway) and stage 3 reads it
  s[2][1] = 0;
  const StageSolution sol = OptimalR(g, s);
  ASSERT_TRUE(CheckStageSolution(g, sol).ok());
  EXPECT_EQ(sol.R[3], (std::vector<uint8_t>{0, 0, 1, 1}));  // 2 from the stored 1, then 3
  EXPECT_EQ(sol.R[2], (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_DOUBLE_EQ(StageCost(g, sol), 1 + 3 + 6 + 7);
}

TEST(OptimalR, DropsStoredTensorsNothingReads) {
  const ir::Graph chain = Chain();
  const RematProblem p = Problem(chain, 100);
  const StageGraph g = MakeStageGraph(p);
  StoredSets s = NoneStored(4);
  s[3][0] = 1;  // 0 is read by 1 only, which stage 3 does not recompute since 2 is stored: dropped
  s[3][2] = 1;
  s[2][0] = 1;  // kept: stage 2 recomputes 1 from it
  const StageSolution sol = OptimalR(g, s);
  ASSERT_TRUE(CheckStageSolution(g, sol).ok());
  EXPECT_EQ(sol.S[3], (std::vector<uint8_t>{0, 0, 1}));
  EXPECT_EQ(sol.R[3], (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(sol.S[2], (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(sol.R[2], (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ(sol.R[1], (std::vector<uint8_t>{1, 1}));  // S[1] lacks 0, so stage 1 recomputes it to carry it
}

TEST(OptimalR, GivenTheMilpsStoredSetsMatchesItsCost) {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const ir::Graph graph = RandomRematGraph({.seed = seed, .n = 8, .kind = static_cast<int>(seed % 2)});
    const RematProblem all = Problem(graph, 0);
    const RematProblem p = Problem(graph, (MemoryLowerBound(all) + 2 * all.checkpoint_all_peak) / 3);
    const StageGraph g = MakeStageGraph(p);
    const CheckmateModel cm = BuildCheckmateModel(p, g);
    Result<milp::SolveResult> r = milp::Solve(cm.model, ExactMilp());
    ASSERT_TRUE(r.ok());
    if (!r->has_solution()) continue;
    const StageSolution sol = OptimalR(g, ReadStageSolution(cm, r->values).S);
    EXPECT_NEAR(StageCost(g, sol), r->objective, 1e-6) << seed;
    EXPECT_LE(StagePeakMemory(g, sol), p.budget) << seed;
  }
}

TEST(Rounding, ThresholdsAndRandomDrawsRespectCertainValues) {
  const std::vector<std::vector<double>> s_lp = {{}, {0.0}, {1.0, 0.5}, {0.25, 0.75, 1e-12}};
  EXPECT_EQ(RoundStored(s_lp, 0.0), (StoredSets{{}, {0}, {1, 1}, {1, 1, 0}}));
  EXPECT_EQ(RoundStored(s_lp, 0.5), (StoredSets{{}, {0}, {1, 0}, {0, 1, 0}}));
  EXPECT_EQ(RandomlyRoundStored(s_lp, 3), RandomlyRoundStored(s_lp, 3));
  int ones = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const StoredSets s = RandomlyRoundStored(s_lp, seed);
    EXPECT_EQ(s[1][0], 0);
    EXPECT_EQ(s[2][0], 1);
    EXPECT_EQ(s[3][2], 0);
    ones += s[2][1];
  }
  EXPECT_GT(ones, 70);  // about half of 200 draws of a 0.5 entry
  EXPECT_LT(ones, 130);
}

TEST(LpRounding, LpBoundBelowIlpBelowRoundingOnRandomGraphs) {
  int compared = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const ir::Graph graph = RandomRematGraph(
        {.seed = seed, .n = 4 + static_cast<int>(seed % 5), .kind = static_cast<int>(seed % 2), .parameter = seed % 4 == 0});
    const RematProblem all = Problem(graph, 0);
    for (int64_t budget : {all.checkpoint_all_peak, (MemoryLowerBound(all) + all.checkpoint_all_peak) / 2}) {
      const RematProblem p = Problem(graph, budget);
      Result<RematResult> lp = SolveLpRounding(p, Costs(), Exact());
      Result<RematResult> ilp = SolveCheckmateIlp(p, Costs(), Exact());
      ASSERT_TRUE(lp.ok() && ilp.ok());
      if (!ilp->feasible) {
        EXPECT_FALSE(lp->feasible);  // a rounding is a stage schedule, which the ILP would have found
        continue;
      }
      ++compared;
      ASSERT_TRUE(lp->lower_bound.has_value()) << lp->note;
      EXPECT_LE(*lp->lower_bound, ilp->cost + 1e-6) << seed;
      if (!lp->feasible) continue;
      EXPECT_LE(ilp->cost, lp->cost + 1e-6) << seed;
      EXPECT_LE(lp->peak_memory, budget);
      EXPECT_EQ(lp->solver, "lp-round");
    }
  }
  EXPECT_GE(compared, 15);
}

TEST(LpRounding, CheckpointAllBudgetGivesTheBaseline) {
  const ir::Graph graph = RandomRematGraph({.seed = 5, .n = 8, .kind = 1});
  const RematProblem p = Problem(graph, Problem(graph, 0).checkpoint_all_peak);
  std::vector<std::string> lines;
  RematOptions o;
  o.progress = [&](const std::string& line) { lines.push_back(line); };
  Result<RematResult> r = SolveLpRounding(p, Costs(), o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->feasible);
  EXPECT_DOUBLE_EQ(r->cost, p.baseline_cost);
  EXPECT_NEAR(*r->lower_bound, p.baseline_cost, 1e-6);  // every node once is also the LP's floor
  ASSERT_EQ(lines.size(), 1u);  // one line per phase: the LP at the full budget and its roundings
  EXPECT_NE(lines[0].find("a proven lower bound"), std::string::npos) << lines[0];
}

// Checkmate reports two-phase rounding within 1% of the ILP on VGG16; here the rounded stored sets first
// overshoot the budget and the scaled-budget LPs are what make one fit.
TEST(LpRounding, Vgg16AtNinetyPercentFitsBetweenTheBoundAndTheIlp) {
  const std::string path = std::string(KIWI_SHARED_DIR) + "/benchmarks/remat/vgg16_b256_train.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  Result<ir::Graph> g = io::ReadGraphFile(path);
  ASSERT_TRUE(g.ok()) << g.error().message;
  const RematProblem p = Problem(*g, Problem(*g, 0).checkpoint_all_peak * 9 / 10);
  Result<RematResult> lp = SolveLpRounding(p, Costs(), RematOptions{});
  Result<RematResult> ilp = SolveCheckmateIlp(p, Costs(), RematOptions{});
  ASSERT_TRUE(lp.ok() && ilp.ok());
  ASSERT_TRUE(lp->feasible) << lp->note;
  ASSERT_TRUE(ilp->feasible && ilp->optimal) << ilp->note;
  EXPECT_LE(lp->peak_memory, p.budget);
  EXPECT_LE(*lp->lower_bound, ilp->cost + 1e-6);
  EXPECT_LE(ilp->cost, lp->cost + 1e-6);
  EXPECT_LE(lp->cost, 1.01 * ilp->cost);
}

}  // namespace
}  // namespace kiwi::solve::remat
