// Operator-level refinement inside a layer plan (solve/layer_refinement.h): one layer per strategy,
// as planned beside KIWI within its memory, every plan replayed by the simulator.
#include "kiwi/solve/layer_refinement.h"

#include <gtest/gtest.h>

#include "kiwi/ir/layer_subgraph.h"
#include "kiwi/sim/simulator.h"

namespace kiwi::solve {
namespace {

struct Fixture {
  models::ModelSpec spec;
  cost::Cluster cluster;
  cost::CostModel cost_model{cost::DeviceSpec{}};
};

Fixture Small() {
  Fixture f;
  Result<models::ModelSpec> spec =
      models::LoadModel("gpt", {.layers = 6, .hidden = 64, .heads = 4, .seq = 32, .batch = 8, .vocab = 100});
  EXPECT_TRUE(spec.ok());
  f.spec = *spec;
  Result<cost::Cluster> c = cost::ClusterPreset("v100-nvlink-8");
  EXPECT_TRUE(c.ok());
  f.cluster = *c;
  f.cost_model = cost::CostModel(f.cluster.device);
  return f;
}

plan::LayerStrategy Tp(int tp, int dp) {
  plan::LayerStrategy s;
  s.tp = tp;
  s.dp = dp;
  return s;
}

// Six layers, five strategies (two layers share the first): none, whole-layer checkpointing, Megatron's
// selective recomputation, a recompute set, context parallelism on a 2x2 group.
plan::LayerPlan MixedPlan() {
  plan::LayerPlan p;
  p.global_batch = 8;
  p.micro_batches = 2;
  plan::LayerStrategy ckpt = Tp(2, 4), sel = Tp(2, 4), set = Tp(1, 4), cp = Tp(2, 4);
  ckpt.checkpoint = true;
  sel.selective_recompute = true;
  set.recompute = {"mlp.act"};
  cp.cp = 2;
  p.layers = {Tp(2, 4), Tp(2, 4), ckpt, sel, set, cp};
  return p;
}

TEST(RefineLayerPlan, KiwiIsNeverSlowerWithinTheMemoryAsPlannedAndTheSimulatorAgrees) {
  const Fixture f = Small();
  Result<std::vector<LayerRefinement>> r = RefineLayerPlan(f.spec, MixedPlan(), f.cluster, f.cost_model, {.threads = 1});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 5u);
  EXPECT_EQ((*r)[0].first_layer, 0);
  EXPECT_EQ((*r)[0].layers, 2);
  const std::vector<std::vector<int>> meshes = {{2}, {2}, {2}, {1}, {2, 2}};
  for (size_t i = 0; i < r->size(); ++i) {
    const LayerRefinement& x = (*r)[i];
    SCOPED_TRACE(plan::StrategyName(x.strategy));
    ASSERT_TRUE(x.skipped.empty()) << x.skipped;
    EXPECT_EQ(x.mesh_shape, meshes[i]);
    // Micro-batch of 4 samples over the strategy's replicas (dp / cp).
    EXPECT_EQ(x.micro_batch, 4 / x.strategy.Replicas());
    ASSERT_TRUE(x.baseline.feasible);
    ASSERT_TRUE(x.refined.feasible);
    EXPECT_LE(x.refined.seconds(), x.baseline.seconds() * (1 + 1e-9));
    EXPECT_LE(x.refined.sim.peak_memory_bytes, x.baseline.sim.peak_memory_bytes);
    EXPECT_GE(x.Speedup(), 1.0 - 1e-9);
    // Both plans replay to what they report, on the layer's own graph and mesh.
    Result<ir::DeviceMesh> mesh = f.cluster.MakeMesh(x.mesh_shape);
    ASSERT_TRUE(mesh.ok());
    for (const solve::joint::JointResult* j : {&x.baseline, &x.refined}) {
      Result<sim::SimResult> replay = sim::SimulateOperatorPlan(x.graph, j->plan, f.cost_model, *mesh);
      ASSERT_TRUE(replay.ok()) << replay.error().message;
      EXPECT_DOUBLE_EQ(replay->iteration_seconds, j->sim.iteration_seconds);
      EXPECT_EQ(replay->peak_memory_bytes, j->sim.peak_memory_bytes);
    }
  }
  // As planned: no recomputation without one; the checkpointed layer recomputes the most.
  EXPECT_EQ((*r)[0].baseline.sim.recomputations, 0);
  EXPECT_EQ((*r)[4].baseline.sim.recomputations, 0);
  for (size_t i : {1, 2, 3}) EXPECT_GT((*r)[i].baseline.sim.recomputations, 0) << i;
  EXPECT_GT((*r)[1].baseline.sim.recomputations, (*r)[2].baseline.sim.recomputations);
  EXPECT_GT((*r)[1].baseline.sim.recomputations, (*r)[3].baseline.sim.recomputations);
  // The layer's graph is the training graph's layer at the micro-batch.
  Result<models::ModelSpec> at4 = models::LoadModel("gpt", {.layers = 6, .hidden = 64, .heads = 4, .seq = 32, .batch = 2, .vocab = 100});
  ASSERT_TRUE(at4.ok());
  Result<ir::Graph> whole = models::BuildTrainingGraph(*at4);
  ASSERT_TRUE(whole.ok());
  Result<ir::Graph> layer2 = ir::LayerSubgraph(*whole, 2);
  ASSERT_TRUE(layer2.ok());
  EXPECT_EQ((*r)[1].graph.size(), layer2->size());
}

// Where memory is tight as planned (the whole layer recomputed), deciding sharding and recomputation
// per operator finds a faster plan in the same memory.
TEST(RefineLayerPlan, FindsAFasterPlanThanWholeLayerCheckpointing) {
  const Fixture f = Small();
  plan::LayerPlan p;
  p.global_batch = 8;
  p.layers = std::vector<plan::LayerStrategy>(6, Tp(1, 1));
  for (plan::LayerStrategy& s : p.layers) s.checkpoint = true;
  Result<std::vector<LayerRefinement>> r = RefineLayerPlan(f.spec, p, f.cluster, f.cost_model, {.threads = 1});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ(r->front().layers, 6);
  EXPECT_GT(r->front().Speedup(), 1.01);
  ::testing::Test::RecordProperty("speedup", std::to_string(r->front().Speedup()));
}

TEST(RefineLayerPlan, SaysWhatItDoesNotRefine) {
  const Fixture f = Small();
  plan::LayerPlan p;
  p.global_batch = 8;
  plan::LayerStrategy ep = Tp(1, 8), unknown = Tp(1, 8);
  ep.ep = 2;
  unknown.recompute = {"mlp.no_such_op"};
  p.layers = {ep, unknown, Tp(1, 8), Tp(1, 8), Tp(1, 8), Tp(1, 8)};
  Result<std::vector<LayerRefinement>> r = RefineLayerPlan(f.spec, p, f.cluster, f.cost_model, {.threads = 1});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 3u);
  EXPECT_NE((*r)[0].skipped.find("expert parallelism"), std::string::npos) << (*r)[0].skipped;
  EXPECT_NE((*r)[1].skipped.find("'mlp.no_such_op'"), std::string::npos) << (*r)[1].skipped;
  EXPECT_TRUE((*r)[2].skipped.empty());
  // No time: nothing refined, each strategy says so.
  Result<std::vector<LayerRefinement>> none =
      RefineLayerPlan(f.spec, p, f.cluster, f.cost_model, {.time_limit_seconds = 0.0, .threads = 1});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)[2].skipped, "the time limit was spent");
}

