// Hand-computed checks of the layer-level (Galvatron-BMW) simulator on a 4-layer model with round
// numbers and clusters with zero latency: ring all-reduce of n bytes over p devices at B bytes/s is
// 2(p-1) n/(pB), all-gather and reduce-scatter (p-1) n/(pB), point-to-point n/B (cost/collectives.h).
#include "kiwi/sim/layer_simulator.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kiwi::sim {
namespace {

using namespace kiwi::cost;  // the layer model and its per-layer terms (cost/layer_profile.h, layer_cost.h)

using plan::LayerPlan;
using plan::LayerStrategy;

constexpr double kFast = 1e9;  // intra-node bytes/s
constexpr double kSlow = 1e8;  // inter-node bytes/s
constexpr double kEps = 1e-12;

cost::Cluster TestCluster(int nodes, int per_node) {
  cost::Cluster c;
  c.name = "test";
  c.device.name = "dev";
  c.device.memory_bytes = int64_t{1} << 40;
  c.device.memory_bandwidth = 1e12;
  c.device.SetPeakFlops(ir::DType::kF32, 1e12);
  c.num_nodes = nodes;
  c.devices_per_node = per_node;
  c.intra_node = {"fast", kFast, 0.0};
  c.inter_node = {"slow", kSlow, 0.0};
  return c;
}

cost::CostModel TestCostModel(const cost::Cluster& c) {
  cost::CostModelOptions options;
  options.overlap_slowdown = 1.3;
  return cost::CostModel(c.device, options);
}

// 4 identical layers: 1 MB of parameters, 10 kB of activations and 1 kB of output per sample,
// 1 ms forward and 2 ms backward per sample, fp32 Adam (3 state bytes per parameter byte).
LayerModel FourLayers() {
  LayerModel m;
  m.name = "four";
  for (int i = 0; i < 4; ++i) {
    LayerProfile p;
    p.name = "layer" + std::to_string(i);
    p.parameter_bytes = 1'000'000;
    p.activation_bytes_per_sample = 10'000;
    p.boundary_bytes_per_sample = 1'000;
    p.forward_seconds_per_sample = 1e-3;
    p.backward_seconds_per_sample = 2e-3;
    p.tp_comm_bytes_per_sample = 2'000;
    m.layers.push_back(p);
  }
  m.state_bytes_per_parameter_byte = 3.0;
  return m;
}

LayerPlan UniformPlan(LayerStrategy s, int64_t global_batch, int micro_batches) {
  LayerPlan plan;
  plan.layers.assign(4, s);
  plan.global_batch = global_batch;
  plan.micro_batches = micro_batches;
  return plan;
}

LayerSimResult Simulate(const LayerModel& model, const LayerPlan& plan, const cost::Cluster& cluster) {
  Result<LayerSimResult> r = SimulateLayerPlan(model, plan, cluster, TestCostModel(cluster));
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : LayerSimResult{};
}

TEST(SimulateLayerPlan, PureDataParallelOneStage) {
  const cost::Cluster cluster = TestCluster(1, 4);
  const LayerSimResult r = Simulate(FourLayers(), UniformPlan({.tp = 1, .dp = 4}, 16, 1), cluster);
  // 4 layers x 1 MB x (1 + 3) model states + 4 layers x 10 kB x 4 samples.
  EXPECT_EQ(r.summary.peak_memory_bytes, 16'000'000 + 160'000);
  EXPECT_EQ(r.summary.peak_memory_per_device, std::vector<int64_t>(4, 16'160'000));
  // Compute: 4 layers x 3 ms x 4 samples. Gradient all-reduce of 1 MB over 4: 6 x 1e6/4e9 = 1.5 ms,
  // overlapped with an 8 ms backward at slowdown 1.3: 0.3 x 1.5 ms unhidden per layer.
  EXPECT_NEAR(r.summary.time.compute, 0.048, kEps);
  EXPECT_NEAR(r.summary.time.communication, 4 * 0.3 * 1.5e-3, kEps);
  EXPECT_NEAR(r.summary.time.recompute, 0.0, kEps);
  EXPECT_NEAR(r.summary.iteration_seconds, 0.048 + 1.8e-3, kEps);
  EXPECT_NEAR(r.throughput_samples_per_second, 16 / 0.0498, 1e-6);
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_EQ(r.stages[0].layers, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NEAR(r.stages[0].microbatch_seconds, 0.048, kEps);
  EXPECT_NEAR(r.stages[0].gradient_sync_seconds, 1.8e-3, kEps);
}

// The optimizer step runs once per iteration over each device's model states, as PyTorch's Adam moves
// memory (4.5x the bytes read once), on every stage at once after the flush: the slowest stage counts.
TEST(SimulateLayerPlan, OptimizerStepOverEachDevicesModelStatesOnTheSlowestStage) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerModel with = FourLayers();
  with.optimizer = "adam";
  const double bandwidth = 1e12 * cost::CostModelOptions{}.memory_efficiency;
  // One stage, DP 4: every device steps all 4 layers' 4 MB of model states.
  LayerPlan dp = UniformPlan({.tp = 1, .dp = 4}, 16, 1);
  const double dp_step = 4 * 4e6 * 4.5 / bandwidth;
  EXPECT_NEAR(Simulate(with, dp, cluster).summary.iteration_seconds,
              Simulate(FourLayers(), dp, cluster).summary.iteration_seconds + dp_step, kEps);
  EXPECT_NEAR(Simulate(with, dp, cluster).summary.time.compute, 0.048 + dp_step, kEps);
  // ZeRO-3 shards the states over the 4 devices: a quarter of the step.
  LayerPlan sdp = UniformPlan({.tp = 1, .dp = 4, .zero = plan::Zero::kParameters}, 16, 1);
  EXPECT_NEAR(Simulate(with, sdp, cluster).summary.iteration_seconds,
              Simulate(FourLayers(), sdp, cluster).summary.iteration_seconds + dp_step / 4, kEps);
  // ZeRO-1 and ZeRO-2 step their shard too, then all-gather it (the iteration's communication).
  for (plan::Zero zero : {plan::Zero::kOptimizerStates, plan::Zero::kGradients}) {
    LayerPlan sharded = UniformPlan({.tp = 1, .dp = 4, .zero = zero}, 16, 1);
    const LayerSimResult r = Simulate(with, sharded, cluster);
    EXPECT_NEAR(r.summary.iteration_seconds, Simulate(FourLayers(), sharded, cluster).summary.iteration_seconds + dp_step / 4, kEps);
    EXPECT_NEAR(r.summary.time.compute, 0.048 + dp_step / 4, kEps);
  }
  // Two stages of 3 and 1 layers (DP 2 each): the 3-layer stage's step, not the sum of both.
  LayerPlan pp = UniformPlan({.tp = 1, .dp = 2}, 16, 2);
  pp.pp_degree = 2;
  pp.pp_partition = {3, 1};
  EXPECT_NEAR(Simulate(with, pp, cluster).summary.iteration_seconds,
              Simulate(FourLayers(), pp, cluster).summary.iteration_seconds + 3 * 4e6 * 4.5 / bandwidth, kEps);
}

// A measured per-tensor cost (PyTorch's for-loop Adam launches ~18 ops per parameter) counts every
// parameter tensor's inputs (itself, its gradient, its 2 moments), as the op-level optimizer node does;
// ZeRO-3 steps one flat shard per layer.
TEST(SimulateLayerPlan, OptimizerStepPaysPerTensorWorkOfEachParameterTensor) {
  const cost::Cluster cluster = TestCluster(1, 4);
  cost::Profile profile;
  profile.device.optimizer_tensor_seconds["adam"] = 1e-5;
  const cost::CostModel priced(cluster.device, TestCostModel(cluster).options(), profile);
  LayerModel with = FourLayers();
  with.optimizer = "adam";
  with.optimizer_tensors_per_parameter = 4.0;
  for (LayerProfile& p : with.layers) p.parameter_tensors = 3;
  LayerModel without = with;
  without.optimizer_tensors_per_parameter = 0.0;
  auto seconds = [&](const LayerModel& m, const LayerPlan& plan) {
    Result<LayerSimResult> r = SimulateLayerPlan(m, plan, cluster, priced);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->summary.iteration_seconds : 0.0;
  };
  const LayerPlan dp = UniformPlan({.tp = 1, .dp = 4}, 16, 1);
  EXPECT_NEAR(seconds(with, dp) - seconds(without, dp), 4 * 3 * 4 * 1e-5, kEps);
  const LayerPlan tp = UniformPlan({.tp = 2, .dp = 2}, 16, 1);  // TP shards bytes, not tensor counts
  EXPECT_NEAR(seconds(with, tp) - seconds(without, tp), 4 * 3 * 4 * 1e-5, kEps);
  const LayerPlan sdp = UniformPlan({.tp = 1, .dp = 4, .zero = plan::Zero::kParameters}, 16, 1);
  EXPECT_NEAR(seconds(with, sdp) - seconds(without, sdp), 4 * 1 * 4 * 1e-5, kEps);
}

TEST(SimulateLayerPlan, MicroBatchesOnOneStageShrinkActivationsNotTime) {
  const cost::Cluster cluster = TestCluster(1, 4);
  const LayerSimResult r = Simulate(FourLayers(), UniformPlan({.tp = 1, .dp = 4}, 16, 2), cluster);
  // 2 samples per device per micro-batch, one micro-batch in flight.
  EXPECT_EQ(r.summary.peak_memory_bytes, 16'000'000 + 80'000);
  // Eq. 8 with one stage: m x C + unhidden sync (4 ms backward still hides all but 0.3 x 1.5 ms).
  EXPECT_NEAR(r.stages[0].microbatch_seconds, 0.024, kEps);
  EXPECT_NEAR(r.summary.iteration_seconds, 2 * 0.024 + 1.8e-3, kEps);
}

TEST(SimulateLayerPlan, TensorParallelHalvesParamsAndActivationsAndAddsAllReduces) {
  const cost::Cluster one = TestCluster(1, 1);
  const cost::Cluster two = TestCluster(1, 2);
  const LayerSimResult single = Simulate(FourLayers(), UniformPlan({.tp = 1, .dp = 1}, 16, 1), one);
  const LayerSimResult tp = Simulate(FourLayers(), UniformPlan({.tp = 2, .dp = 1}, 16, 1), two);
  EXPECT_EQ(single.summary.peak_memory_bytes, 16'000'000 + 640'000);
  EXPECT_EQ(tp.summary.peak_memory_bytes, 8'000'000 + 320'000);
  EXPECT_EQ(tp.summary.peak_memory_per_device.size(), 2u);
  EXPECT_NEAR(single.summary.iteration_seconds, 0.192, kEps);
  // 4 all-reduces per layer of 1 kB x 16 samples over 2 devices: 2 x 16000 / 2e9 = 16 us each.
  EXPECT_NEAR(tp.summary.time.compute, 0.096, kEps);
  EXPECT_NEAR(tp.summary.time.communication, 4 * 4 * 16e-6, kEps);
  EXPECT_NEAR(tp.summary.iteration_seconds, 0.096 + 256e-6, kEps);
}

// FourLayers with Megatron's whole-on-every-TP-rank parts: 4 kB of each sample's 10 kB of activations
// (Korthikanti's 10sbh of 34sbh) and 200 kB of parameters (layernorms, row-parallel biases).
LayerModel FourLayersWithReplicatedParts() {
  LayerModel m = FourLayers();
  for (LayerProfile& p : m.layers) {
    p.replicated_activation_bytes_per_sample = 4'000;
    p.replicated_parameter_bytes = 200'000;
  }
  return m;
}

// Megatron sequence parallelism (Korthikanti et al. 2023 §4.2.2): the 4 kB TP keeps whole are split too
// (a layer's 16 samples: 6 kB x 16 / 2 + 4 kB x 16 without, 10 kB x 16 / 2 with), each all-reduce of
// 16 kB becomes an all-gather + reduce-scatter of 16 kB (8 us each over 2 devices: the all-reduce's
// 16 us), the backward gathers each column-parallel linear's input again (2 more all-gathers), and the
// replicated parameters' 200 kB gradient is all-reduced over TP once (200 us).
TEST(SimulateLayerPlan, SequenceParallelSplitsWhatTpKeepsWholeWithTheSameTraffic) {
  const cost::Cluster two = TestCluster(1, 2);
  const LayerModel model = FourLayersWithReplicatedParts();
  const LayerPlan tp = UniformPlan({.tp = 2, .dp = 1}, 16, 1);
  const LayerPlan sp = UniformPlan({.tp = 2, .dp = 1, .sequence_parallel = true}, 16, 1);
  EXPECT_EQ(plan::StrategyName(sp.layers[0]), "SP-TP2");
  const LayerSimResult without = Simulate(model, tp, two);
  const LayerSimResult with = Simulate(model, sp, two);
  EXPECT_EQ(without.summary.peak_memory_bytes - with.summary.peak_memory_bytes, 4 * ((48'000 + 64'000) - 80'000));
  EXPECT_NEAR(without.summary.time.communication, 4 * 4 * 16e-6, kEps);
  EXPECT_NEAR(with.stages[0].gradient_sync_seconds, 4 * 200e-6, kEps);  // in the iteration's communication
  EXPECT_NEAR(with.summary.time.communication, 4 * 10 * 8e-6 + 4 * 200e-6, kEps);
  EXPECT_NEAR(with.summary.iteration_seconds, without.summary.iteration_seconds + 4 * (2 * 8e-6 + 200e-6), kEps);
  Result<PlanTraffic> t = LayerPlanTraffic(model, sp, two);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->layers[0].tp_all_reduce_bytes, 0);
  EXPECT_EQ(t->layers[0].sp_all_gather_bytes, 6 * 16'000);
  EXPECT_EQ(t->layers[0].sp_reduce_scatter_bytes, 4 * 16'000);
  EXPECT_EQ(t->layers[0].sp_collectives, 10);
  EXPECT_EQ(t->layers[0].sp_gradient_all_reduce_bytes, 200'000);
  // Under ZeRO-2 (and 3) each micro-batch's gradients are reduce-scattered whole: the replicated ones
  // are summed over TP first, in every micro-batch (4 here), as communication of the micro-batch.
  const cost::Cluster four = TestCluster(1, 4);
  const LayerPlan zero2 = UniformPlan({.tp = 2, .dp = 2, .zero = plan::Zero::kGradients, .sequence_parallel = true}, 16, 4);
  t = LayerPlanTraffic(model, zero2, four);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->layers[0].sp_gradient_all_reduce_bytes, 4 * 200'000);
  LayerPlan zero1 = zero2;
  for (LayerStrategy& s : zero1.layers) s.zero = plan::Zero::kOptimizerStates;
  t = LayerPlanTraffic(model, zero1, four);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->layers[0].sp_gradient_all_reduce_bytes, 200'000);
  // Without TP there is no sequence to split: the flag changes nothing.
  const cost::Cluster one = TestCluster(1, 1);
  EXPECT_EQ(Simulate(model, UniformPlan({.tp = 1, .dp = 1, .sequence_parallel = true}, 16, 1), one).summary.peak_memory_bytes,
            Simulate(model, UniformPlan({.tp = 1, .dp = 1}, 16, 1), one).summary.peak_memory_bytes);
}

// A checkpointed sequence-parallel layer keeps its input's sequence shard (1 kB x 16 / 2) and brings
// back its intermediates split the same way (9 kB x 16 / 2, where TP alone brings the 3 kB it keeps
// whole back whole); its recomputation repeats the forward all-gathers and reduce-scatters.
TEST(SimulateLayerPlan, SequenceParallelCheckpointKeepsTheInputsShard) {
  const cost::Cluster cluster = TestCluster(1, 2);
  const LayerModel model = FourLayersWithReplicatedParts();
  const int64_t states = 4 * (800'000 / 2 + 200'000) * 4;
  const LayerSimResult tp = Simulate(model, UniformPlan({.tp = 2, .dp = 1, .checkpoint = true}, 16, 1), cluster);
  EXPECT_EQ(tp.summary.peak_memory_bytes, states + 4 * 16'000 + 6'000 * 16 / 2 + 3'000 * 16);
  const LayerSimResult sp =
      Simulate(model, UniformPlan({.tp = 2, .dp = 1, .checkpoint = true, .sequence_parallel = true}, 16, 1), cluster);
  EXPECT_EQ(sp.summary.peak_memory_bytes, states + 4 * 8'000 + 9'000 * 16 / 2);
  EXPECT_NEAR(sp.summary.time.recompute, 4 * (8e-3 + 4 * 8e-6), kEps);
}

// Between a sequence-parallel layer and one of another layout the boundary (1 kB x 16) is all-gathered
// over TP: forward when the sequence-parallel layer comes first, its input gradient backward when it
// comes second (8 us over 2 devices). With a DP change too, that adds to Slice-Gather's own gather.
TEST(SimulateLayerPlan, SequenceGatherBetweenLayouts) {
  const cost::Cluster two = TestCluster(1, 2);
  const LayerModel model = FourLayers();
  LayerPlan plan = UniformPlan({.tp = 2, .dp = 1}, 16, 1);
  plan.layers[0].sequence_parallel = plan.layers[1].sequence_parallel = true;
  EXPECT_NEAR(Simulate(model, plan, two).summary.time.resharding, 8e-6, kEps);
  Result<PlanTraffic> t = LayerPlanTraffic(model, plan, two);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->layers[2].sequence_gather_bytes, 16'000);
  EXPECT_EQ(t->layers[2].sequence_gather_backward_bytes, 0);
  EXPECT_EQ(t->layers[1].sequence_gather_bytes, 0);
  for (LayerStrategy& s : plan.layers) s.sequence_parallel = !s.sequence_parallel;
  EXPECT_NEAR(Simulate(model, plan, two).summary.time.resharding, 8e-6, kEps);
  t = LayerPlanTraffic(model, plan, two);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->layers[2].sequence_gather_backward_bytes, 16'000);
  for (LayerStrategy& s : plan.layers) s.sequence_parallel = true;
  EXPECT_NEAR(Simulate(model, plan, two).summary.time.resharding, 0.0, kEps);
  // SP-TP2xDP2 into DP4 on 4 devices: the 8 samples' boundary gathered over TP forward (4 us), and the
  // DP growth's backward gather of their gradient from 2 devices (4 us).
  const cost::Cluster four = TestCluster(1, 4);
  plan.layers.assign(4, {.tp = 1, .dp = 4});
  plan.layers[0] = plan.layers[1] = {.tp = 2, .dp = 2, .sequence_parallel = true};
  EXPECT_NEAR(Simulate(model, plan, four).summary.time.resharding, 4e-6 + 4e-6, kEps);
}

// Under sequence parallelism the embeddings reduce-scatter their output (g) and all-gather its gradient;
// the head all-gathers its input (f), reduce-scatters its gradient and gathers the input again for the
// weight gradient; the loss's statistics stay all-reduces. Micro-batch 4: 4 kB each, 2 us per gather or
// scatter over 2 devices.
TEST(SimulateLayerPlan, EmbeddingAndHeadUnderSequenceParallelism) {
  const cost::Cluster cluster = TestCluster(1, 2);
  LayerModel model = FourLayers();
  model.embedding.parameter_bytes = 500'000;
  model.embedding.tp_forward_all_reduce_bytes_per_sample = {1'000};
  model.embedding.tp_forward_g_operators = 1;
  model.head.parameter_bytes = 300'000;
  model.head.tp_forward_all_reduce_bytes_per_sample = {10, 10, 10};
  model.head.tp_backward_all_reduce_bytes_per_sample = {1'000};
  model.head.tp_backward_f_operators = 1;
  const LayerPlan plan = UniformPlan({.tp = 2, .dp = 1, .sequence_parallel = true}, 4, 1);
  Result<PlanTraffic> t = LayerPlanTraffic(model, plan, cluster);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->embedding.tp_all_reduces, 0);
  EXPECT_EQ(t->embedding.sp_reduce_scatter_bytes, 4'000);
  EXPECT_EQ(t->embedding.sp_all_gather_bytes, 4'000);
  EXPECT_EQ(t->head.tp_all_reduces, 3);
  EXPECT_EQ(t->head.tp_all_reduce_bytes, 3 * 40);
  EXPECT_EQ(t->head.sp_all_gather_bytes, 2 * 4'000);
  EXPECT_EQ(t->head.sp_reduce_scatter_bytes, 4'000);
  EXPECT_NEAR(Simulate(model, plan, cluster).summary.iteration_seconds - Simulate(FourLayers(), plan, cluster).summary.iteration_seconds,
              2 * 2e-6 + 3 * 40e-9 + 3 * 2e-6, kEps);
}

// Each TP rank of a sequence-parallel layer sends only its sequence shard to the next stage.
TEST(SimulateLayerPlan, SequenceParallelStagesSendTheirShards) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerPlan plan = UniformPlan({.tp = 2, .dp = 1}, 16, 1);
  plan.pp_degree = 2;
  plan.pp_partition = {2, 2};
  Result<PlanTraffic> t = LayerPlanTraffic(FourLayers(), plan, cluster);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->send_forward_bytes[0], 16'000);
  for (LayerStrategy& s : plan.layers) s.sequence_parallel = true;
  t = LayerPlanTraffic(FourLayers(), plan, cluster);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->send_forward_bytes[0], 8'000);
  EXPECT_EQ(t->send_backward_bytes[1], 8'000);
}

TEST(SimulateLayerPlan, TensorParallelRunsInsideANodeAndDataParallelAcrossNodes) {
  // Two nodes of two devices, tp = 2, dp = 2: the stage mesh is {dp 2, tp 2}, TP on NVLink-like links.
  const cost::Cluster cluster = TestCluster(2, 2);
  const cost::CostModel cm = TestCostModel(cluster);
  const LayerSimResult r = Simulate(FourLayers(), UniformPlan({.tp = 2, .dp = 2}, 16, 1), cluster);
  // 8 samples per device: compute 3 ms x 8 / 2 per layer; 4 all-reduces of 8 kB over the fast link.
  EXPECT_NEAR(r.stages[0].microbatch_seconds, 4 * (12e-3 + 4 * (2 * 8000 / (2 * kFast))), kEps);
  // The gradient all-reduce of the 0.5 MB TP shard runs over the slow axis 0, behind an 8 ms backward.
  Result<ir::DeviceMesh> mesh = cluster.MakeMesh({2, 2});
  ASSERT_TRUE(mesh.ok());
  const double sync = cm.CollectiveTime(cost::Collective::kAllReduce, 500'000, *mesh, ir::AxisBit(0));
  EXPECT_GT(sync, 2 * 500'000 / (2 * kFast));
  EXPECT_NEAR(r.stages[0].gradient_sync_seconds, 4 * (cm.OverlappedTime(8e-3, sync) - 8e-3), kEps);
}

TEST(SimulateLayerPlan, ShardedDataParallelDividesModelStates) {
  const cost::Cluster cluster = TestCluster(1, 4);
  const LayerSimResult r = Simulate(FourLayers(), UniformPlan({.tp = 1, .dp = 4, .zero = plan::Zero::kParameters}, 16, 1), cluster);
  // States / 4, plus one layer's gathered parameters (1 MB), plus activations.
  EXPECT_EQ(r.summary.peak_memory_bytes, 4'000'000 + 1'000'000 + 160'000);
  // Two all-gathers of 1 MB over 4 per layer: 3 x 1e6/4e9 = 0.75 ms each; reduce-scatter 0.75 ms
  // overlapped with the 8 ms backward: 0.3 x 0.75 ms unhidden, in the micro-batch (ZeRO-3
  // reduce-scatters every micro-batch), none left for the once-per-iteration sync.
  EXPECT_NEAR(r.stages[0].microbatch_seconds, 0.048 + 4 * 2 * 0.75e-3 + 4 * 0.3 * 0.75e-3, kEps);
  EXPECT_NEAR(r.stages[0].gradient_sync_seconds, 0.0, kEps);
  EXPECT_NEAR(r.summary.iteration_seconds, 0.048 + 6e-3 + 0.9e-3, kEps);
}

// ZeRO's model states per device (Rajbhandari et al. 2020, Figure 1: (2 + 2 + K) Psi / N_d for P_os+g+p),
// here per 1 MB layer with 1 byte of gradients and 2 of Adam states per parameter byte, over 4 ranks:
// DP 4 MB, ZeRO-1 1 + 1 + 2/4 = 2.5 MB, ZeRO-2 1 + 3/4 = 1.75 MB plus one layer's whole gradient
// until its reduce-scatter, ZeRO-3 1 MB plus one layer's gathered parameters.
TEST(SimulateLayerPlan, ZeroStagesShardStatesAsTheZeroPaperCounts) {
  const cost::Cluster cluster = TestCluster(1, 4);
  auto peak = [&](plan::Zero zero) {
    return Simulate(FourLayers(), UniformPlan({.tp = 1, .dp = 4, .zero = zero}, 16, 1), cluster).summary.peak_memory_bytes;
  };
  const int64_t activations = 4 * 4 * 10'000;  // 4 samples per device, 4 layers
  EXPECT_EQ(peak(plan::Zero::kNone), 16'000'000 + activations);
  EXPECT_EQ(peak(plan::Zero::kOptimizerStates), 10'000'000 + activations);
  EXPECT_EQ(peak(plan::Zero::kGradients), 7'000'000 + 1'000'000 + activations);
  EXPECT_EQ(peak(plan::Zero::kParameters), 4'000'000 + 1'000'000 + activations);
  // Mixed precision (2 gradient bytes, 12 of fp32 master weights and Adam states per 2 parameter
  // bytes: 1 + 6): ZeRO-2 keeps 1 + 7/4 = 2.75 MB a layer, ZeRO-1 1 + 1 + 6/4 = 3.5 MB.
  LayerModel mixed = FourLayers();
  mixed.state_bytes_per_parameter_byte = 7.0;
  auto mixed_peak = [&](plan::Zero zero) {
    return Simulate(mixed, UniformPlan({.tp = 1, .dp = 4, .zero = zero}, 16, 1), cluster).summary.peak_memory_bytes;
  };
  EXPECT_EQ(mixed_peak(plan::Zero::kOptimizerStates), 14'000'000 + activations);
  EXPECT_EQ(mixed_peak(plan::Zero::kGradients), 11'000'000 + 1'000'000 + activations);
  // A ZeRO stage over one rank shards nothing: the same plan as DP 1.
  const cost::Cluster one = TestCluster(1, 1);
  EXPECT_EQ(Simulate(FourLayers(), UniformPlan({.tp = 1, .dp = 1, .zero = plan::Zero::kGradients}, 16, 1), one)
                .summary.iteration_seconds,
            Simulate(FourLayers(), UniformPlan({.tp = 1, .dp = 1}, 16, 1), one).summary.iteration_seconds);
}

// Under PyTorch's FSDP2 a ZeRO-3 layer running its backward pass also holds the next layer's prefetched
// all-gather output (cost::ZeroRuntime::kFsdp2): 1 MB of parameters twice and 1 MB of gradient, where
// kiwi's runtime holds the larger of its own two. Over two micro-batches the first one's gradient shards
// (1/4 MB a layer) are there throughout the second; in a step of one they arrive as the activations go,
// and a layer holds the larger of its shard and its activations (here the shard: 10 kB of activations a
// sample, 4 samples a rank).
TEST(SimulateLayerPlan, Fsdp2HoldsThePrefetchedLayerAndTheGradientShardsInTheActivationsPlace) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerModel fsdp2 = FourLayers();
  fsdp2.zero_runtime = cost::ZeroRuntime::kFsdp2;
  auto peak = [&](const LayerModel& m, int micro_batches) {
    return Simulate(m, UniformPlan({.tp = 1, .dp = 4, .zero = plan::Zero::kParameters}, 16, micro_batches), cluster)
        .summary.peak_memory_bytes;
  };
  const int64_t states = 4 * (250'000 + 500'000), shards = 4 * 250'000;  // parameters and optimizer states
  EXPECT_EQ(peak(fsdp2, 2), states + shards + 3'000'000 + 4 * 2 * 10'000);
  EXPECT_EQ(peak(fsdp2, 2) - peak(FourLayers(), 2), 2'000'000);
  EXPECT_EQ(peak(fsdp2, 1), states + 4 * std::max<int64_t>(250'000, 4 * 10'000) + 3'000'000);
  // Time is the runtime's concern no more than the ZeRO stage's traffic: unchanged.
  EXPECT_EQ(Simulate(fsdp2, UniformPlan({.tp = 1, .dp = 4, .zero = plan::Zero::kParameters}, 16, 1), cluster)
                .summary.iteration_seconds,
            Simulate(FourLayers(), UniformPlan({.tp = 1, .dp = 4, .zero = plan::Zero::kParameters}, 16, 1), cluster)
                .summary.iteration_seconds);
}

// FSDP2 runs DP and ZeRO-1/2 layers too (DP as shards of one rank): each keeps its parameters' shard
// beside the whole copy gathered at the first forward pass (1 + 1/4 MB a layer under ZeRO, 2 MB under DP).
// In the last backward pass a layer's copy goes as its reduced gradient (shard) comes, so one micro-batch
// holds no gradients beside the copies but the running layer's whole one (1 MB); with two, DP and ZeRO-1
// hold the accumulated whole gradients (1 MB a layer), ZeRO-2 their shards (1/4) and the running layer's
// whole one. Optimizer states 2 MB a layer, over 4 under ZeRO. Measured on FSDP2 (docs/distributed.md).
TEST(SimulateLayerPlan, Fsdp2KeepsShardsBesideTheGatheredCopyAndAccumulatesOverMicroBatches) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerModel fsdp2 = FourLayers();
  fsdp2.zero_runtime = cost::ZeroRuntime::kFsdp2;
  auto peak = [&](plan::Zero zero, int micro_batches) {
    return Simulate(fsdp2, UniformPlan({.tp = 1, .dp = 4, .zero = zero}, 16, micro_batches), cluster)
        .summary.peak_memory_bytes;
  };
  const int64_t one = 4 * 4 * 10'000, two = 4 * 2 * 10'000;  // activations of 4 layers
  EXPECT_EQ(peak(plan::Zero::kNone, 1), 4 * (2'000'000 + 2'000'000) + 1'000'000 + one);
  EXPECT_EQ(peak(plan::Zero::kNone, 2), 4 * (2'000'000 + 1'000'000 + 2'000'000) + two);
  EXPECT_EQ(peak(plan::Zero::kOptimizerStates, 1), 4 * (1'250'000 + 500'000) + 1'000'000 + one);
  EXPECT_EQ(peak(plan::Zero::kOptimizerStates, 2), 4 * (1'250'000 + 1'000'000 + 500'000) + two);
  EXPECT_EQ(peak(plan::Zero::kGradients, 1), 4 * (1'250'000 + 500'000) + 1'000'000 + one);
  EXPECT_EQ(peak(plan::Zero::kGradients, 2), 4 * (1'250'000 + 250'000 + 500'000) + 1'000'000 + two);
  // kiwi's own runtime keeps no shard beside the parameters: DP 4 MB a layer (ZeroStagesShardStates...).
  EXPECT_EQ(Simulate(FourLayers(), UniformPlan({.tp = 1, .dp = 4}, 16, 2), cluster).summary.peak_memory_bytes,
            16'000'000 + two);
}

// A layer FSDP2 does not wrap (no DP: here TP 4) makes its gradient in its backward pass as its activations
// go: under kiwi.torch.parallelize a step of one micro-batch peaks at the start of the backward pass with no
// gradient there, so a layer holds the larger of its activations and its gradient (here the gradient: 1/4 MB
// against 16 samples x 10 kB / 4); with two micro-batches the first one's gradients are there throughout.
// kiwi's own runtime keeps its gradients beside the activations. Measured on HF GPT-2 at TP 4: 11.6% below
// kiwi's count before (docs/distributed.md).
TEST(SimulateLayerPlan, TorchMakesTheGradientsOfAOneMicroBatchStepAsTheActivationsGo) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerModel torch = FourLayers();
  torch.zero_runtime = cost::ZeroRuntime::kFsdp2;
  auto split = [&](const LayerModel& m, int micro_batches) {
    return Simulate(m, UniformPlan({.tp = 4, .dp = 1}, 16, micro_batches), cluster).stages[0].memory;
  };
  const StageMemorySplit one = split(torch, 1), own = split(FourLayers(), 1), two = split(torch, 2);
  EXPECT_EQ(one.gradients, 0);
  EXPECT_EQ(own.gradients, 4 * 250'000);
  EXPECT_EQ(one.activations, 4 * std::max<int64_t>(250'000, 16 * 10'000 / 4));
  EXPECT_EQ(own.activations, 4 * 16 * 10'000 / 4);
  EXPECT_EQ(two.gradients, 4 * 250'000);
  EXPECT_EQ(two.activations, split(FourLayers(), 2).activations);
}

// ZeRO-1 reduce-scatters the accumulated gradients once, in the last micro-batch (as DP all-reduces
// them); ZeRO-2 every micro-batch (it keeps no whole gradients). Both all-gather the updated
// parameters after the step: 1 MB over 4 ranks, 0.75 ms a layer, after every stage's last micro-batch.
TEST(SimulateLayerPlan, ZeroOneAndTwoReduceScatterAndGatherAfterTheStep) {
  const cost::Cluster cluster = TestCluster(1, 4);
  const double unhidden = 4 * 0.3 * 0.75e-3;  // each layer's reduce-scatter behind its backward
  const double gather = 4 * 0.75e-3;
  const LayerPlan zero1 = UniformPlan({.tp = 1, .dp = 4, .zero = plan::Zero::kOptimizerStates}, 16, 2);
  const LayerSimResult r1 = Simulate(FourLayers(), zero1, cluster);
  EXPECT_NEAR(r1.stages[0].microbatch_seconds, 0.024, kEps);
  EXPECT_NEAR(r1.stages[0].gradient_sync_seconds, unhidden, kEps);
  EXPECT_NEAR(r1.summary.iteration_seconds, 2 * 0.024 + unhidden + gather, kEps);
  EXPECT_NEAR(r1.summary.time.communication, unhidden + gather, kEps);
  const LayerPlan zero2 = UniformPlan({.tp = 1, .dp = 4, .zero = plan::Zero::kGradients}, 16, 2);
  const LayerSimResult r2 = Simulate(FourLayers(), zero2, cluster);
  EXPECT_NEAR(r2.stages[0].microbatch_seconds, 0.024 + unhidden, kEps);
  EXPECT_NEAR(r2.stages[0].gradient_sync_seconds, 0.0, kEps);
  EXPECT_NEAR(r2.summary.iteration_seconds, 2 * (0.024 + unhidden) + gather, kEps);
  // Bytes per device and iteration: DP's all-reduce volume split into a reduce-scatter and an all-gather.
  Result<PlanTraffic> t1 = LayerPlanTraffic(FourLayers(), zero1, cluster);
  Result<PlanTraffic> t2 = LayerPlanTraffic(FourLayers(), zero2, cluster);
  ASSERT_TRUE(t1.ok() && t2.ok());
  EXPECT_EQ(t1->layers[0].sdp_reduce_scatter_bytes, 1'000'000);
  EXPECT_EQ(t2->layers[0].sdp_reduce_scatter_bytes, 2 * 1'000'000);
  for (const PlanTraffic* t : {&*t1, &*t2}) {
    EXPECT_EQ(t->layers[0].step_all_gather_bytes, 1'000'000);
    EXPECT_EQ(t->layers[0].dp_all_reduce_bytes, 0);
    EXPECT_EQ(t->layers[0].sdp_all_gather_bytes, 0);
  }
}

// ZeRO-3 reduce-scatters each micro-batch's gradients (DeepSpeed): with 2 micro-batches the
// reduce-scatter runs twice, each overlapped with that micro-batch's 4 ms backward per layer.
TEST(SimulateLayerPlan, ShardedDataParallelReduceScattersEveryMicroBatch) {
  const cost::Cluster cluster = TestCluster(1, 4);
  const LayerPlan plan = UniformPlan({.tp = 1, .dp = 4, .zero = plan::Zero::kParameters}, 16, 2);
  const LayerSimResult r = Simulate(FourLayers(), plan, cluster);
  const double microbatch = 0.024 + 4 * 2 * 0.75e-3 + 4 * 0.3 * 0.75e-3;
  EXPECT_NEAR(r.stages[0].microbatch_seconds, microbatch, kEps);
  EXPECT_NEAR(r.summary.iteration_seconds, 2 * microbatch, kEps);
  Result<PlanTraffic> t = LayerPlanTraffic(FourLayers(), plan, cluster);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->layers[0].sdp_reduce_scatter_bytes, 2 * 1'000'000);
  EXPECT_EQ(t->layers[0].sdp_all_gather_bytes, 2 * 2 * 1'000'000);
  // DP all-reduces once per iteration whatever the micro-batches.
  t = LayerPlanTraffic(FourLayers(), UniformPlan({.tp = 1, .dp = 4}, 16, 2), cluster);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->layers[0].dp_all_reduce_bytes, 1'000'000);
}

TEST(SimulateLayerPlan, CheckpointKeepsBoundaryAndAddsOneForward) {
  const cost::Cluster cluster = TestCluster(1, 4);
  const LayerSimResult r = Simulate(FourLayers(), UniformPlan({.tp = 1, .dp = 4, .checkpoint = true}, 16, 1), cluster);
  // Boundaries 4 x 1 kB x 4 samples, plus one layer's recomputed intermediates 9 kB x 4.
  EXPECT_EQ(r.summary.peak_memory_bytes, 16'000'000 + 16'000 + 36'000);
  EXPECT_NEAR(r.summary.time.compute, 0.048, kEps);
  EXPECT_NEAR(r.summary.time.recompute, 4 * 1e-3 * 4, kEps);
  EXPECT_NEAR(r.summary.iteration_seconds, 0.048 + 0.016 + 1.8e-3, kEps);
  EXPECT_EQ(r.summary.recomputations, 4);
}

TEST(SimulateLayerPlan, CheckpointWithTensorParallelRepeatsForwardAllReduces) {
  const cost::Cluster cluster = TestCluster(1, 2);
  const LayerSimResult r = Simulate(FourLayers(), UniformPlan({.tp = 2, .dp = 1, .checkpoint = true}, 16, 1), cluster);
  // Per layer: forward 1 ms x 16 / 2 = 8 ms again, plus 2 all-reduces of 16 us.
  EXPECT_NEAR(r.summary.time.recompute, 4 * (8e-3 + 2 * 16e-6), kEps);
  EXPECT_NEAR(r.summary.time.communication, 4 * 4 * 16e-6, kEps);
  // Each layer's kept input is whole on both TP ranks (Korthikanti et al. 2023): 4 x 1 kB x 16 samples.
  EXPECT_EQ(r.summary.peak_memory_bytes, 8'000'000 + 4 * 16'000 + 9'000 * 16 / 2);
}

// The same four layers launching 10 forward and 20 backward kernels per micro-batch.
LayerModel FourLaunchingLayers() {
  LayerModel m = FourLayers();
  for (LayerProfile& p : m.layers) {
    p.forward_kernels = 10;
    p.backward_kernels = 20;
  }
  return m;
}

TEST(SimulateLayerPlan, TheDevicesReserveIsInEveryStagesPeak) {
  cost::Cluster cluster = TestCluster(2, 1);
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 1}, 8, 4);
  plan.pp_degree = 2;
  plan.pp_partition = {2, 2};
  const LayerSimResult without = Simulate(FourLayers(), plan, cluster);
  cluster.device.reserved_bytes = 123'456;
  const LayerSimResult with = Simulate(FourLayers(), plan, cluster);
  ASSERT_EQ(with.stages.size(), 2u);
  for (size_t s = 0; s < 2; ++s)
    EXPECT_EQ(with.stages[s].peak_memory_bytes, without.stages[s].peak_memory_bytes + 123'456);
  EXPECT_EQ(with.summary.peak_memory_bytes, without.summary.peak_memory_bytes + 123'456);
  EXPECT_NEAR(with.summary.iteration_seconds, without.summary.iteration_seconds, kEps);
}

TEST(SimulateLayerPlan, SmallMicroBatchesAreLaunchBound) {
  cost::Cluster cluster = TestCluster(1, 1);
  cluster.device.kernel_launch_seconds = 1e-3;  // 10 forward kernels: 10 ms > 1 ms x 1 sample
  const LayerModel model = FourLaunchingLayers();
  // 16 samples in 16 micro-batches of 1: per layer and micro-batch max(1 ms, 10 ms) + max(2 ms, 20 ms).
  const LayerSimResult small = Simulate(model, UniformPlan({.tp = 1, .dp = 1}, 16, 16), cluster);
  EXPECT_NEAR(small.summary.iteration_seconds, 16 * 4 * (10e-3 + 20e-3), kEps);
  EXPECT_NEAR(small.summary.time.compute, small.summary.iteration_seconds, kEps);
  // One micro-batch of 16: the device's 16 ms and 32 ms exceed the launches; launches cost nothing.
  const LayerSimResult large = Simulate(model, UniformPlan({.tp = 1, .dp = 1}, 16, 1), cluster);
  EXPECT_NEAR(large.summary.iteration_seconds, 4 * (16e-3 + 32e-3), kEps);
  // Checkpointing launches the forward kernels again.
  const LayerSimResult ckpt = Simulate(model, UniformPlan({.tp = 1, .dp = 1, .checkpoint = true}, 16, 16), cluster);
  EXPECT_NEAR(ckpt.summary.time.recompute, 16 * 4 * 10e-3, kEps);
  // No launch cost: the per-sample times alone, as before.
  cluster.device.kernel_launch_seconds = 0.0;
  EXPECT_NEAR(Simulate(model, UniformPlan({.tp = 1, .dp = 1}, 16, 16), cluster).summary.iteration_seconds, 0.192, kEps);
}

// A CPU's per-op dispatch (LayerProfile::forward_overhead_seconds) is paid by every pass of every
// micro-batch on every TP rank: it was in the per-sample times, so TP 2 or 4 micro-batches divided it.
TEST(SimulateLayerPlan, PerOpOverheadIsPaidWholeByEveryRankAndMicroBatch) {
  LayerModel model = FourLayers();
  for (LayerProfile& p : model.layers) {
    p.forward_overhead_seconds = 5e-3;
    p.backward_overhead_seconds = 7e-3;
  }
  // One device, 16 samples in one micro-batch: 4 x (16 x 3 ms + 12 ms).
  const LayerSimResult one = Simulate(model, UniformPlan({.tp = 1, .dp = 1}, 16, 1), TestCluster(1, 1));
  EXPECT_NEAR(one.summary.time.compute, 4 * (0.048 + 0.012), kEps);
  // 4 micro-batches of 4: the work is the same, the overhead paid 4 times.
  const LayerSimResult four = Simulate(model, UniformPlan({.tp = 1, .dp = 1}, 16, 4), TestCluster(1, 1));
  EXPECT_NEAR(four.summary.time.compute, 4 * (0.048 + 4 * 0.012), kEps);
  // TP 2 halves the work, not the overhead.
  const LayerSimResult tp = Simulate(model, UniformPlan({.tp = 2, .dp = 1}, 16, 1), TestCluster(1, 2));
  EXPECT_NEAR(tp.summary.time.compute, 4 * (0.024 + 0.012), kEps);
  // Checkpointing runs the forward pass, and its overhead, again.
  const LayerSimResult ckpt =
      Simulate(model, UniformPlan({.tp = 1, .dp = 1, .checkpoint = true}, 16, 1), TestCluster(1, 1));
  EXPECT_NEAR(ckpt.summary.time.recompute, 4 * (0.016 + 0.005), kEps);
}

TEST(SimulateLayerPlan, TensorParallelAllReducesHideBehindLaunches) {
  cost::Cluster cluster = TestCluster(1, 2);
  cluster.device.kernel_launch_seconds = 1e-3;
  // tp 2, 16 micro-batches of 1: forward device time 0.5 ms + 2 all-reduces of 1 kB (2 x 1e3 / 2e9 = 1 us
  // each); the launches (10 kernels + 2 all-reduces = 12 ms) bound the pass, the all-reduces inside it.
  const LayerSimResult r = Simulate(FourLaunchingLayers(), UniformPlan({.tp = 2, .dp = 1}, 16, 16), cluster);
  EXPECT_NEAR(r.summary.iteration_seconds, 16 * 4 * (12e-3 + 22e-3), kEps);
  EXPECT_NEAR(r.summary.time.communication, 16 * 4 * 4 * 1e-6, kEps);
  EXPECT_NEAR(r.summary.time.compute + r.summary.time.communication, r.summary.iteration_seconds, kEps);
  EXPECT_NEAR(r.communication.tensor_parallel, r.summary.time.communication, kEps);  // all of it TP's
}

LayerPlan PipelinePlan(plan::PipelineSchedule schedule) {
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 1}, 8, 4);
  plan.pp_degree = 2;
  plan.pp_partition = {1, 3};
  plan.pipeline = schedule;
  return plan;
}

TEST(SimulateLayerPlan, OneFOneBTwoStagesFourMicroBatches) {
  // Two nodes of one device: the stages talk over the slow link.
  const cost::Cluster cluster = TestCluster(2, 1);
  const LayerSimResult r = Simulate(FourLayers(), PipelinePlan(plan::PipelineSchedule::k1F1B), cluster);
  ASSERT_EQ(r.stages.size(), 2u);
  EXPECT_EQ(r.stages[1].layers, (std::vector<int>{1, 2, 3}));
  // Micro-batch of 2 samples; stage 0 holds min(2 - 0, 4) = 2 in flight, stage 1 one.
  EXPECT_EQ(r.stages[0].peak_memory_bytes, 4'000'000 + 2 * 20'000);
  EXPECT_EQ(r.stages[1].peak_memory_bytes, 12'000'000 + 1 * 60'000);
  EXPECT_EQ(r.summary.peak_memory_per_device, (std::vector<int64_t>{4'040'000, 12'060'000}));
  // Each stage sends 1 kB x 2 samples across nodes: 2000 / 1e8 = 20 us.
  const double c0 = 6e-3 + 20e-6, c1 = 18e-3 + 20e-6;
  EXPECT_NEAR(r.stages[0].microbatch_seconds, c0, kEps);
  EXPECT_NEAR(r.stages[1].microbatch_seconds, c1, kEps);
  EXPECT_NEAR(r.summary.iteration_seconds, (4 - 1) * c1 + (c0 + c1), kEps);
  EXPECT_NEAR(r.summary.time.total(), r.summary.iteration_seconds, kEps);
  // The slowest stage waits for the other's first and last micro-batch: the bubble is c0.
  EXPECT_NEAR(r.pipeline_bubble_seconds, c0, kEps);
  // All its communication is the stages' sends.
  EXPECT_NEAR(r.communication.pipeline, r.summary.time.communication, kEps);
  EXPECT_NEAR(r.communication.pipeline, (4 - 1) * 20e-6 + 2 * 20e-6, kEps);
  EXPECT_DOUBLE_EQ(r.communication.tensor_parallel + r.communication.data_parallel, 0.0);
  // What holds each peak: fp32 Adam's gradient (1 byte per parameter byte) and moments (2), the
  // micro-batches in flight.
  const StageMemorySplit& m0 = r.stages[0].memory;
  EXPECT_EQ(m0.parameters, 1'000'000);
  EXPECT_EQ(m0.gradients, 1'000'000);
  EXPECT_EQ(m0.optimizer_states, 2'000'000);
  EXPECT_EQ(m0.activations, 2 * 20'000);
  EXPECT_EQ(m0.buffers, 0);
  EXPECT_EQ(r.stages[1].memory.parameters, 3'000'000);
  EXPECT_EQ(r.stages[1].memory.activations, 60'000);
  for (const StageResult& stage : r.stages) EXPECT_EQ(stage.memory.Total(), stage.peak_memory_bytes);
}

// Every kind of strategy's stage peak splits into its kinds exactly: ZeRO stages shard the states they
// name, checkpointing leaves the boundary, a pipeline's stages each theirs, the reserve is its own.
TEST(SimulateLayerPlan, EveryStagePeakSplitsIntoItsKinds) {
  cost::Cluster cluster = TestCluster(1, 4);
  cluster.device.reserved_bytes = 123'456;
  for (plan::Zero zero : {plan::Zero::kNone, plan::Zero::kOptimizerStates, plan::Zero::kGradients, plan::Zero::kParameters}) {
    for (bool checkpoint : {false, true}) {
      LayerStrategy s;
      s.dp = 4;
      s.zero = zero;
      s.checkpoint = checkpoint;
      const LayerSimResult r = Simulate(FourLayers(), UniformPlan(s, 8, 2), cluster);
      ASSERT_EQ(r.stages.size(), 1u);
      const StageMemorySplit& m = r.stages[0].memory;
      EXPECT_EQ(m.Total(), r.stages[0].peak_memory_bytes);
      EXPECT_EQ(m.reserved, 123'456);
      EXPECT_EQ(m.parameters, zero == plan::Zero::kParameters ? 1'000'000 : 4'000'000);
      EXPECT_EQ(m.optimizer_states, zero == plan::Zero::kNone ? 8'000'000 : 2'000'000);
      EXPECT_EQ(m.activations, 4 * (checkpoint ? 1'000 : 10'000));  // one micro-batch of 1 sample per rank
      EXPECT_DOUBLE_EQ(r.pipeline_bubble_seconds, 0.0);
    }
  }
  LayerPlan pipelined = UniformPlan(LayerStrategy{}, 8, 4);
  pipelined.pp_degree = 4;
  pipelined.pp_partition = {1, 1, 1, 1};
  const LayerSimResult r = Simulate(FourLayers(), pipelined, cluster);
  for (const StageResult& stage : r.stages) EXPECT_EQ(stage.memory.Total(), stage.peak_memory_bytes);
}

TEST(SimulateLayerPlan, GPipeHoldsEveryMicroBatchWithTheSameTime) {
  const cost::Cluster cluster = TestCluster(2, 1);
  const LayerSimResult r = Simulate(FourLayers(), PipelinePlan(plan::PipelineSchedule::kGPipe), cluster);
  EXPECT_EQ(r.stages[0].peak_memory_bytes, 4'000'000 + 4 * 20'000);
  EXPECT_EQ(r.stages[1].peak_memory_bytes, 12'000'000 + 4 * 60'000);
  EXPECT_NEAR(r.summary.iteration_seconds, 3 * (18e-3 + 20e-6) + (24e-3 + 40e-6), kEps);
}

TEST(SimulateLayerPlan, PipelineAddsEveryStagesUnhiddenGradientSync) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 2}, 8, 2);
  plan.pp_degree = 2;
  plan.pp_partition = {2, 2};
  const LayerSimResult r = Simulate(FourLayers(), plan, cluster);
  // 2 samples per device: C_s = 2 x 6 ms + a 2000-byte send at 1e9 (2 us). All-reduce of 1 MB over
  // 2: 1 ms, 0.3 ms unhidden behind each 4 ms backward.
  const double c = 12e-3 + 2e-6;
  EXPECT_NEAR(r.stages[0].gradient_sync_seconds, 0.6e-3, kEps);
  EXPECT_NEAR(r.stages[1].gradient_sync_seconds, 0.6e-3, kEps);
  EXPECT_NEAR(r.summary.iteration_seconds, (2 - 1) * c + 2 * c + 1.2e-3, kEps);
  EXPECT_EQ(r.summary.peak_memory_per_device, (std::vector<int64_t>{8'080'000, 8'080'000, 8'040'000, 8'040'000}));
}

TEST(SimulateLayerPlan, SliceGatherWhenDataParallelDegreeShrinks) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 4}, 16, 1);
  plan.layers[2] = plan.layers[3] = {.tp = 2, .dp = 2};
  const LayerSimResult r = Simulate(FourLayers(), plan, cluster);
  // Layer 2 needs 8 samples' boundary (8 kB) gathered from 2 devices: 1 x 8000 / 2e9 = 4 us.
  EXPECT_NEAR(r.summary.time.resharding, 4e-6, kEps);
  // The other way round slices forward and all-gathers the gradient backward: layer 1's 2 TP ranks
  // each need the gradient of all its 8 samples, computed by 2 devices of layer 2: 4 us again.
  plan.layers[0] = plan.layers[1] = {.tp = 2, .dp = 2};
  plan.layers[2] = plan.layers[3] = {.tp = 1, .dp = 4};
  EXPECT_NEAR(Simulate(FourLayers(), plan, cluster).summary.time.resharding, 4e-6, kEps);
  // DP and SDP share the activation layout.
  plan.layers.assign(4, {.tp = 1, .dp = 4});
  plan.layers[1].zero = plan::Zero::kParameters;
  EXPECT_NEAR(Simulate(FourLayers(), plan, cluster).summary.time.resharding, 0.0, kEps);
}

// Megatron's placement: the embeddings with the first layer on the first stage, the head + loss with
// the last layer on the last stage.
TEST(SimulateLayerPlan, EmbeddingsOnTheFirstStageHeadOnTheLast) {
  const cost::Cluster cluster = TestCluster(1, 2);
  LayerModel model = FourLayers();
  model.embedding.parameter_bytes = 500'000;
  model.embedding.activation_bytes_per_sample = 2'000;
  model.embedding.forward_seconds_per_sample = 1e-4;
  model.embedding.backward_seconds_per_sample = 2e-4;
  model.head.parameter_bytes = 300'000;
  model.head.activation_bytes_per_sample = 1'000;
  model.head.forward_seconds_per_sample = 2e-4;
  model.head.backward_seconds_per_sample = 4e-4;
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 1}, 4, 2);
  plan.pp_degree = 2;
  plan.pp_partition = {2, 2};
  const LayerSimResult r = Simulate(model, plan, cluster);
  // Micro-batch of 2, stage 0 holds 2 in flight, stage 1 one.
  EXPECT_EQ(r.stages[0].peak_memory_bytes, 8'000'000 + 2'000'000 + 2 * (40'000 + 4'000));
  EXPECT_EQ(r.stages[1].peak_memory_bytes, 8'000'000 + 1'200'000 + 40'000 + 2'000);
  EXPECT_NEAR(r.stages[0].microbatch_seconds, 12e-3 + 0.6e-3 + 2e-6, kEps);
  EXPECT_NEAR(r.stages[1].microbatch_seconds, 12e-3 + 1.2e-3 + 2e-6, kEps);
}

// Under TP 2 the embeddings and the head all-reduce what their profile lists (per sample x the
// micro-batch), with the strategy of the layer beside them; replicated parameters are whole on both
// TP ranks. Micro-batch 4, all-reduce of n bytes over 2 devices: n / 1e9 s.
TEST(SimulateLayerPlan, EmbeddingAndHeadTpAllReducesAndReplicatedParameters) {
  const cost::Cluster cluster = TestCluster(1, 2);
  LayerModel model = FourLayers();
  model.embedding.parameter_bytes = 500'000;
  model.embedding.replicated_parameter_bytes = 100'000;
  model.embedding.tp_forward_all_reduce_bytes_per_sample = {1'000};
  model.head.parameter_bytes = 300'000;
  model.head.tp_forward_all_reduce_bytes_per_sample = {10, 10, 10};
  model.head.tp_backward_all_reduce_bytes_per_sample = {1'000};
  LayerPlan plan = UniformPlan({.tp = 2, .dp = 1}, 4, 1);
  const LayerSimResult base = Simulate(FourLayers(), plan, cluster);
  const LayerSimResult r = Simulate(model, plan, cluster);
  // States: (400 kB / 2 + 100 kB) x 4 and 300 kB / 2 x 4.
  EXPECT_EQ(r.summary.peak_memory_bytes - base.summary.peak_memory_bytes, 1'200'000 + 600'000);
  EXPECT_NEAR(r.summary.iteration_seconds - base.summary.iteration_seconds, 4e-6 + 3 * 40e-9 + 4e-6, kEps);
  Result<PlanTraffic> t = LayerPlanTraffic(model, plan, cluster);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->embedding.tp_all_reduce_bytes, 4'000);
  EXPECT_EQ(t->embedding.tp_all_reduces, 1);
  EXPECT_EQ(t->head.tp_all_reduce_bytes, 3 * 40 + 4'000);
  EXPECT_EQ(t->head.tp_all_reduces, 4);
  EXPECT_EQ(t->layers[0].tp_all_reduce_bytes, 4 * 4'000);
}

// The head's vocabulary-parallel loss (LayerProfile::tp_loss_*) is priced where the head runs under TP,
// split over its TP ranks like the rest of its work, and not at TP 1. Micro-batch 4.
TEST(SimulateLayerPlan, TheHeadsVocabularyParallelLossCountsOnlyUnderTp) {
  const cost::Cluster cluster = TestCluster(1, 2);
  LayerModel model = FourLayers();
  model.head.tp_loss_forward_seconds_per_sample = 1e-3;
  model.head.tp_loss_backward_seconds_per_sample = 0.5e-3;
  model.head.tp_loss_forward_kernels = 13;
  const LayerPlan tp2 = UniformPlan({.tp = 2, .dp = 1}, 4, 1);
  EXPECT_NEAR(Simulate(model, tp2, cluster).summary.time.compute - Simulate(FourLayers(), tp2, cluster).summary.time.compute,
              4 * 1.5e-3 / 2, kEps);
  const LayerPlan dp2 = UniformPlan({.tp = 1, .dp = 2}, 8, 1);
  EXPECT_NEAR(Simulate(model, dp2, cluster).summary.time.compute, Simulate(FourLayers(), dp2, cluster).summary.time.compute,
              kEps);
}

// A layer's replicated parameters stay whole under TP: memory, DP all-reduce and ZeRO-3 collectives.
TEST(SimulateLayerPlan, ReplicatedParametersAreNotSplitByTp) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerModel model = FourLayers();
  for (LayerProfile& p : model.layers) p.replicated_parameter_bytes = 200'000;
  // TP 2 x DP 2: a TP shard is 800 kB / 2 + 200 kB = 600 kB.
  LayerPlan plan = UniformPlan({.tp = 2, .dp = 2}, 16, 1);
  Result<PlanTraffic> t = LayerPlanTraffic(model, plan, cluster);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->layers[0].dp_all_reduce_bytes, 600'000);
  const LayerSimResult r = Simulate(model, plan, cluster);
  const LayerSimResult base = Simulate(FourLayers(), plan, cluster);
  EXPECT_EQ(r.summary.peak_memory_bytes - base.summary.peak_memory_bytes, 4 * 100'000 * 4);
  plan.layers.assign(4, {.tp = 2, .dp = 2, .zero = plan::Zero::kParameters});
  t = LayerPlanTraffic(model, plan, cluster);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->layers[0].sdp_all_gather_bytes, 2 * 600'000);
  EXPECT_EQ(t->layers[0].sdp_reduce_scatter_bytes, 600'000);
  // ZeRO-3 states 4 x 600 kB x 4 / 2 plus one gathered TP shard (600 kB).
  EXPECT_EQ(Simulate(model, plan, cluster).summary.peak_memory_bytes - Simulate(FourLayers(), plan, cluster).summary.peak_memory_bytes,
            4 * 100'000 * 4 / 2 + 100'000);
}

TEST(SimulateLayerPlan, OneFOneBStageZeroNeverHoldsMoreThanMinPpMMicroBatches) {
  const cost::Cluster cluster = TestCluster(1, 2);
  int64_t previous = INT64_MAX;
  for (int m : {1, 2, 4, 8, 16, 32, 64}) {
    LayerPlan plan = UniformPlan({.tp = 1, .dp = 1}, 64, m);
    plan.pp_degree = 2;
    plan.pp_partition = {2, 2};
    const LayerSimResult r = Simulate(FourLayers(), plan, cluster);
    const int64_t per_microbatch = 2 * 10'000 * (64 / m);
    EXPECT_EQ(r.stages[0].peak_memory_bytes, 8'000'000 + std::min(2, m) * per_microbatch) << m;
    EXPECT_LE(r.stages[0].peak_memory_bytes, previous) << m;
    EXPECT_LE(r.stages[1].peak_memory_bytes, r.stages[0].peak_memory_bytes) << m;
    previous = r.stages[0].peak_memory_bytes;
  }
}

// Interleaved 1F1B, 2 stages x 2 chunks of one layer (stage 0: layers 0 and 2, stage 1: 1 and 3), on
// two nodes of one device, 4 micro-batches of 2 samples: the same work per stage as [2, 2], more sends,
// a bubble half as long, and Korthikanti's 1 + (pp - 1) / (pp v) more activations on the first stage.
TEST(SimulateLayerPlan, InterleavedOneFOneBTwoStagesTwoChunks) {
  const cost::Cluster cluster = TestCluster(2, 1);
  LayerPlan plain = UniformPlan({.tp = 1, .dp = 1}, 8, 4);
  plain.pp_degree = 2;
  plain.pp_partition = {2, 2};
  LayerPlan interleaved = plain;
  interleaved.virtual_stages = 2;
  interleaved.pp_partition = {1, 1, 1, 1};
  const LayerSimResult r = Simulate(FourLayers(), interleaved, cluster);
  ASSERT_EQ(r.stages.size(), 2u);
  EXPECT_EQ(r.stages[0].layers, (std::vector<int>{0, 2}));
  EXPECT_EQ(r.stages[1].layers, (std::vector<int>{1, 3}));
  // Each stage: 2 layers x 2 samples x 3 ms, and three 2000-byte sends at 1e8 (stage 0: chunk 0
  // forward, chunk 2 both ways; stage 1: chunk 1 both ways, chunk 3 backward).
  const double c = 12e-3 + 3 * 20e-6;
  EXPECT_NEAR(r.stages[0].microbatch_seconds, c, kEps);
  EXPECT_NEAR(r.stages[1].microbatch_seconds, c, kEps);
  // (m - 1/v) C + sum C / v = 4 C + (pp - 1) C / v.
  EXPECT_NEAR(r.summary.iteration_seconds, 4 * c + c / 2, kEps);
  EXPECT_NEAR(r.summary.time.total(), r.summary.iteration_seconds, kEps);
  const double c_plain = 12e-3 + 20e-6;
  EXPECT_NEAR(Simulate(FourLayers(), plain, cluster).summary.iteration_seconds, 4 * c_plain + c_plain, kEps);
  // Stage 0 holds 2 (2 - 0 - 1) + 2 + 1 = 5 chunk-micro-batches of 20 kB, stage 1 3; plain 1F1B holds
  // 2 and 1 micro-batches of 40 kB.
  EXPECT_EQ(r.stages[0].peak_memory_bytes, 8'000'000 + 5 * 20'000);
  EXPECT_EQ(r.stages[1].peak_memory_bytes, 8'000'000 + 3 * 20'000);
  EXPECT_DOUBLE_EQ(5 * 20'000 / (2 * 40'000.0), 1.0 + (2 - 1) / (2.0 * 2));
  // v sends per stage and micro-batch each way, but the pipeline's ends.
  Result<PlanTraffic> traffic = LayerPlanTraffic(FourLayers(), interleaved, cluster);
  ASSERT_TRUE(traffic.ok()) << traffic.error().message;
  EXPECT_EQ(traffic->send_forward_bytes, (std::vector<int64_t>{4 * 2 * 2'000, 4 * 1 * 2'000}));
  EXPECT_EQ(traffic->send_backward_bytes, (std::vector<int64_t>{4 * 1 * 2'000, 4 * 2 * 2'000}));
}

// The embeddings ride with the first chunk and the head with the last; a stage holds what Megatron's
// order holds of each chunk.
TEST(SimulateLayerPlan, InterleavedStagesHoldWhatTheScheduleHolds) {
  const cost::Cluster cluster = TestCluster(1, 2);
  LayerModel model = FourLayers();
  model.embedding.parameter_bytes = 500'000;
  model.embedding.activation_bytes_per_sample = 2'000;
  model.head.parameter_bytes = 300'000;
  model.head.activation_bytes_per_sample = 1'000;
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 1}, 4, 2);
  plan.pp_degree = 2;
  plan.virtual_stages = 2;
  plan.pp_partition = {1, 1, 1, 1};
  const LayerSimResult r = Simulate(model, plan, cluster);
  // 2 samples per micro-batch: stage 0's chunks keep 20 kB + 4 kB (embeddings) and 20 kB, and it runs
  // all 4 forwards first; stage 1's keep 20 kB and 20 kB + 2 kB (head): 2 forwards of the first, then
  // one of the second before each backward.
  EXPECT_EQ(r.stages[0].peak_memory_bytes, 8'000'000 + 2'000'000 + 2 * 24'000 + 2 * 20'000);
  EXPECT_EQ(r.stages[1].peak_memory_bytes, 8'000'000 + 1'200'000 + 2 * 20'000 + 22'000);
}

void ExpectBadInput(const LayerModel& model, const LayerPlan& plan, const cost::Cluster& cluster,
                    const std::string& field) {
  Result<LayerSimResult> r = SimulateLayerPlan(model, plan, cluster, TestCostModel(cluster));
  ASSERT_FALSE(r.ok()) << field;
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  EXPECT_NE(r.error().message.find(field), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
}

TEST(SimulateLayerPlan, RejectsDegreesThatDoNotMatchTheStage) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 4}, 16, 1);
  plan.layers[2] = {.tp = 2, .dp = 1};
  ExpectBadInput(FourLayers(), plan, cluster, "layers[2]");
  plan = UniformPlan({.tp = 1, .dp = 4}, 16, 1);
  plan.pp_degree = 3;
  plan.pp_partition = {1, 1, 2};
  ExpectBadInput(FourLayers(), plan, cluster, "pp_degree");
  plan = UniformPlan({.tp = 1, .dp = 4}, 16, 1);
  plan.layers.pop_back();
  ExpectBadInput(FourLayers(), plan, cluster, "layers");
}

// An expert-parallel layer's traffic per device and iteration: 4 all-to-alls of its routed rows per
// micro-batch (6 checkpointed), its experts' gradient reduce-scatter and post-step all-gather over the
// dp / ep ranks holding them, the rest of the layer's over all dp.
TEST(SimulateLayerPlan, ExpertParallelTrafficCountsEachPart) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerModel model = FourLayers();
  for (LayerProfile& p : model.layers) {
    p.experts = 4;
    p.expert_parameter_bytes = p.parameter_bytes / 2;
    p.routed_bytes_per_sample = 2 * p.boundary_bytes_per_sample;
  }
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 4, .zero = plan::Zero::kGradients, .ep = 2}, 16, 2);
  plan.layers[3].checkpoint = true;
  Result<PlanTraffic> t = LayerPlanTraffic(model, plan, cluster);
  ASSERT_TRUE(t.ok()) << t.error().message;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const LayerProfile& p = model.layers[i];
    const LayerTraffic& l = t->layers[i];
    const int calls = (i == 3 ? 6 : 4) * 2;  // per micro-batch, 2 micro-batches
    EXPECT_EQ(l.all_to_alls, calls) << i;
    EXPECT_EQ(l.all_to_all_bytes, calls * p.routed_bytes_per_sample * 2) << i;  // 2 samples per device
    const int64_t experts = p.expert_parameter_bytes / 2, rest = p.parameter_bytes - p.expert_parameter_bytes;
    EXPECT_EQ(l.expert_reduce_scatter_bytes, 2 * experts) << i;  // every micro-batch under ZeRO-2
    EXPECT_EQ(l.sdp_reduce_scatter_bytes, 2 * rest) << i;
    EXPECT_EQ(l.expert_step_all_gather_bytes, experts) << i;
    EXPECT_EQ(l.step_all_gather_bytes, rest) << i;
    EXPECT_EQ(l.expert_dp_all_reduce_bytes, 0) << i;
  }
  EXPECT_EQ(t->embedding.all_to_alls, 0);  // the embeddings have no experts
  Result<LayerSimResult> r = SimulateLayerPlan(model, plan, cluster, TestCostModel(cluster));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_GT(r->communication.expert_parallel, 0.0);
  EXPECT_DOUBLE_EQ(r->communication.context_parallel + r->communication.pipeline + r->communication.tensor_parallel, 0.0);
  EXPECT_NEAR(r->communication.Total(), r->summary.time.communication, 1e-12);
}

// Expert parallelism only where a layer has experts it divides, within dp, and not under ZeRO-3.
TEST(SimulateLayerPlan, RejectsExpertParallelismItCannotRun) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerModel model = FourLayers();
  for (size_t i = 1; i < model.layers.size(); ++i) model.layers[i].experts = 8, model.layers[i].expert_parameter_bytes = 1000;
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 4, .ep = 4}, 16, 1);
  plan.layers[0].ep = 1;
  EXPECT_TRUE(SimulateLayerPlan(model, plan, cluster, TestCostModel(cluster)).ok());
  plan.layers[0].ep = 2;
  ExpectBadInput(model, plan, cluster, "layers[0]: ep: 2, but layer");
  plan.layers[0].ep = 1;
  plan.layers[1].ep = 3;
  ExpectBadInput(model, plan, cluster, "layers[1]: ep: 3 does not divide dp 4");
  model.layers[1].experts = 6;
  plan.layers[1].ep = 4;
  ExpectBadInput(model, plan, cluster, "layers[1]: ep: 4 does not divide the 6 experts");
  model.layers[1].experts = 8;
  plan.layers[1].zero = plan::Zero::kParameters;
  ExpectBadInput(model, plan, cluster, "layers[1]: ep: expert parallelism with ZeRO-3 is not modelled");
}

// Context parallelism: a layer's micro-batch need only divide into its dp / cp replicas; the traffic
// counts the ring's sends (3 (cp - 1) per micro-batch, 4 (cp - 1) recomputed) and the all-to-alls
// between layers of different CP degrees.
LayerModel FourAttentionLayers() {
  LayerModel m = FourLayers();
  for (LayerProfile& p : m.layers) {
    p.attention_sequence = 64;
    p.attention_kv_bytes_per_sample = 4'000;
  }
  return m;
}

TEST(SimulateLayerPlan, ContextParallelTrafficCountsTheRing) {
  const cost::Cluster cluster = TestCluster(1, 4);
  const LayerModel model = FourAttentionLayers();
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 4, .cp = 4}, 2, 2);  // one sample per micro-batch over 4 ranks
  plan.layers[3].checkpoint = true;
  plan.layers[2].cp = 2;
  plan.global_batch = 4;  // layer 2's 2 replicas take one sample each
  Result<PlanTraffic> t = LayerPlanTraffic(model, plan, cluster);
  ASSERT_TRUE(t.ok()) << t.error().message;
  for (size_t i = 0; i < 4; ++i) {
    const int cp = plan.layers[i].cp;
    const int sends = (i == 3 ? 4 : 3) * (cp - 1) * 2;  // per micro-batch, 2 micro-batches
    EXPECT_EQ(t->layers[i].ring_sends, sends) << i;
    EXPECT_EQ(t->layers[i].ring_bytes, sends * 4'000 / cp * (cp == 4 ? 2 : 1)) << i;  // 2 or 1 samples per replica
  }
  EXPECT_EQ(t->layers[1].context_reshard_bytes, 0);
  EXPECT_EQ(t->layers[2].context_reshard_bytes, 2 * 2 * 1'000 * 2 / 4);  // fwd + bwd, 2 micro-batches, half a sample
  EXPECT_EQ(t->layers[3].context_reshard_bytes, 2 * 2 * 1'000 * 1 / 2);
  Result<LayerSimResult> r = SimulateLayerPlan(model, plan, cluster, TestCostModel(cluster));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_GT(r->communication.context_parallel, 0.0);
  EXPECT_DOUBLE_EQ(r->communication.expert_parallel + r->communication.pipeline, 0.0);
  EXPECT_NEAR(r->communication.Total(), r->summary.time.communication, 1e-12);
}

// The communication bucket splits into its kinds and they add up to it, for every kind of strategy
// and schedule: a kind a plan does not use costs nothing.
TEST(SimulateLayerPlan, CommunicationSplitsIntoItsKinds) {
  const cost::Cluster cluster = TestCluster(2, 4);
  int checked = 0;
  for (int tp : {1, 2, 4})
    for (plan::Zero zero : {plan::Zero::kNone, plan::Zero::kOptimizerStates, plan::Zero::kGradients, plan::Zero::kParameters})
      for (bool sp : {false, true})
        for (int pp : {1, 2}) {
          if (sp && tp == 1) continue;
          LayerStrategy s;
          s.tp = tp;
          s.dp = 8 / pp / tp;
          s.zero = s.dp > 1 ? zero : plan::Zero::kNone;
          s.sequence_parallel = sp;
          LayerPlan plan = UniformPlan(s, 32, 2);
          plan.pp_degree = pp;
          plan.pp_partition = pp == 1 ? std::vector<int>{4} : std::vector<int>{2, 2};
          Result<LayerSimResult> r = SimulateLayerPlan(FourAttentionLayers(), plan, cluster, TestCostModel(cluster));
          ASSERT_TRUE(r.ok()) << r.error().message;
          const cost::CommunicationByKind& c = r->communication;
          EXPECT_NEAR(c.Total(), r->summary.time.communication, 1e-12 + 1e-9 * r->summary.time.communication);
          EXPECT_EQ(c.tensor_parallel > 0.0, tp > 1) << tp;
          EXPECT_EQ(c.pipeline > 0.0, pp > 1) << pp;
          if (s.dp == 1) {
            EXPECT_DOUBLE_EQ(c.data_parallel, 0.0) << tp;
          }
          if (s.zero == plan::Zero::kParameters) {
            EXPECT_GT(c.data_parallel, 0.0) << tp;  // its gathers are never hidden
          }
          EXPECT_DOUBLE_EQ(c.expert_parallel + c.context_parallel, 0.0);
          ++checked;
        }
  EXPECT_GT(checked, 30);
}

TEST(SimulateLayerPlan, RejectsContextParallelismItCannotRun) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerModel model = FourAttentionLayers();
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 4, .cp = 2}, 2, 1);
  EXPECT_TRUE(SimulateLayerPlan(model, plan, cluster, TestCostModel(cluster)).ok());
  plan.global_batch = 1;
  ExpectBadInput(model, plan, cluster, "layers[0]: micro-batch of 1 samples is not divisible by the dp 4 / cp 2 replicas");
  plan.global_batch = 2;
  plan.layers[1].cp = 1;
  ExpectBadInput(model, plan, cluster, "layers[1]: micro-batch of 2 samples is not divisible by dp 4");
  plan.layers[1].cp = 3;
  ExpectBadInput(model, plan, cluster, "layers[1]: cp: 3 does not divide dp 4");
  plan.layers[1].cp = 2;
  plan.layers[1].ep = 2;
  model.layers[1].experts = 4;
  ExpectBadInput(model, plan, cluster, "layers[1]: cp: context parallelism beside expert parallelism is not modelled");
  plan.layers[1].ep = 1;
  model.layers[1].experts = 0;
  model.layers[2].attention_sequence = 62;
  ExpectBadInput(model, plan, cluster, "layers[0]: cp: 2, but the attention of model four cannot be split");
  model.layers[2].attention_sequence = cost::LayerProfile::kRingless;
  ExpectBadInput(model, plan, cluster, "layers[0]: cp: 2, but the attention of model four cannot be split");
  for (LayerProfile& p : model.layers) p.attention_sequence = 6;
  ExpectBadInput(model, plan, cluster, "layers[0]: cp: 2 ranks cannot split the sequence of 6 tokens into 2 x 2 equal chunks");
}

// Ulysses needs a CP group without TP and a degree dividing it; under USP (a ring beside it) the ring's
// sequence rules hold too, with pure Ulysses only cp dividing the sequence.
TEST(SimulateLayerPlan, RejectsUlyssesItCannotRun) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerModel model = FourAttentionLayers();
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 4, .cp = 4}, 4, 1);
  for (LayerStrategy& s : plan.layers) s.ulysses = 2;
  EXPECT_TRUE(SimulateLayerPlan(model, plan, cluster, TestCostModel(cluster)).ok());
  plan.layers[1].ulysses = 3;
  ExpectBadInput(model, plan, cluster, "layers[1]: ulysses: 3 does not divide cp 4");
  plan.layers[1].ulysses = 0;
  ExpectBadInput(model, plan, cluster, "layers[1]: ulysses: 0 needs cp above 1 and tp 1");
  plan.layers[1] = {.tp = 2, .dp = 2, .cp = 2};
  plan.layers[1].ulysses = 2;
  ExpectBadInput(model, plan, cluster, "layers[1]: ulysses: 2 needs cp above 1 and tp 1 (cp 2, tp 2)");
  plan.layers[1] = plan.layers[0];
  for (LayerProfile& p : model.layers) p.attention_sequence = 12;  // 4 ranks split 12 tokens, not into 2 x 4 chunks
  ExpectBadInput(model, plan, cluster, "layers[0]: cp: 4 ranks cannot split the sequence of 12 tokens into 2 x 4");
  for (LayerStrategy& s : plan.layers) s.ulysses = 4;  // Ulysses alone: heads, no ring chunks
  EXPECT_TRUE(SimulateLayerPlan(model, plan, cluster, TestCostModel(cluster)).ok());
}

TEST(SimulateLayerPlan, RejectsOffloadingWithoutAHostOrAnOptimizer) {
  cost::Cluster cluster = TestCluster(1, 4);
  LayerModel model = FourLayers();
  model.optimizer = "adam";
  model.state_bytes_per_parameter_byte = 3.0;
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 4, .zero = plan::Zero::kOptimizerStates}, 16, 1);
  plan.layers[2].offload = true;
  ExpectBadInput(model, plan, cluster, "layers[2]: offload: cluster test gives its device no host link");
  cluster.device.host_link_bandwidth = 25e9;
  cluster.device.host_memory_bandwidth = 50e9;
  const LayerSimResult offloaded = Simulate(model, plan, cluster);
  plan.layers[2].offload = false;
  const LayerSimResult kept = Simulate(model, plan, cluster);
  EXPECT_LT(offloaded.summary.peak_memory_bytes, kept.summary.peak_memory_bytes);  // layer 2's states left
  model.optimizer.clear();
  plan.layers[2].offload = true;
  ExpectBadInput(model, plan, cluster, "layers[2]: offload: model four has no optimizer step to offload");
}

TEST(SimulateLayerPlan, RejectsPartitionsThatDoNotCoverTheLayers) {
  const cost::Cluster cluster = TestCluster(1, 4);
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 2}, 16, 2);
  plan.pp_degree = 2;
  plan.pp_partition = {2, 1};
  ExpectBadInput(FourLayers(), plan, cluster, "pp_partition");
  plan.pp_partition = {4, 0};
  ExpectBadInput(FourLayers(), plan, cluster, "pp_partition[1]");
  plan.pp_partition = {1, 1, 2};
  ExpectBadInput(FourLayers(), plan, cluster, "pp_partition");
  plan.pp_partition = {};
  ExpectBadInput(FourLayers(), plan, cluster, "pp_partition");
}

TEST(SimulateLayerPlan, RejectsInterleavingItCannotRun) {
  const cost::Cluster cluster = TestCluster(1, 2);
  LayerPlan plan = UniformPlan({.tp = 1, .dp = 1}, 8, 4);
  plan.pp_degree = 2;
  plan.virtual_stages = 2;
  plan.pp_partition = {2, 2};
  ExpectBadInput(FourLayers(), plan, cluster, "pp_partition: has 2 chunks, pp_degree 2 x virtual_stages 2 is 4");
  plan.pp_partition = {1, 1, 1, 1};
  plan.pipeline = plan::PipelineSchedule::kGPipe;
  ExpectBadInput(FourLayers(), plan, cluster, "virtual_stages");
  plan.pipeline = plan::PipelineSchedule::k1F1B;
  plan.micro_batches = 1;  // not a multiple of the 2 stages
  ExpectBadInput(FourLayers(), plan, cluster, "micro_batches: 1 is not a multiple of pp_degree 2");
  plan.micro_batches = 4;
  plan.virtual_stages = 0;
  ExpectBadInput(FourLayers(), plan, cluster, "virtual_stages: must be at least 1");
  LayerPlan single = UniformPlan({.tp = 1, .dp = 2}, 8, 4);
  single.virtual_stages = 2;
  single.pp_partition = {2, 2};
  ExpectBadInput(FourLayers(), single, cluster, "pp_degree >= 2");
}

TEST(SimulateLayerPlan, RejectsBatchesThatDoNotDivide) {
  const cost::Cluster cluster = TestCluster(1, 4);
  ExpectBadInput(FourLayers(), UniformPlan({.tp = 1, .dp = 4}, 16, 3), cluster, "global_batch");
  ExpectBadInput(FourLayers(), UniformPlan({.tp = 1, .dp = 4}, 16, 0), cluster, "global_batch");
  // 16 / 8 = 2 samples per micro-batch cannot be split 4 ways.
  ExpectBadInput(FourLayers(), UniformPlan({.tp = 1, .dp = 4}, 16, 8), cluster, "dp 4");
}

}  // namespace
}  // namespace kiwi::sim
