#include "kiwi/sim/pipeline_timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace kiwi::sim {
namespace {

using Kind = TimelineBlock::Kind;

cost::Cluster OneNode(int devices) {
  cost::Cluster c;
  c.name = "test";
  c.device.name = "dev";
  c.device.memory_bytes = int64_t{1} << 40;
  c.device.memory_bandwidth = 1e12;
  c.device.SetPeakFlops(ir::DType::kF32, 1e12);
  c.devices_per_node = devices;
  c.intra_node = {"fast", 1e9, 0.0};
  c.inter_node = {"slow", 1e8, 0.0};
  return c;
}

// Identical layers sending nothing between stages (no boundary bytes): every stage's passes equal.
cost::LayerModel EqualLayers(int n) {
  cost::LayerModel m;
  for (int i = 0; i < n; ++i) {
    cost::LayerProfile p;
    p.name = "layer" + std::to_string(i);
    p.parameter_bytes = 1'000;
    p.activation_bytes_per_sample = 100;
    p.forward_seconds_per_sample = 1e-3;
    p.backward_seconds_per_sample = 2e-3;
    m.layers.push_back(p);
  }
  return m;
}

plan::LayerPlan Pipeline(int layers, int pp, int m, int v, plan::PipelineSchedule schedule) {
  plan::LayerPlan p;
  p.layers.assign(static_cast<size_t>(layers), plan::LayerStrategy{});
  p.pp_degree = pp;
  p.virtual_stages = v;
  p.pp_partition.assign(static_cast<size_t>(pp * v), layers / (pp * v));
  p.global_batch = m;
  p.micro_batches = m;
  p.pipeline = schedule;
  return p;
}

// Every stage runs each (chunk, micro-batch) forward and backward once, one pass at a time, a
// forward after the previous chunk's, a backward after the next chunk's.
void ExpectAValidSchedule(const PipelineTimeline& t, const plan::LayerPlan& plan) {
  const int pp = plan.pp_degree, v = plan.virtual_stages, m = plan.micro_batches;
  std::map<std::tuple<bool, int, int>, const TimelineBlock*> pass;  // forward?, global chunk, micro-batch
  std::vector<std::vector<const TimelineBlock*>> by_stage(static_cast<size_t>(pp));
  for (const TimelineBlock& b : t.blocks) {
    if (b.kind != Kind::kForward && b.kind != Kind::kBackward) continue;
    const auto key = std::tuple{b.kind == Kind::kForward, b.chunk * pp + b.stage, b.micro_batch};
    EXPECT_FALSE(pass.count(key)) << "a pass twice";
    pass[key] = &b;
    by_stage[static_cast<size_t>(b.stage)].push_back(&b);
  }
  EXPECT_EQ(pass.size(), static_cast<size_t>(2 * pp * v * m));
  for (auto& blocks : by_stage) {
    std::sort(blocks.begin(), blocks.end(), [](const TimelineBlock* a, const TimelineBlock* b) { return a->start < b->start; });
    for (size_t i = 1; i < blocks.size(); ++i) EXPECT_GE(blocks[i]->start, blocks[i - 1]->end - 1e-15);
  }
  const int last = pp * v - 1;
  for (const auto& [key, b] : pass) {
    const auto [forward, g, i] = key;
    if (forward && g > 0) {
      EXPECT_GE(b->start, pass.at({true, g - 1, i})->end - 1e-15);
    } else if (!forward) {
      EXPECT_GE(b->start, pass.at(g == last ? std::tuple{true, g, i} : std::tuple{false, g + 1, i})->end - 1e-15);
    }
  }
}

// With equal stages the replay ends when Galvatron-BMW's Eq. 8 says (and its interleaved form,
// Narayanan et al. 2021: (m + (pp - 1) / v) stage micro-batches): the simulator and the figure agree.
TEST(ReplayPipeline, EqualStagesEndWhereTheSimulatorSays) {
  for (const auto& [layers, pp, m, v, schedule] :
       {std::tuple{4, 1, 3, 1, plan::PipelineSchedule::k1F1B}, std::tuple{4, 2, 4, 1, plan::PipelineSchedule::k1F1B},
        std::tuple{8, 4, 8, 1, plan::PipelineSchedule::k1F1B}, std::tuple{8, 4, 3, 1, plan::PipelineSchedule::k1F1B},
        std::tuple{8, 4, 8, 1, plan::PipelineSchedule::kGPipe}, std::tuple{8, 2, 4, 2, plan::PipelineSchedule::k1F1B},
        std::tuple{16, 4, 8, 2, plan::PipelineSchedule::k1F1B}, std::tuple{16, 2, 4, 4, plan::PipelineSchedule::k1F1B}}) {
    SCOPED_TRACE(testing::Message() << "pp " << pp << " m " << m << " v " << v);
    const cost::Cluster cluster = OneNode(pp);
    const plan::LayerPlan plan = Pipeline(layers, pp, m, v, schedule);
    Result<LayerSimResult> r = SimulateLayerPlan(EqualLayers(layers), plan, cluster, cost::CostModel(cluster.device));
    ASSERT_TRUE(r) << r.error().message;
    Result<PipelineTimeline> t = ReplayPipeline(plan, *r);
    ASSERT_TRUE(t) << t.error().message;
    ExpectAValidSchedule(*t, plan);
    EXPECT_NEAR(t->makespan, r->summary.iteration_seconds, 1e-12);
    // the bubble the simulator reports is the fill and drain: (pp - 1) / v stage micro-batches
    EXPECT_NEAR(r->pipeline_bubble_seconds, (pp - 1.0) / v * r->stages[0].microbatch_seconds, 1e-12);
  }
}

// The gradient sync follows each stage's last pass, the optimizer steps after every stage's sync.
TEST(ReplayPipeline, SyncAndStepCloseTheIteration) {
  const cost::Cluster cluster = OneNode(4);
  cost::LayerModel model = EqualLayers(4);
  model.state_bytes_per_parameter_byte = 3.0;
  model.optimizer = "adam";
  model.optimizer_tensors_per_parameter = 4.0;
  plan::LayerPlan plan = Pipeline(4, 2, 4, 1, plan::PipelineSchedule::k1F1B);
  for (plan::LayerStrategy& s : plan.layers) s.dp = 2;
  plan.global_batch = 8;
  Result<LayerSimResult> r = SimulateLayerPlan(model, plan, cluster, cost::CostModel(cluster.device));
  ASSERT_TRUE(r) << r.error().message;
  Result<PipelineTimeline> t = ReplayPipeline(plan, *r);
  ASSERT_TRUE(t) << t.error().message;
  double passes_end = 0.0, step_start = -1.0;
  int steps = 0;
  for (const TimelineBlock& b : t->blocks) {
    if (b.kind == Kind::kForward || b.kind == Kind::kBackward) passes_end = std::max(passes_end, b.end);
    if (b.kind == Kind::kOptimizerStep) {
      ++steps;
      EXPECT_EQ(b.micro_batch, -1);
      EXPECT_NEAR(b.end - b.start, r->stages[static_cast<size_t>(b.stage)].optimizer_seconds, 1e-15);
      step_start = b.start;
    }
  }
  EXPECT_EQ(steps, 2);
  EXPECT_GE(step_start, passes_end);
  // a plan and a result of different shapes are refused
  plan::LayerPlan other = plan;
  other.pp_degree = 4;
  EXPECT_FALSE(ReplayPipeline(other, *r));
}

}  // namespace
}  // namespace kiwi::sim