// A device so slow that an operator takes beyond what operator sharding plans with (as a profile's
// 1e9 s op time): the layer is not refined, the row says why, and nothing fails.
TEST(RefineLayerPlan, LeavesALayerItCannotPriceUnrefined) {
  Fixture f = Small();
  cost::DeviceSpec slow = f.cluster.device;
  slow.peak_flops.fill(1e-3);
  slow.memory_bandwidth = 1e-3;
  f.cost_model = cost::CostModel(slow);
  plan::LayerPlan p;
  p.global_batch = 8;
  p.layers = std::vector<plan::LayerStrategy>(6, Tp(1, 8));
  Result<std::vector<LayerRefinement>> r = RefineLayerPlan(f.spec, p, f.cluster, f.cost_model, {.threads = 1});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 1u);
  EXPECT_NE(r->front().skipped.find("cannot be built"), std::string::npos) << r->front().skipped;
}

TEST(RefineLayerPlan, RefusesAPlanItCannotCut) {
  const Fixture f = Small();
  plan::LayerPlan p;
  p.global_batch = 8;
  p.micro_batches = 3;
  p.layers = std::vector<plan::LayerStrategy>(6, Tp(1, 8));
  Result<std::vector<LayerRefinement>> r = RefineLayerPlan(f.spec, p, f.cluster, f.cost_model, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  EXPECT_NE(r.error().message.find("3 micro-batches"), std::string::npos) << r.error().message;
  p.micro_batches = 1;
  p.layers = std::vector<plan::LayerStrategy>(6, Tp(1, 3));  // 8 samples over 3 replicas
  r = RefineLayerPlan(f.spec, p, f.cluster, f.cost_model, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  p.layers = std::vector<plan::LayerStrategy>(7, Tp(1, 8));  // the model has 6
  r = RefineLayerPlan(f.spec, p, f.cluster, f.cost_model, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  p.layers.clear();
  r = RefineLayerPlan(f.spec, p, f.cluster, f.cost_model, {});
  ASSERT_FALSE(r.ok());
  p.layers = std::vector<plan::LayerStrategy>(6, Tp(1, 8));
  r = RefineLayerPlan(f.spec, p, f.cluster, f.cost_model, {.time_limit_seconds = -1.0});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
}

}  // namespace
}  // namespace kiwi::solve
