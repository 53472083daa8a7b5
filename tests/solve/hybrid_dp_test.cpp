// Exactness of the layer DP (Eq. 4) and the pipeline solver (Eq. 8): on small pipelines they find
// the fastest assignment within the budget that brute force over every per-layer strategy finds,
// judged by the layer simulator, and their claims equal the simulator's.
#include <gtest/gtest.h>

#include <random>

#include "hybrid_test_util.h"
#include "kiwi/solve/hybrid/partition.h"
#include "kiwi/solve/hybrid/pipeline_solver.h"
#include "kiwi/solve/hybrid/uniform_plans.h"

namespace kiwi::solve::hybrid {
namespace {

using testing::AllOutcomes;
using testing::BestWithin;
using testing::InterestingBudgets;
using testing::Outcome;
using testing::TestCluster;
using testing::TestCostModel;
using testing::TwoTypeModel;

struct Case {
  int encoders, decoders;
  PipelineConfig config;
  Partition partition;
};

void ExpectSolverMatchesBruteForce(const Case& c, const cost::Cluster& cluster,
                                   const cost::LayerModel& model) {
  const LayerTypes types = GroupLayerTypes(model);
  const cost::CostModel cm = TestCostModel(cluster);
  MeshCache meshes;
  Result<CostTables> t =
      CostTables::Build({&model, &types, &cluster, &cm}, c.config.pp, c.config.Microbatch(), {}, meshes);
  ASSERT_TRUE(t.ok()) << t.error().message;
  const plan::LayerPlan shape = MakeLayerPlan(*t, c.config, c.partition, std::vector<int>(model.layers.size(), 0));
  const std::vector<Outcome> outcomes = AllOutcomes(model, cluster, shape);
  for (int64_t budget : InterestingBudgets(outcomes)) {
    SCOPED_TRACE(::testing::Message() << "pp " << c.config.pp << " m " << c.config.micro_batches << " budget " << budget);
    const Outcome* best = BestWithin(outcomes, budget);
    const PartitionSolution sol = SolvePartition({&*t, c.config, c.partition, budget, {}, 1u << 20});
    ASSERT_EQ(sol.feasible, best != nullptr);
    if (!best) continue;
    EXPECT_TRUE(sol.proven);
    EXPECT_NEAR(sol.estimate.iteration_seconds, best->seconds, 1e-9 * best->seconds);
    EXPECT_LE(sol.estimate.peak_memory_bytes, budget);
    Result<sim::LayerSimResult> r =
        sim::SimulateLayerPlan(model, MakeLayerPlan(*t, c.config, c.partition, sol.strategies), cluster, cm);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->summary.peak_memory_bytes, sol.estimate.peak_memory_bytes);
    EXPECT_NEAR(r->summary.iteration_seconds, sol.estimate.iteration_seconds, 1e-12 * best->seconds);
    // Below the optimum nothing is wanted: the cutoff prunes every assignment.
    const PartitionSolution cut =
        SolvePartition({&*t, c.config, c.partition, budget, {}, 1u << 20, best->seconds * (1 - 1e-9)});
    EXPECT_FALSE(cut.feasible);
    EXPECT_TRUE(cut.cut_off);
  }
}

void ExpectSolverMatchesBruteForce(const Case& c, const cost::Cluster& cluster) {
  ExpectSolverMatchesBruteForce(c, cluster, TwoTypeModel(c.encoders, c.decoders));
}

// With Adam's step (once per iteration, the slowest stage's; ZeRO-3 shards it) and backward transients
// (the largest of a stage's layers counts), the DP still finds what brute force finds and proves it.
cost::LayerModel SteppedModel(int encoders, int decoders) {
  cost::LayerModel m = TwoTypeModel(encoders, decoders);
  m.optimizer = "adam";
  for (cost::LayerProfile& p : m.layers) p.backward_transient_bytes_per_sample = p.name == "enc" ? 3'000'000 : 5'000'000;
  m.head.backward_transient_bytes_per_sample = 9'000'000;
  return m;
}

TEST(SolvePartition, WithTheOptimizerStepAndBackwardTransientsEqualsBruteForce) {
  const cost::Cluster cluster = TestCluster(2, 2);
  ExpectSolverMatchesBruteForce({2, 2, {1, 8, 2, plan::PipelineSchedule::k1F1B}, {4}}, cluster, SteppedModel(2, 2));
  for (const Partition& p : {Partition{2, 3}, Partition{4, 1}})
    ExpectSolverMatchesBruteForce({3, 2, {2, 8, 4, plan::PipelineSchedule::k1F1B}, p}, cluster, SteppedModel(3, 2));
  ExpectSolverMatchesBruteForce({2, 4, {2, 4, 1, plan::PipelineSchedule::k1F1B}, {2, 4}}, cluster, SteppedModel(2, 4));
  ExpectSolverMatchesBruteForce({3, 3, {4, 8, 4, plan::PipelineSchedule::k1F1B}, {2, 2, 1, 1}}, cluster, SteppedModel(3, 3));
}

TEST(SolvePartition, OneStageEqualsBruteForce) {
  const cost::Cluster cluster = TestCluster(2, 2);
  ExpectSolverMatchesBruteForce({2, 2, {1, 8, 1, plan::PipelineSchedule::k1F1B}, {4}}, cluster);
  ExpectSolverMatchesBruteForce({3, 1, {1, 8, 2, plan::PipelineSchedule::k1F1B}, {4}}, cluster);
  ExpectSolverMatchesBruteForce({1, 3, {1, 4, 4, plan::PipelineSchedule::k1F1B}, {4}}, cluster);
}

TEST(SolvePartition, TwoStagesEqualBruteForce) {
  const cost::Cluster cluster = TestCluster(2, 2);
  for (const Partition& p : {Partition{2, 3}, Partition{3, 2}, Partition{4, 1}}) {
    ExpectSolverMatchesBruteForce({3, 2, {2, 8, 4, plan::PipelineSchedule::k1F1B}, p}, cluster);
    ExpectSolverMatchesBruteForce({3, 2, {2, 8, 2, plan::PipelineSchedule::kGPipe}, p}, cluster);
  }
  ExpectSolverMatchesBruteForce({2, 4, {2, 8, 8, plan::PipelineSchedule::k1F1B}, {3, 3}}, cluster);
  ExpectSolverMatchesBruteForce({2, 4, {2, 4, 1, plan::PipelineSchedule::k1F1B}, {2, 4}}, cluster);
}

TEST(SolvePartition, FourStagesEqualBruteForce) {
  const cost::Cluster cluster = TestCluster(2, 2);
  ExpectSolverMatchesBruteForce({3, 3, {4, 8, 4, plan::PipelineSchedule::k1F1B}, {2, 2, 1, 1}}, cluster);
  ExpectSolverMatchesBruteForce({3, 3, {4, 8, 8, plan::PipelineSchedule::kGPipe}, {1, 1, 2, 2}}, cluster);
}

TEST(SolvePartition, ReportsInfeasibleBelowTheSmallestPeak) {
  const cost::Cluster cluster = TestCluster(2, 2);
  const cost::LayerModel model = TwoTypeModel(2, 2);
  const LayerTypes types = GroupLayerTypes(model);
  const cost::CostModel cm = TestCostModel(cluster);
  MeshCache meshes;
  const PipelineConfig config{2, 8, 4, plan::PipelineSchedule::k1F1B};
  Result<CostTables> t = CostTables::Build({&model, &types, &cluster, &cm}, 2, 2, {}, meshes);
  ASSERT_TRUE(t.ok());
  const StagePeakBounds bounds(*t, config, {});
  const int64_t smallest = bounds.Peak({2, 2});
  const std::vector<Outcome> outcomes = AllOutcomes(model, cluster, MakeLayerPlan(*t, config, {2, 2}, {0, 0, 0, 0}));
  EXPECT_EQ(smallest, InterestingBudgets(outcomes).front());  // StagePeakBounds is exact
  EXPECT_TRUE(SolvePartition({&*t, config, {2, 2}, smallest, {}}).feasible);
  const PartitionSolution none = SolvePartition({&*t, config, {2, 2}, smallest - 1, {}});
  EXPECT_FALSE(none.feasible);
  EXPECT_FALSE(none.cut_off);
}

TEST(LinearPartition, MinimizesTheLargestStage) {
  const std::vector<double> w = {5, 1, 1, 1, 4, 4};
  auto cost = [&](int, int first, int count) {
    double sum = 0;
    for (int i = first; i < first + count; ++i) sum += w[static_cast<size_t>(i)];
    return sum;
  };
  EXPECT_EQ(LinearPartition(6, 3, cost), (Partition{2, 3, 1}));  // {5,1} {1,1,4} {4}: max 6
  EXPECT_EQ(AllPartitions(4, 2), (std::vector<Partition>{{1, 3}, {2, 2}, {3, 1}}));
  EXPECT_EQ(AllPartitions(6, 3).size(), 10u);
}

// The smallest largest stage over every partition (brute force).
double BruteForceMinMax(int layers, int stages, const std::function<double(int, int, int)>& cost) {
  double best = std::numeric_limits<double>::infinity();
  for (const Partition& p : AllPartitions(layers, stages)) {
    double worst = 0;
    for (int s = 0, first = 0; s < stages; first += p[static_cast<size_t>(s)], ++s)
      worst = std::max(worst, cost(s, first, p[static_cast<size_t>(s)]));
    best = std::min(best, worst);
  }
  return best;
}

// Issue 18: a 10,000-layer hybrid search ran for minutes past a 5 s limit in these DPs. Pruning for
// growing costs (memory) must not change the answer, ties included.
TEST(LinearPartition, GrowingCostsArePrunedWithoutChangingTheAnswer) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int layers = 1 + static_cast<int>(rng() % 9);
    const int stages = 1 + static_cast<int>(rng() % static_cast<unsigned>(std::min(layers, 4)));
    std::vector<double> w(static_cast<size_t>(layers)), v(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = static_cast<double>(rng() % 4);  // small integers: many ties
      v[i] = static_cast<double>(rng() % 6);
    }
    auto cost = [&](int s, int first, int count) {  // a sum and a maximum, per stage: grows with the stage
      double sum = 0, most = 0;
      for (int i = first; i < first + count; ++i) {
        sum += w[static_cast<size_t>(i)];
        most = std::max(most, v[static_cast<size_t>(i)]);
      }
      return (sum + most) * (1.0 + 0.5 * s);
    };
    const Partition pruned = LinearPartition(layers, stages, cost, /*grows=*/true);
    EXPECT_EQ(pruned, LinearPartition(layers, stages, cost)) << "trial " << trial;
    double worst = 0;
    for (int s = 0, first = 0; s < stages; first += pruned[static_cast<size_t>(s)], ++s)
      worst = std::max(worst, cost(s, first, pruned[static_cast<size_t>(s)]));
    EXPECT_EQ(worst, BruteForceMinMax(layers, stages, cost)) << "trial " << trial;
  }
}

