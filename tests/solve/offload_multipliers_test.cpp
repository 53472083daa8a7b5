// The pipeline solver's weighted runs price each stage's optimizer step with its own multiplier:
// offloading (the step on the host) must not make a partition's plan worse than the plan without it.
// The case is the one that found this: DeepSeek-V2 on 128 H100s, 16 stages of 512 micro-batches,
// where one weight for both maxima let a stage without weight offload for free, the weighted runs
// never met their bound, and the exact run had to thin its labels and give up with a slower plan
// (with the weight shared: 26.48 s with offloading, 25.77 s without, since Megatron's expert TP under
// SP is priced; proving this partition optimal now needs more than the weighted runs, both thinned).
#include <gtest/gtest.h>

#include "kiwi/cost/cluster.h"
#include "kiwi/models/layer_model.h"
#include "kiwi/models/presets.h"
#include "kiwi/solve/hybrid/partition.h"
#include "kiwi/solve/hybrid/pipeline_solver.h"
#include "kiwi/solve/hybrid/search.h"
#include "kiwi/solve/remat/recompute_frontier.h"

namespace kiwi::solve::hybrid {
namespace {

TEST(SolvePartition, OffloadingInTheSpaceKeepsThePlanWithoutIt) {
  Result<cost::Cluster> cluster = cost::ClusterPreset("dgx-h100:16");
  ASSERT_TRUE(cluster.ok()) << cluster.error().message;
  const cost::CostModel cm(cluster->device);
  Result<models::ModelSpec> spec = models::LoadModel("deepseek-v2");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  Result<cost::LayerModel> model = models::BuildSpecLayerModel(*spec, cm);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const LayerTypes types = GroupLayerTypes(*model);
  // The search's space (search.cpp): TP within a node, with offloading and recompute sets.
  StrategySpaceOptions space = SpaceOf(Method::kKiwi, cluster->NumDevices(), static_cast<int>(model->layers.size())).strategies;
  space.max_tp = cluster->devices_per_node;
  space.experts = model->MaxExperts();
  space.context_sequence = model->ContextParallelSequence();
  space.allow_offload = true;
  space.recompute_sets = remat::CommonRecomputeSets(types.profiles, 2);
  MeshCache meshes;
  const PipelineConfig config{16, 1024, 512, plan::PipelineSchedule::k1F1B};
  Result<CostTables> t = CostTables::Build({&*model, &types, &*cluster, &cm}, config.pp, config.Microbatch(), space, meshes);
  ASSERT_TRUE(t.ok()) << t.error().message;
  std::vector<bool> on_device(static_cast<size_t>(t->num_strategies()));
  bool any_offload = false;
  for (int j = 0; j < t->num_strategies(); ++j) {
    on_device[static_cast<size_t>(j)] = !t->strategies()[static_cast<size_t>(j)].offload;
    any_offload |= t->strategies()[static_cast<size_t>(j)].offload;
  }
  ASSERT_TRUE(any_offload);
  const Partition partition{4, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3};
  const int64_t budget = cluster->device.memory_bytes;
  const PartitionSolution without = SolvePartition({&*t, config, partition, budget, on_device});
  const PartitionSolution with = SolvePartition({&*t, config, partition, budget, {}});
  ASSERT_TRUE(without.feasible && with.feasible);
  EXPECT_LE(with.estimate.iteration_seconds, without.estimate.iteration_seconds * (1 + 1e-9));
}

}  // namespace
}  // namespace kiwi::solve::hybrid
