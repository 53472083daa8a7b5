// The search's cost tables must price every assignment exactly as the layer simulator (the judge)
// does: per-stage micro-batch time, gradient sync, memory, Eq. 8's iteration time.
#include "kiwi/solve/hybrid/layer_costs.h"

#include <gtest/gtest.h>

#include <numeric>
#include <optional>
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
// Interleaved (virtual_stages > 1): one round's tables, its assignments repeated in every chunk.
void ExpectEstimatesMatchSimulator(const cost::Cluster& cluster, const cost::LayerModel& model, int pp, int64_t batch,
                                   int micro_batches, plan::PipelineSchedule schedule, std::mt19937& rng,
                                   int virtual_stages = 1) {
  const LayerTypes types = GroupLayerTypes(model);
  const LayerTypes rounds = RoundTypes(types, virtual_stages);
  const cost::CostModel cm = TestCostModel(cluster);
  MeshCache meshes;
  // kiwi's whole per-layer space: ZeRO-1/2 and sequence parallelism beside Galvatron-BMW's strategies
  StrategySpaceOptions space = SpaceOf(Method::kKiwi, cluster.NumDevices(), 1).strategies;
  space.allow_offload = cluster.device.HasHost() && !model.optimizer.empty();  // as the search does, asked to
  Result<CostTables> base = CostTables::Build({&model, &types, &cluster, &cm}, pp, batch / micro_batches, space, meshes);
  ASSERT_TRUE(base.ok()) << base.error().message;
  const std::optional<CostTables> t =
      virtual_stages > 1 ? CostTables::Interleaved(*base, virtual_stages, rounds) : std::move(*base);
  const PipelineConfig config{pp, batch, micro_batches, schedule, virtual_stages};
  const int layers = static_cast<int>(model.layers.size()) / virtual_stages;
  const std::vector<Partition> partitions = AllPartitions(layers, pp);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int> strategies;
    for (int i = 0; i < layers; ++i)
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
      if (t->MemoryExact()) continue;
      // The DP adds the tables' rows (with the largest layer's headroom, no activations freed before a
      // backward: CostTables::interleaved): an upper bound on the stage's memory when the copies differ.
      cost::StageMemory rows;
      const int first = std::accumulate(partition.begin(), partition.begin() + static_cast<std::ptrdiff_t>(s), 0);
      for (int i = first; i < first + partition[s]; ++i) rows += t->LayerCost(i, strategies[static_cast<size_t>(i)]).memory;
      EXPECT_GE(rows.AdditiveBytes(InFlight(config, static_cast<int>(s))) + rows.layer_headroom +
                    cost::ReservedBytes(cluster.device),
                e.stage_memory[s]);
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
  // With a host and an optimizer step: offloaded layers among them.
  cost::Cluster hosted = TestCluster(2, 2);
  hosted.device.host_link_bandwidth = 1e10;
  hosted.device.host_memory_bandwidth = 5e10;
  cost::LayerModel stepped = model;
  stepped.optimizer = "adam";
  ExpectEstimatesMatchSimulator(hosted, stepped, 1, 16, 4, plan::PipelineSchedule::k1F1B, rng);
  ExpectEstimatesMatchSimulator(hosted, stepped, 2, 16, 4, plan::PipelineSchedule::k1F1B, rng);
}

// Interleaved 1F1B: 8 layers in 2 rounds of 4 (one type: the copies alike, memory exact) and
// 4 + 4 of two types in 2 rounds (each round layer an encoder and a decoder: the DP's memory a bound),
// 6 layers in 3 rounds of 2.
TEST(EstimatePipeline, MatchesTheSimulatorInterleaved) {
  std::mt19937 rng(13);
  ExpectEstimatesMatchSimulator(TestCluster(2, 2), TwoTypeModel(8, 0), 2, 16, 4, plan::PipelineSchedule::k1F1B, rng, 2);
  ExpectEstimatesMatchSimulator(TestCluster(2, 2), TwoTypeModel(4, 4), 2, 16, 8, plan::PipelineSchedule::k1F1B, rng, 2);
  ExpectEstimatesMatchSimulator(TestCluster(2, 4), TwoTypeModel(8, 0), 4, 32, 8, plan::PipelineSchedule::k1F1B, rng, 2);
  ExpectEstimatesMatchSimulator(TestCluster(2, 2), TwoTypeModel(6, 0), 2, 16, 4, plan::PipelineSchedule::k1F1B, rng, 3);
}

TEST(RoundTypes, ARoundLayersTypeIsItsCopiesTypes) {
  const LayerTypes model = GroupLayerTypes(TwoTypeModel(3, 3));  // types 0 0 0 1 1 1
  const LayerTypes two = RoundTypes(model, 2);                    // (0, 1) (0, 1) (0, 1)
  EXPECT_EQ(two.type_of, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(two.num_types(), 1);
  const LayerTypes three = RoundTypes(model, 3);  // (0, 0, 1) (0, 1, 1)
  EXPECT_EQ(three.type_of, (std::vector<int>{0, 1}));
  EXPECT_EQ(RoundTypes(GroupLayerTypes(TwoTypeModel(4, 0)), 2).type_of, (std::vector<int>{0, 0}));
}

// The DP's memory is the schedule's when every chunk keeps the same activations: copies alike, and no
// embeddings or head that keep any; otherwise a bound.
TEST(CostTables, InterleavedMemoryIsExactWhenTheChunksKeepTheSame) {
  const cost::Cluster cluster = TestCluster(2, 2);
  const cost::CostModel cm = TestCostModel(cluster);
  auto exact = [&](const cost::LayerModel& model) {
    const LayerTypes types = GroupLayerTypes(model);
    const LayerTypes rounds = RoundTypes(types, 2);
    MeshCache meshes;
    Result<CostTables> base = CostTables::Build({&model, &types, &cluster, &cm}, 2, 4, {}, meshes);
    EXPECT_TRUE(base.ok());
    return base.ok() && CostTables::Interleaved(*base, 2, rounds).MemoryExact();
  };
  auto bare = [](cost::LayerModel m) {  // embeddings and head that keep no activations
    m.embedding.activation_bytes_per_sample = m.head.activation_bytes_per_sample = 0;
    m.embedding.boundary_bytes_per_sample = m.head.boundary_bytes_per_sample = 0;
    return m;
  };
  EXPECT_TRUE(exact(bare(TwoTypeModel(8, 0))));
  EXPECT_FALSE(exact(TwoTypeModel(8, 0)));          // the first and last chunks keep more
  EXPECT_FALSE(exact(bare(TwoTypeModel(7, 1))));    // the last layer differs
  EXPECT_FALSE(exact(bare(TwoTypeModel(4, 4))));    // every round layer an encoder and a decoder
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
  const PipelineConfig interleaved{4, 32, 8, plan::PipelineSchedule::k1F1B, 2};  // chunk-micro-batches
  EXPECT_EQ(InFlight(interleaved, 0), 11);
  EXPECT_EQ(InFlight(interleaved, 3), 5);
}

}  // namespace
}  // namespace kiwi::solve::hybrid