TEST(LinearPartition, PastItsDeadlineGivesTheEvenPartition) {
  auto cost = [](int, int, int count) { return static_cast<double>(count); };
  const Clock::time_point past = Clock::now() - std::chrono::seconds(1);
  EXPECT_EQ(LinearPartition(2000, 3, cost, false, past), EvenPartition(2000, 3));
  EXPECT_EQ(LinearPartition(2000, 3, cost, true, Clock::time_point::max()), (Partition{667, 667, 666}));
}

// The memory-balanced partition (range maxima of the transients in O(1)) minimizes the largest stage
// peak of Eq. 1 as EstimatePipeline states it, over every partition.
TEST(MemoryBalancedPartition, MinimizesTheLargestStagePeak) {
  std::mt19937 rng(5);
  const cost::LayerModel model = TwoTypeModel(4, 3);
  const LayerTypes types = GroupLayerTypes(model);
  const cost::Cluster cluster = TestCluster(2, 4);
  const cost::CostModel cm = TestCostModel(cluster);
  for (int pp : {2, 4}) {
    MeshCache meshes;
    Result<CostTables> t = CostTables::Build({&model, &types, &cluster, &cm}, pp, 4, {}, meshes);
    ASSERT_TRUE(t.ok()) << t.error().message;
    const PipelineConfig config{pp, 16, 4, plan::PipelineSchedule::k1F1B};
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<int> strategies;
      for (size_t i = 0; i < model.layers.size(); ++i)
        strategies.push_back(static_cast<int>(rng() % static_cast<unsigned>(t->num_strategies())));
      int64_t best = std::numeric_limits<int64_t>::max();
      for (const Partition& p : AllPartitions(static_cast<int>(model.layers.size()), pp))
        best = std::min(best, EstimatePipeline(*t, config, p, strategies).peak_memory_bytes);
      const Partition balanced = MemoryBalancedPartition(*t, config, strategies);
      EXPECT_EQ(EstimatePipeline(*t, config, balanced, strategies).peak_memory_bytes, best) << "pp " << pp;
    }
  }
}

}  // namespace
}  // namespace kiwi::solve::hybrid
