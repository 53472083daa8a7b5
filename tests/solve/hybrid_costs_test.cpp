// The search's cost tables must price every assignment exactly as the layer simulator (the judge)
// does: per-stage micro-batch time, gradient sync, memory, Eq. 8's iteration time.
#include "kiwi/solve/hybrid/layer_costs.h"

#include <gtest/gtest.h>

#include <random>

#include "hybrid_test_util.h"
#include "kiwi/solve/hybrid/partition.h"
#include "kiwi/solve/hybrid/search.h"

namespace kiwi::solve::hybrid {
namespace {

using testing::TestCluster;
using testing::TestCostModel;
using testing::TwoTypeModel;

TEST(GroupLayerTypes, IdenticalProfilesShareAType) {
  const LayerTypes t = GroupLayerTypes(TwoTypeModel(3, 2));
  EXPECT_EQ(t.num_types(), 2);
  EXPECT_EQ(t.type_of, (std::vector<int>{0, 0, 0, 1, 1}));
}

TEST(CostTables, LeaveOutStrategiesWhoseDpDoesNotDivideTheMicroBatch) {
  const cost::LayerModel model = TwoTypeModel(2, 2);
  const LayerTypes types = GroupLayerTypes(model);
  const cost::Cluster cluster = TestCluster(2, 4);
  const cost::CostModel cm = TestCostModel(cluster);
  MeshCache meshes;
  Result<CostTables> t = CostTables::Build({&model, &types, &cluster, &cm}, 1, 6, {}, meshes);
  ASSERT_TRUE(t.ok()) << t.error().message;
  for (const plan::LayerStrategy& s : t->strategies()) EXPECT_EQ(6 % s.dp, 0);
  EXPECT_EQ(t->num_strategies(), 6);  // tp 4 (dp 2, DP/SDP) and tp 8 (dp 1), each with and without CKPT
  EXPECT_EQ(t->num_layouts(), 8);  // DP 1, 2, 4, 8, each whole or sequence-split
}

// Random assignments, partitions and pipeline shapes: the tables' estimate equals the simulator's.
void ExpectEstimatesMatchSimulator(const cost::Cluster& cluster, const cost::LayerModel& model, int pp, int64_t batch,
                                   int micro_batches, plan::PipelineSchedule schedule, std::mt19937& rng) {
  const LayerTypes types = GroupLayerTypes(model);
  const cost::CostModel cm = TestCostModel(cluster);
  MeshCache meshes;
  // kiwi's whole per-layer space: ZeRO-1/2 and sequence parallelism beside Galvatron-BMW's strategies
  const StrategySpaceOptions space = SpaceOf(Method::kKiwi, cluster.NumDevices(), 1).strategies;
  Result<CostTables> t = CostTables::Build({&model, &types, &cluster, &cm}, pp, batch / micro_batches, space, meshes);
  ASSERT_TRUE(t.ok()) << t.error().message;
  const PipelineConfig config{pp, batch, micro_batches, schedule};
  const std::vector<Partition> partitions = AllPartitions(static_cast<int>(model.layers.size()), pp);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int> strategies;
    for (size_t i = 0; i < model.layers.size(); ++i)
      strategies.push_back(static_cast<int>(rng() % static_cast<unsigned>(t->num_strategies())));
    const Partition& partition = partitions[rng() % partitions.size()];
    const PipelineEstimate e = EstimatePipeline(*t, config, partition, strategies);
    const plan::LayerPlan plan = MakeLayerPlan(*t, config, partition, strategies);
    Result<sim::LayerSimResult> r = sim::SimulateLayerPlan(model, plan, cluster, cm);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(e.peak_memory_bytes, r->summary.peak_memory_bytes);
    EXPECT_NEAR(e.iteration_seconds, r->summary.iteration_seconds, 1e-12 * r->summary.iteration_seconds);
    for (size_t s = 0; s < r->stages.size(); ++s) {
      EXPECT_EQ(e.stage_memory[s], r->stages[s].peak_memory_bytes) << "stage " << s;
      EXPECT_NEAR(e.stage_seconds[s], r->stages[s].microbatch_seconds, 1e-12 * r->stages[s].microbatch_seconds);
      EXPECT_NEAR(e.sync_seconds[s], r->stages[s].gradient_sync_seconds, 1e-12);
    }
  }
}

TEST(EstimatePipeline, MatchesTheSimulatorOnRandomAssignments) {
  std::mt19937 rng(7);
  const cost::LayerModel model = TwoTypeModel(4, 3);
  ExpectEstimatesMatchSimulator(TestCluster(2, 2), model, 1, 16, 1, plan::PipelineSchedule::k1F1B, rng);
  ExpectEstimatesMatchSimulator(TestCluster(2, 2), model, 1, 16, 4, plan::PipelineSchedule::k1F1B, rng);
  ExpectEstimatesMatchSimulator(TestCluster(2, 2), model, 2, 16, 4, plan::PipelineSchedule::k1F1B, rng);
  ExpectEstimatesMatchSimulator(TestCluster(2, 4), model, 2, 32, 2, plan::PipelineSchedule::kGPipe, rng);
  ExpectEstimatesMatchSimulator(TestCluster(2, 4), model, 4, 32, 8, plan::PipelineSchedule::k1F1B, rng);
  ExpectEstimatesMatchSimulator(TestCluster(1, 4), model, 4, 8, 2, plan::PipelineSchedule::k1F1B, rng);
}

TEST(EstimatePipeline, MatchesTheSimulatorOnAPresetCluster) {
  std::mt19937 rng(11);
  Result<cost::Cluster> cluster = cost::ClusterPreset("a100-nvlink-ib-16");
  ASSERT_TRUE(cluster.ok());
  ExpectEstimatesMatchSimulator(*cluster, TwoTypeModel(3, 3), 2, 64, 4, plan::PipelineSchedule::k1F1B, rng);
  ExpectEstimatesMatchSimulator(*cluster, TwoTypeModel(3, 3), 1, 64, 2, plan::PipelineSchedule::k1F1B, rng);
}

TEST(InFlight, FollowsTheSchedules) {
  const PipelineConfig one_f_one_b{4, 32, 8, plan::PipelineSchedule::k1F1B};
  EXPECT_EQ(InFlight(one_f_one_b, 0), 4);
  EXPECT_EQ(InFlight(one_f_one_b, 3), 1);
  const PipelineConfig few{4, 32, 2, plan::PipelineSchedule::k1F1B};
  EXPECT_EQ(InFlight(few, 0), 2);
  const PipelineConfig gpipe{4, 32, 8, plan::PipelineSchedule::kGPipe};
  EXPECT_EQ(InFlight(gpipe, 3), 8);
}

}  // namespace
}  // namespace kiwi::solve::hybrid
