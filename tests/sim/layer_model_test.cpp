#include "kiwi/cost/layer_profile.h"

#include <gtest/gtest.h>

#include <cmath>

#include <algorithm>

#include "kiwi/cost/layer_cost.h"
#include "kiwi/cost/pass_work.h"
#include "kiwi/ir/backward.h"
#include "kiwi/ir/layers.h"
#include "kiwi/models/hf_config.h"
#include "kiwi/models/presets.h"
#include "kiwi/sim/layer_simulator.h"

namespace kiwi::sim {
namespace {

using namespace kiwi::cost;  // the layer model and its per-layer terms (cost/layer_profile.h, layer_cost.h)

cost::DeviceSpec TestDevice() {
  cost::DeviceSpec d;
  d.name = "dev";
  d.memory_bytes = int64_t{1} << 40;
  d.memory_bandwidth = 1e12;
  for (ir::DType t : {ir::DType::kF32, ir::DType::kBF16, ir::DType::kF16}) d.SetPeakFlops(t, 1e14);
  return d;
}

// A layer placed with `strategy` on one node of test devices that is its TP group (NVLink-like link).
PlacedLayer OnTpGroup(const LayerProfile& p, const plan::LayerStrategy& strategy, int64_t microbatch) {
  cost::Cluster cluster;
  cluster.device = TestDevice();
  cluster.devices_per_node = strategy.tp;
  cluster.intra_node = {"link", 1e11, 0.0};
  Result<StageMesh> mesh = MakeStageMesh(cluster, {1, 1, strategy.tp});
  EXPECT_TRUE(mesh.ok()) << mesh.error().message;
  return {p, strategy, mesh.ok() ? *mesh : StageMesh{}, microbatch};
}

ir::Graph SmallGpt(int64_t batch) {
  models::ModelOverrides o;
  o.layers = 2;
  o.hidden = 64;
  o.heads = 4;
  o.seq = 32;
  o.batch = batch;
  Result<models::ModelSpec> spec = models::LoadModel("gpt", o);
  EXPECT_TRUE(spec.ok()) << spec.error().message;
  Result<ir::Graph> g = models::BuildTrainingGraph(*spec);
  EXPECT_TRUE(g.ok()) << g.error().message;
  return g.ok() ? *g : ir::Graph{};
}

int64_t TotalParameterBytes(const ir::Graph& g) {
  int64_t bytes = 0;
  for (const ir::Node& n : g.nodes())
    if (n.kind == ir::OpKind::kParameter) bytes += n.output.Bytes();
  return bytes;
}

TEST(BuildLayerModel, SmallGptAccountsForEveryParameterAndActivation) {
  const int64_t batch = 2;
  const ir::Graph g = SmallGpt(batch);
  const cost::CostModel cm(TestDevice());
  Result<LayerModel> m = BuildLayerModel(g, batch, cm);
  ASSERT_TRUE(m.ok()) << m.error().message;
  ASSERT_EQ(m->layers.size(), 2u);
  Result<ir::LayerView> view = ir::BuildLayerView(g);
  ASSERT_TRUE(view.ok());

  int64_t parameters = m->embedding.parameter_bytes + m->head.parameter_bytes, saved = 0;
  for (size_t i = 0; i < m->layers.size(); ++i) {
    const LayerProfile& p = m->layers[i];
    parameters += p.parameter_bytes;
    EXPECT_GT(p.parameter_bytes, 0);
    EXPECT_EQ(p.activation_bytes_per_sample * batch, ir::SavedActivationBytes(g, static_cast<int32_t>(i)));
    EXPECT_EQ(p.boundary_bytes_per_sample * batch, view->layers[i].boundary_activation_bytes);
    EXPECT_GT(p.boundary_bytes_per_sample, 0);
    EXPECT_LT(p.boundary_bytes_per_sample, p.activation_bytes_per_sample);
    EXPECT_EQ(p.tp_comm_bytes_per_sample, 2 * p.boundary_bytes_per_sample);
    EXPECT_GT(p.forward_seconds_per_sample, 0.0);
    EXPECT_GT(p.backward_seconds_per_sample, p.forward_seconds_per_sample);
    saved += p.activation_bytes_per_sample * batch;
  }
  EXPECT_EQ(parameters, TotalParameterBytes(g));
  EXPECT_GT(m->embedding.parameter_bytes, 0);  // token and position embeddings
  EXPECT_GT(m->head.parameter_bytes, 0);       // final norm and LM head
  EXPECT_EQ((m->embedding.activation_bytes_per_sample + m->head.activation_bytes_per_sample) * batch,
            ir::SavedActivationBytes(g, -1) - saved);
  for (const LayerProfile* p : {&m->embedding, &m->head}) {
    EXPECT_GT(p->forward_seconds_per_sample, 0.0);
    EXPECT_GT(p->backward_seconds_per_sample, 0.0);
  }
  // fp32 Adam: a gradient and two moments per parameter.
  EXPECT_DOUBLE_EQ(m->state_bytes_per_parameter_byte, 3.0);
  // The model FLOPs MFU counts: every op's but the optimizer step's, once.
  double flops = 0.0;
  for (const ir::Node& n : g.nodes())
    if (n.kind != ir::OpKind::kOptimizer) flops += n.flops;
  EXPECT_GT(flops, 0.0);
  EXPECT_NEAR(m->TrainingFlopsPerSample() * static_cast<double>(batch), flops, 1e-9 * flops);
  // The head's backward starts with the loss's gradient, as large as the logits, and PyTorch's
  // cross entropy holds a second such tensor while computing it (its dense nll_loss_grad).
  int64_t logits = 0;
  for (const ir::Node& n : g.nodes())
    if (n.kind == ir::OpKind::kLoss && !n.is_backward()) logits = g.node(n.inputs[0]).output.Bytes();
  ASSERT_GT(logits, 0);
  EXPECT_EQ(m->head.backward_transient_bytes_per_sample * batch, 2 * logits);
  for (const LayerProfile& p : m->layers) EXPECT_GT(p.backward_transient_bytes_per_sample, 0);
}

// Each part counts its parameter tensors, and the model the optimizer's inputs per parameter (Adam:
// the parameter, its gradient and 2 moments): the per-tensor work of the layer-level optimizer step.
TEST(BuildLayerModel, CountsParameterTensorsAndOptimizerInputsPerParameter) {
  const cost::CostModel cm(TestDevice());
  const ir::Graph g = SmallGpt(2);
  Result<LayerModel> m = BuildLayerModel(g, 2, cm);
  ASSERT_TRUE(m.ok()) << m.error().message;
  int parameters = 0;
  for (const ir::Node& n : g.nodes()) parameters += n.kind == ir::OpKind::kParameter ? 1 : 0;
  int counted = m->embedding.parameter_tensors + m->head.parameter_tensors;
  for (const LayerProfile& p : m->layers) {
    EXPECT_EQ(p.parameter_tensors, 16);  // 2 norms and 6 linears (q, k, v, out, fc1, fc2), weight and bias each
    counted += p.parameter_tensors;
  }
  EXPECT_EQ(counted, parameters);
  EXPECT_EQ(m->optimizer, "adam");
  EXPECT_DOUBLE_EQ(m->optimizer_tensors_per_parameter, 4.0);
}

// A layer's kernels are its forward and backward nodes that do work (parameters, views with no bytes
// and the optimizer update launch nothing), the same whatever the graph's batch. With a per-op overhead
// k (a CPU profile's kernel time) each pass pays k per kernel apart from its per-sample work, and the
// two add up to the ops' ComputeTime at the graph's batch.
TEST(BuildLayerModel, KernelsPerPassCountTheLayersWorkingNodesAndPayTheOverhead) {
  cost::CostModelOptions options;
  options.kernel_overhead = 1e-5;
  const cost::CostModel cm(TestDevice(), options);
  for (int64_t batch : {1, 4}) {
    const ir::Graph g = SmallGpt(batch);
    Result<LayerModel> m = BuildLayerModel(g, batch, cm);
    ASSERT_TRUE(m.ok()) << m.error().message;
    Result<ir::LayerView> view = ir::BuildLayerView(g);
    ASSERT_TRUE(view.ok());
    for (size_t i = 0; i < m->layers.size(); ++i) {
      int forward = 0, backward = 0;
      for (ir::NodeId id : view->layers[i].forward) forward += cm.LaunchesKernel(g.node(id)) ? 1 : 0;
      for (ir::NodeId id : view->layers[i].backward) {
        const ir::Node& n = g.node(id);
        backward += n.kind != ir::OpKind::kOptimizer && cm.LaunchesKernel(n) ? 1 : 0;
      }
      EXPECT_EQ(m->layers[i].forward_kernels, forward);
      EXPECT_EQ(m->layers[i].backward_kernels, backward);
      EXPECT_NEAR(m->layers[i].forward_overhead_seconds, 1e-5 * forward, 1e-15);
      EXPECT_NEAR(m->layers[i].backward_overhead_seconds, 1e-5 * backward, 1e-15);
      double work = 0.0;
      for (ir::NodeId id : view->layers[i].forward) work += cm.ComputeTime(g.node(id));
      EXPECT_NEAR(m->layers[i].forward_seconds_per_sample * static_cast<double>(batch) + 1e-5 * forward, work, 1e-12);
      // A GPT layer: layernorms, 4 linears, attention's matmuls, softmax, dropouts, GELU, residuals.
      EXPECT_GE(m->layers[i].forward_kernels, 15);
      EXPECT_GT(m->layers[i].backward_kernels, m->layers[i].forward_kernels);
    }
    EXPECT_GT(m->embedding.forward_kernels, 0);
    EXPECT_GT(m->head.backward_kernels, 0);
  }
}

// Without a per-op overhead (no CPU profile), none is split from the per-sample work.
TEST(BuildLayerModel, NoOverheadWithoutAKernelTime) {
  Result<LayerModel> plain = BuildLayerModel(SmallGpt(4), 4, cost::CostModel(TestDevice()));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->layers[0].forward_overhead_seconds, 0.0);
  EXPECT_EQ(plain->layers[0].backward_overhead_seconds, 0.0);
}

// A 3-layer 16-bit GPT (seq 32, batch 2, hidden 64, 8 heads) on which Korthikanti et al.'s closed
// forms are checked, as a layer model.
struct KorthikantiGpt {
  static constexpr int64_t kSeq = 32, kBatch = 2, kHidden = 64, kHeads = 8;
  static Result<LayerModel> Build(models::AttentionKernel kernel, const cost::CostModel& cm) {
    models::ModelOverrides o;
    o.attention = kernel;
    o.layers = 3;
    o.hidden = kHidden;
    o.heads = kHeads;
    o.seq = kSeq;
    o.batch = kBatch;
    o.dtype = ir::DType::kF16;
    Result<models::ModelSpec> spec = models::LoadModel("gpt", o);
    if (!spec) return spec.error();
    Result<ir::Graph> g = models::BuildTrainingGraph(*spec);
    if (!g) return g.error();
    return BuildLayerModel(*g, kBatch, cm);
  }
};

// PyTorch's sequence parallelism (DTensor's styles, kiwi.torch.parallelize: runtime fsdp2) all-gathers the
// input of each column-parallel group and its linears save the gathered tensor: the attention's and the
// MLP's inputs (the norms' outputs, 2sbh each in 16-bit) stay whole on every rank, where Megatron saves
// their shards (eq. 4). So a TP rank's layer keeps sbh(34/t + 5as/(ht)) + 4sbh(1 - 1/t), and a
// checkpointed one recomputes the same intermediates less its input.
TEST(BuildLayerModel, TorchSequenceParallelKeepsTheGatheredInputsOfTheColumnParallelLinearsWhole) {
  const int64_t s = KorthikantiGpt::kSeq, b = KorthikantiGpt::kBatch, h = KorthikantiGpt::kHidden, a = KorthikantiGpt::kHeads;
  const cost::CostModel cm(TestDevice());
  Result<LayerModel> m = KorthikantiGpt::Build(models::AttentionKernel::kMaterialized, cm);
  ASSERT_TRUE(m.ok()) << m.error().message;
  LayerProfile mid = m->layers[1];
  const int64_t sbh = s * b * h, attention = 5 * a * s * s * b;
  EXPECT_EQ(mid.column_input_bytes_per_sample * b, 4 * sbh);
  EXPECT_FALSE(mid.sequence_parallel_saves_gathered_inputs);  // Megatron's: eq. 4 as above
  mid.sequence_parallel_saves_gathered_inputs = true;
  const LayerModel no_states;
  for (int t : {2, 4, 8}) {
    const PlacedLayer sp = OnTpGroup(mid, {.tp = t, .dp = 1, .sequence_parallel = true}, b);
    EXPECT_EQ(LayerMemory(sp, no_states).activations, (30 * sbh + attention) / t + 4 * sbh) << "t " << t;
    const PlacedLayer ckpt = OnTpGroup(mid, {.tp = t, .dp = 1, .checkpoint = true, .sequence_parallel = true}, b);
    EXPECT_EQ(LayerMemory(ckpt, no_states).activations, 2 * sbh / t) << "t " << t;
    EXPECT_EQ(RecomputedBytes(ckpt), (28 * sbh + attention) / t + 4 * sbh) << "t " << t;
    const PlacedLayer tp = OnTpGroup(mid, {.tp = t, .dp = 1}, b);  // without SP all 10sbh stay whole anyway
    EXPECT_EQ(LayerMemory(tp, no_states).activations, 10 * sbh + (24 * sbh + attention) / t) << "t " << t;
  }
}

// Korthikanti et al. 2023, eq. 2: a GPT middle layer in 16-bit saves 34sbh + 5as^2b, of which Megatron TP
// keeps 10sbh whole on every rank (norm inputs, column-parallel inputs, the masks after the row-parallel
// linears); one TP rank's activations of one micro-batch are sbh(10 + 24/t + 5as/(ht)) for t = 1, 2, 4, 8,
// and a checkpointed layer keeps its whole 2sbh input; with sequence parallelism (eq. 4) everything is split:
// sbh(34/t + 5as/(ht)), the checkpointed input 2sbh/t. With fused attention the 5as^2b of scores go; its
// output, which its backward reads, is the output projection's input (the heads merged by views), counted
// once: sbh(10 + 24/t).
TEST(BuildLayerModel, TpRankActivationsAreKorthikantis) {
  for (models::AttentionKernel kernel : {models::AttentionKernel::kMaterialized, models::AttentionKernel::kFused}) {
  SCOPED_TRACE(models::AttentionKernelName(kernel));
  const bool fused = kernel == models::AttentionKernel::kFused;
  const int64_t s = KorthikantiGpt::kSeq, b = KorthikantiGpt::kBatch, h = KorthikantiGpt::kHidden, a = KorthikantiGpt::kHeads;
  const cost::CostModel cm(TestDevice());
  Result<LayerModel> m = KorthikantiGpt::Build(kernel, cm);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const LayerProfile& mid = m->layers[1];
  const int64_t sbh = s * b * h, attention = fused ? 0 : 5 * a * s * s * b;
  EXPECT_EQ(mid.activation_bytes_per_sample * b, 34 * sbh + attention);
  EXPECT_EQ(mid.replicated_activation_bytes_per_sample * b, 10 * sbh);
  EXPECT_EQ(mid.boundary_bytes_per_sample * b, 2 * sbh);
  for (int t : {1, 2, 4, 8}) {
    for (bool checkpoint : {false, true}) {
      for (bool sp : {false, true}) {
      const PlacedLayer placed = OnTpGroup(mid, {.tp = t, .dp = 1, .checkpoint = checkpoint, .sequence_parallel = sp}, b);
      const LayerModel no_states;  // no model states: only the activations differ
      const int64_t kept = LayerMemory(placed, no_states).activations;
      if (sp && t > 1) {  // eq. 4: sbh(34/t + 5as/(ht)); checkpointed, the input's shard 2sbh/t
        if (!checkpoint) {
          EXPECT_EQ(kept, (34 * sbh + attention) / t) << "t " << t;
        } else {
          EXPECT_EQ(kept, 2 * sbh / t) << "t " << t;
          EXPECT_EQ(RecomputedBytes(placed), (32 * sbh + attention) / t) << "t " << t;
        }
      } else if (!checkpoint) {
        EXPECT_EQ(kept, 10 * sbh + (24 * sbh) / t + attention / t) << "t " << t;
      } else {
        EXPECT_EQ(kept, 2 * sbh) << "t " << t;  // the layer's input, whole on every rank
        EXPECT_EQ(RecomputedBytes(placed), 8 * sbh + (24 * sbh) / t + attention / t) << "t " << t;
      }
      }
    }
  }
  }
}

// Korthikanti et al. 2023 §5, eq. 6 and Table 2: selective recomputation drops the attention core's
// 5as^2b (softmax output 2as^2b, dropout mask as^2b, dropout output 2as^2b in 16 bits), split over TP
// like the heads: sbh(10 + 24/t) kept per TP rank, sbh 34/t with sequence parallelism, and the 5as^2b/t
// come back in the backward pass. Its recomputation is the core's forward (both batched matmuls, the
// softmax, the dropout): less than the whole layer's, no TP collectives. Fused attention keeps no
// scores: nothing to recompute, and the search leaves the choice out.
TEST(BuildLayerModel, SelectiveRecomputationIsKorthikantis) {
  for (models::AttentionKernel kernel : {models::AttentionKernel::kMaterialized, models::AttentionKernel::kFused}) {
    SCOPED_TRACE(models::AttentionKernelName(kernel));
    const bool fused = kernel == models::AttentionKernel::kFused;
    const int64_t s = KorthikantiGpt::kSeq, b = KorthikantiGpt::kBatch, h = KorthikantiGpt::kHidden,
                  a = KorthikantiGpt::kHeads, sbh = s * b * h, attention = 5 * a * s * s * b;
    const cost::CostModel cm(TestDevice());
    Result<LayerModel> m = KorthikantiGpt::Build(kernel, cm);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->HasAttentionCore(), !fused);
    EXPECT_EQ(m->embedding.attention_core_bytes_per_sample, 0);
    EXPECT_EQ(m->head.attention_core_bytes_per_sample, 0);
    const LayerProfile& mid = m->layers[1];
    if (fused) {
      EXPECT_EQ(mid.attention_core_bytes_per_sample, 0);
      EXPECT_EQ(mid.attention_core_kernels, 0);
      continue;
    }
    EXPECT_EQ(mid.attention_core_bytes_per_sample * b, attention);
    EXPECT_GT(mid.attention_core_seconds_per_sample, 0.0);
    EXPECT_LT(mid.attention_core_seconds_per_sample, mid.forward_seconds_per_sample);
    EXPECT_EQ(mid.attention_core_kernels, 5);  // scores, softmax, mask, dropout, context
    for (int t : {1, 2, 4, 8}) {
      cost::Cluster cluster;
      cluster.device = TestDevice();
      cluster.devices_per_node = t;
      cluster.intra_node = {"link", 1e11, 0.0};
      Result<StageMesh> mesh = MakeStageMesh(cluster, {1, 1, t});
      ASSERT_TRUE(mesh.ok()) << mesh.error().message;
      for (bool sp : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "t " << t << " sp " << sp);
        const auto placed = [&](bool checkpoint, bool selective) {
          return PlacedLayer{mid, {.tp = t, .dp = 1, .checkpoint = checkpoint, .sequence_parallel = sp,
                                   .selective_recompute = selective}, *mesh, b};
        };
        const PlacedLayer none = placed(false, false), selective = placed(false, true), full = placed(true, true);
        const LayerModel no_states;
        const auto kept = [&](const PlacedLayer& l) {
          return LayerMemory(l, no_states).activations;
        };
        EXPECT_EQ(kept(selective), sp && t > 1 ? 34 * sbh / t : 10 * sbh + 24 * sbh / t);
        EXPECT_EQ(kept(none) - kept(selective), attention / t);
        EXPECT_EQ(RecomputedBytes(selective), attention / t);
        EXPECT_EQ(TransientBytes(selective) - TransientBytes(none), attention / t);
        EXPECT_FALSE(full.strategy.SelectiveRecompute());  // whole-layer checkpointing recomputes the core anyway
        EXPECT_EQ(kept(full), sp && t > 1 ? 2 * sbh / t : 2 * sbh);
        StageCost c_none, c_selective, c_full;
        AddLayerCost(none, cm, c_none);
        AddLayerCost(selective, cm, c_selective);
        AddLayerCost(full, cm, c_full);
        EXPECT_EQ(c_none.recompute, 0.0);
        EXPECT_GT(c_selective.recompute, 0.0);
        EXPECT_LT(c_selective.recompute, c_full.recompute);
        EXPECT_DOUBLE_EQ(c_selective.compute, c_none.compute);
        EXPECT_DOUBLE_EQ(c_selective.communication, c_none.communication);
        EXPECT_EQ(LayerCommunicationOf(selective).TpAllReduces(), LayerCommunicationOf(none).TpAllReduces());
      }
    }
  }
}

// Megatron's TP layout of GPT (hidden 64, seq 32, vocabulary 50257, fp32): a layer keeps its 2
// layernorms and the out/fc2 biases whole (6h values); the embedding splits the word table over TP,
// keeps the position table whole and all-reduces its output [seq, h]; the head splits the LM head,
// keeps the final norm whole, all-reduces max, target logit and sum of exps per token (fp32)
// forward and its input gradient [seq, h] backward (Megatron's g and f operators on the boundary, which
// sequence parallelism turns into reduce-scatter / all-gather pairs).
TEST(BuildLayerModel, MegatronTpSplitOfGpt) {
  const cost::CostModel cm(TestDevice());
  Result<LayerModel> m = BuildLayerModel(SmallGpt(2), 2, cm);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const int64_t h = 64, seq = 32, vocab = 50257;
  for (const LayerProfile& p : m->layers) {
    EXPECT_EQ(p.replicated_parameter_bytes, 6 * h * 4);
    EXPECT_EQ(p.parameter_bytes, (12 * h * h + 13 * h) * 4);
    EXPECT_TRUE(p.tp_forward_all_reduce_bytes_per_sample.empty());
    EXPECT_TRUE(p.tp_backward_all_reduce_bytes_per_sample.empty());
  }
  EXPECT_EQ(m->embedding.name, "embedding");
  EXPECT_EQ(m->embedding.parameter_bytes, (vocab + seq) * h * 4);
  EXPECT_EQ(m->embedding.replicated_parameter_bytes, seq * h * 4);
  EXPECT_EQ(m->embedding.boundary_bytes_per_sample, seq * h * 4);
  EXPECT_EQ(m->embedding.tp_forward_all_reduce_bytes_per_sample, std::vector<int64_t>{seq * h * 4});
  EXPECT_TRUE(m->embedding.tp_backward_all_reduce_bytes_per_sample.empty());
  EXPECT_EQ(m->embedding.tp_forward_g_operators, 1);  // its output all-reduce is Megatron's g
  EXPECT_EQ(m->embedding.tp_backward_f_operators, 0);
  EXPECT_EQ(m->head.name, "head");
  EXPECT_EQ(m->head.parameter_bytes, (2 * h + h * vocab) * 4);
  EXPECT_EQ(m->head.replicated_parameter_bytes, 2 * h * 4);
  EXPECT_EQ(m->head.tp_forward_all_reduce_bytes_per_sample, std::vector<int64_t>(3, seq * 4));
  EXPECT_EQ(m->head.tp_backward_all_reduce_bytes_per_sample, std::vector<int64_t>{seq * h * 4});
  EXPECT_EQ(m->head.tp_forward_g_operators, 0);  // the loss's statistics are no g
  EXPECT_EQ(m->head.tp_backward_f_operators, 1);  // the input gradient's all-reduce is f's
}

// What Megatron TP runs whole on every rank without sequence parallelism (Korthikanti et al. 2023
// §4.2.2: the layernorms, dropouts and residual adds, the regions SP splits): in a GPT layer every
// forward op from [s, b, h] tensors to one but the two row-parallel linears, and the backward ops of
// their gradients. The layer's time under TP t is then (all - whole) / t + whole per sample; with SP, all / t.
TEST(BuildLayerModel, TpRunsTheNormsDropoutsAndResidualsWholeWithoutSequenceParallelism) {
  const cost::CostModel cm(TestDevice());
  const ir::Graph g = SmallGpt(2);
  Result<LayerModel> m = BuildLayerModel(g, 2, cm);
  ASSERT_TRUE(m.ok()) << m.error().message;
  Result<ir::LayerView> view = ir::BuildLayerView(g);
  ASSERT_TRUE(view.ok()) << view.error().message;
  const ir::Layer& layer = view->layers[1];
  std::vector<ir::NodeId> forward, backward;
  std::vector<bool> whole(static_cast<size_t>(g.size()), false);
  ir::Shape sbh;
  for (ir::NodeId id : layer.forward) {  // [s, b, h]: the layer's output, its last forward op
    const ir::Node& n = g.node(id);
    if (!n.is_backward() && !n.is_persistent()) sbh = n.output.shape;
  }
  for (ir::NodeId id : layer.forward) {
    const ir::Node& n = g.node(id);
    const bool on_sbh = std::all_of(n.inputs.begin(), n.inputs.end(), [&](ir::NodeId in) {
      return g.node(in).is_persistent() || g.node(in).output.shape == sbh;  // not the heads' merge into [s, b, h]
    });
    if (n.is_backward() || n.is_persistent() || n.kind == ir::OpKind::kMatmul || n.output.shape != sbh || !on_sbh) continue;
    whole[static_cast<size_t>(id)] = true;
    forward.push_back(id);
  }
  for (ir::NodeId id : layer.backward)
    if (g.node(id).grad_of != ir::kNoNode && whole[static_cast<size_t>(g.node(id).grad_of)]) backward.push_back(id);
  EXPECT_GE(forward.size(), 8u);  // 2 norms, 2 dropouts and their masks, 2 residual adds
  const LayerProfile& p = m->layers[1];
  EXPECT_DOUBLE_EQ(p.replicated_forward_seconds_per_sample, SumPassWork(g, forward, cm).seconds / 2);
  EXPECT_DOUBLE_EQ(p.replicated_backward_seconds_per_sample, SumPassWork(g, backward, cm).seconds / 2);
  EXPECT_GT(p.replicated_forward_seconds_per_sample, 0.0);
  EXPECT_LT(p.replicated_forward_seconds_per_sample, p.forward_seconds_per_sample / 2);

  // The layer's compute under TP 4 (no launch bound: overheads and kernels zero).
  LayerProfile bare = p;
  bare.forward_overhead_seconds = bare.backward_overhead_seconds = 0.0;
  bare.forward_kernels = bare.backward_kernels = 0;
  for (bool sp : {false, true}) {
    const PlacedLayer placed = OnTpGroup(bare, {.tp = 4, .dp = 1, .sequence_parallel = sp}, 8);
    StageCost cost;
    AddLayerCost(placed, cm, cost);
    const double all = p.forward_seconds_per_sample + p.backward_seconds_per_sample;
    const double rep = p.replicated_forward_seconds_per_sample + p.replicated_backward_seconds_per_sample;
    EXPECT_NEAR(cost.compute, sp ? 8 * all / 4 : 8 * ((all - rep) / 4 + rep), 1e-12 * 8 * all) << "sp " << sp;
  }
}

// A two-layer Llama-style model (bf16, no dropout) whose MLPs are mixtures of `experts` top-k (kMoeTopK)
// SwiGLU experts (0: dense), as a layer model; `training` receives its training graph.
constexpr int64_t kMoeHidden = 64, kMoeFfn = 96, kMoeSeq = 16, kMoeBatch = 2, kMoeTopK = 2;
LayerModel MoeLayerModel(const cost::CostModel& cm, int64_t experts, int64_t shared = 0, double capacity_factor = 1.0,
                         ir::Graph* training = nullptr) {
  models::TransformerConfig c;
  c.family = models::Family::kLlama, c.layers = 2, c.hidden = kMoeHidden, c.heads = 4, c.kv_heads = 2, c.ffn = kMoeFfn;
  c.seq = kMoeSeq, c.batch = kMoeBatch, c.vocab = 101, c.dtype = ir::DType::kBF16, c.dropout = false;
  c.experts = experts, c.top_k = experts > 0 ? kMoeTopK : 0, c.shared_expert_ffn = shared;
  c.capacity_factor = capacity_factor;
  Result<ir::Graph> forward = models::BuildTransformerForward(c);
  EXPECT_TRUE(forward.ok()) << forward.error().message;
  Result<ir::Graph> graph = ir::BuildTrainingGraph(*forward, {.optimizer = ir::Optimizer::kAdam, .master_weights = true});
  EXPECT_TRUE(graph.ok()) << graph.error().message;
  Result<LayerModel> m = BuildLayerModel(*graph, kMoeBatch, cm);
  EXPECT_TRUE(m.ok()) << m.error().message;
  if (training) *training = *graph;
  return *m;
}

// Under TP the head's loss is Megatron's vocabulary-parallel cross-entropy, not the graph's fused
// loss: the head's profile carries the difference of the two on the whole vocabulary (the fused loss's
// forward op, and its two backward ops nll_loss_grad and cross_entropy_grad, taken out); no other part does.
// A mixture of experts under TP (Megatron-LM's expert tensor parallelism): the router and the norms
// are whole on every rank, each expert's linears split like a dense SwiGLU's; each token runs top_k
// experts, so the split activations of its experts (gate, silu, up and their product: 4 T f per
// expert row) are k times a dense SwiGLU's of the same width.
TEST(BuildLayerModel, MixtureOfExpertsKeepsTheRouterWholeAndSplitsTheExperts) {
  const cost::CostModel cm(TestDevice());
  const int64_t h = kMoeHidden, f = kMoeFfn, seq = kMoeSeq, experts = 4, k = kMoeTopK, bytes = 2;
  const auto layer_model = [&](int64_t n_experts, int64_t shared = 0) { return MoeLayerModel(cm, n_experts, shared); };
  const LayerModel moe = layer_model(experts), dense = layer_model(0);
  const LayerProfile& e = moe.layers[1];
  const LayerProfile& d = dense.layers[1];
  EXPECT_EQ(e.replicated_parameter_bytes, (2 * h + h * experts) * bytes);  // the norms and the router
  EXPECT_EQ(d.replicated_parameter_bytes, 2 * h * bytes);
  EXPECT_EQ(e.parameter_bytes - d.parameter_bytes, ((experts - 1) * 3 * h * f + h * experts) * bytes);
  const int64_t tokens = seq;  // per sample
  EXPECT_EQ((e.activation_bytes_per_sample - e.replicated_activation_bytes_per_sample) -
                (d.activation_bytes_per_sample - d.replicated_activation_bytes_per_sample),
            4 * tokens * f * (k - 1) * bytes);
  EXPECT_EQ(e.tp_comm_bytes_per_sample, d.tp_comm_bytes_per_sample);  // one all-reduce per sublayer, as dense
  // What expert parallelism splits and sends: the experts' weights, each token's k routed rows.
  EXPECT_EQ(e.experts, experts);
  EXPECT_EQ(e.expert_parameter_bytes, experts * 3 * h * f * bytes);
  EXPECT_EQ(e.routed_bytes_per_sample, k * tokens * h * bytes);
  EXPECT_EQ(d.experts, 0);
  EXPECT_EQ(d.expert_parameter_bytes, 0);
  EXPECT_EQ(moe.MaxExperts(), experts);
  EXPECT_EQ(dense.MaxExperts(), 0);
  // Qwen2-MoE's shared expert: a dense SwiGLU split like one, its sigmoid gate [h, 1] whole.
  const LayerModel with_shared = layer_model(experts, 32);
  const LayerProfile& s = with_shared.layers[1];
  EXPECT_EQ(s.parameter_bytes - e.parameter_bytes, (3 * h * 32 + h) * bytes);
  EXPECT_EQ(s.replicated_parameter_bytes - e.replicated_parameter_bytes, h * bytes);
  EXPECT_EQ(s.expert_parameter_bytes, e.expert_parameter_bytes);
}

// Megatron's expert TP under sequence parallelism (the all-to-all token dispatcher): each rank routes its
// own 1/tp of the tokens, the TP group all-gathers the dispatched rows before the experts and
// reduce-scatters their outputs, so each rank keeps the k T h rows the experts read whole; attention's
// out (and a shared expert's down) keep SP's [s, b, h] pair; each rank sorts the gathered rows by its
// local experts and back, a routed gather's work each on all of them.
TEST(BuildLayerModel, ExpertTpUnderSequenceParallelismGathersTheRoutedRowsWhole) {
  const cost::CostModel cm(TestDevice());
  const int64_t h = kMoeHidden, seq = kMoeSeq, experts = 4, k = kMoeTopK, bytes = 2, micro = 2;
  const auto layer = [&](int64_t n_experts, int64_t shared) { return MoeLayerModel(cm, n_experts, shared).layers[1]; };
  const LayerProfile e = layer(experts, 0), shared = layer(experts, 32), dense = layer(0, 0);
  const int64_t rows = k * seq * h * bytes;  // per sample: the dispatch's output, each token's k rows
  EXPECT_EQ(e.gathered_activation_bytes_per_sample, rows);
  EXPECT_EQ(shared.gathered_activation_bytes_per_sample, rows);
  EXPECT_EQ(dense.gathered_activation_bytes_per_sample, 0);
  EXPECT_EQ(e.row_parallel_linears, 1);       // attention's out
  EXPECT_EQ(shared.row_parallel_linears, 2);  // and the shared expert's down
  EXPECT_EQ(dense.row_parallel_linears, 2);
  EXPECT_GT(e.routed_gather_forward_seconds_per_sample, 0.0);
  EXPECT_GT(e.routed_gather_backward_seconds_per_sample, 0.0);
  EXPECT_LT(e.routed_gather_forward_seconds_per_sample, e.forward_seconds_per_sample);
  EXPECT_EQ(dense.routed_gather_forward_seconds_per_sample, 0.0);

  const auto place = [&](const LayerProfile& p, int tp, bool sp, bool checkpoint = false) {
    return OnTpGroup(p, {.tp = tp, .dp = 1, .checkpoint = checkpoint, .sequence_parallel = sp}, micro);
  };
  const LayerModel no_states;
  const int64_t t = 4;
  // Memory: SP splits all but the gathered rows.
  EXPECT_EQ(LayerMemory(place(e, t, true), no_states).activations,
            (e.activation_bytes_per_sample - rows) * micro / t + rows * micro);
  EXPECT_EQ(LayerMemory(place(dense, t, true), no_states).activations, dense.activation_bytes_per_sample * micro / t);
  // Checkpointed: the input's shard kept, the rest (gathered rows whole) recomputed.
  EXPECT_EQ(RecomputedBytes(place(e, t, true, true)),
            (e.activation_bytes_per_sample - e.boundary_bytes_per_sample - rows) * micro / t + rows * micro);
  // Without SP the rows are among what TP keeps whole anyway: as before.
  EXPECT_EQ(LayerMemory(place(e, t, false), no_states).activations,
            (e.activation_bytes_per_sample - e.replicated_activation_bytes_per_sample) * micro / t +
                e.replicated_activation_bytes_per_sample * micro);
  // Collectives: attention's [s, b, h] pair (all-gathered again in the backward pass) and the routed
  // rows' pair; a shared expert adds its own [s, b, h] pair.
  const int64_t b = e.boundary_bytes_per_sample * micro, r = e.routed_bytes_per_sample * micro;
  EXPECT_EQ(r, rows * micro);
  const LayerCommunication c = LayerCommunicationOf(place(e, t, true));
  EXPECT_EQ(c.SequenceAllGatherBytes(), (b + r) + (2 * b + r));
  EXPECT_EQ(c.SequenceReduceScatterBytes(), (b + r) + (b + r));
  EXPECT_EQ(c.TpAllReduceBytes(), 0);
  const LayerCommunication cs = LayerCommunicationOf(place(shared, t, true));
  EXPECT_EQ(cs.SequenceAllGatherBytes(), (2 * b + r) + (4 * b + r));
  EXPECT_EQ(cs.SequenceReduceScatterBytes(), (2 * b + r) + (2 * b + r));
  // Without SP: Megatron TP's two all-reduces per pass, as a dense layer's.
  EXPECT_EQ(LayerCommunicationOf(place(e, t, false)).TpAllReduceBytes(), 4 * b);
  // Time: the sorts of the gathered rows, whole on each rank (4 experts, more than the rank's one).
  StageCost with_sp, split;
  AddLayerCost(place(e, t, true), cm, with_sp);
  LayerProfile no_sort = e;
  no_sort.routed_gather_forward_seconds_per_sample = no_sort.routed_gather_backward_seconds_per_sample = 0.0;
  AddLayerCost(place(no_sort, t, true), cm, split);
  EXPECT_NEAR(with_sp.compute - split.compute,
              (e.routed_gather_forward_seconds_per_sample + e.routed_gather_backward_seconds_per_sample) * micro, 1e-12);
}

// A capacity factor c gives each expert ceil(c T k / E) slots (GShard): the experts' matmuls, their
// kept activations and the rows each all-to-all carries grow by c; the weights do not.
TEST(BuildLayerModel, CapacityFactorPadsEveryExpertsSlots) {
  const cost::CostModel cm(TestDevice());
  const int64_t h = kMoeHidden, f = kMoeFfn, seq = kMoeSeq, batch = kMoeBatch, experts = 4, k = kMoeTopK, bytes = 2;
  const auto layer_model = [&](double capacity_factor) {
    ir::Graph training;
    LayerModel m = MoeLayerModel(cm, experts, 0, capacity_factor, &training);
    int64_t slots = 0;
    for (const ir::Node& n : training.nodes())
      if (n.name == "layer1.mlp.slots") slots = n.output.shape.back();
    EXPECT_EQ(slots, static_cast<int64_t>(std::ceil(capacity_factor * seq * batch * k / experts)));
    return m;
  };
  const LayerProfile even = layer_model(1.0).layers[1], padded = layer_model(1.25).layers[1];
  EXPECT_EQ(padded.parameter_bytes, even.parameter_bytes);
  EXPECT_EQ(even.routed_bytes_per_sample, k * seq * h * bytes);
  EXPECT_EQ(padded.routed_bytes_per_sample, 5 * k * seq * h * bytes / 4);  // 80 of 64 slots per expert
  // the experts' split activations (gate, silu, up, product: 4 f per row) grow with the rows
  EXPECT_EQ((padded.activation_bytes_per_sample - padded.replicated_activation_bytes_per_sample) -
                (even.activation_bytes_per_sample - even.replicated_activation_bytes_per_sample),
            4 * (k * seq / 4) * f * bytes);
  EXPECT_GT(padded.forward_seconds_per_sample, even.forward_seconds_per_sample);
}

TEST(BuildLayerModel, TheHeadUnderTpRunsMegatronsVocabularyParallelLoss) {
  const int64_t batch = 2, seq = 32, vocab = 50257;
  const ir::Graph g = SmallGpt(batch);
  const cost::CostModel cm(TestDevice());
  Result<LayerModel> m = BuildLayerModel(g, batch, cm);
  ASSERT_TRUE(m.ok()) << m.error().message;
  double fused_forward = 0.0, fused_backward = 0.0;
  for (const ir::Node& n : g.nodes()) {
    if (n.kind == ir::OpKind::kLoss && !n.is_backward()) fused_forward += cm.ComputeTime(n);
    if (n.op == "nll_loss_grad" || n.op == "cross_entropy_grad") fused_backward += cm.ComputeTime(n);
  }
  ASSERT_GT(fused_forward, 0.0);
  ASSERT_GT(fused_backward, 0.0);
  const double logits = static_cast<double>(batch * seq * vocab * 4);  // 800 GB/s: forward 8x, backward 2x
  EXPECT_NEAR(m->head.tp_loss_forward_seconds_per_sample, (8 * logits / 8e11 - fused_forward) / batch, 1e-15);
  EXPECT_NEAR(m->head.tp_loss_backward_seconds_per_sample, (2 * logits / 8e11 - fused_backward) / batch, 1e-15);
  EXPECT_EQ(m->head.tp_loss_forward_kernels, 14 - 1);
  EXPECT_EQ(m->head.tp_loss_backward_kernels, 5 - 2);
  EXPECT_EQ(m->embedding.tp_loss_forward_seconds_per_sample, 0.0);
  for (const LayerProfile& p : m->layers) EXPECT_EQ(p.tp_loss_backward_kernels, 0);
}

// What Megatron TP runs whole on every rank outside the layers: the embeddings' lookups (each rank looks
// up every token in its vocabulary shard), with or without SP, and without SP all of the embeddings
// (position add, dropout) and the head's final norm, with their kept tensors (and the token ids and
// targets every rank reads); the logits stay split.
TEST(BuildLayerModel, TpRunsTheEmbeddingsLookupsAndTheFinalNormWhole) {
  const int64_t batch = 2;
  const ir::Graph g = SmallGpt(batch);
  const cost::CostModel cm(TestDevice());
  Result<LayerModel> m = BuildLayerModel(g, batch, cm);
  ASSERT_TRUE(m.ok()) << m.error().message;
  double lookups = 0.0, norm = 0.0;
  int64_t norm_output = 0, targets = 0;
  for (const ir::Node& n : g.nodes()) {
    if (n.layer >= 0 || n.is_backward()) continue;
    const bool head = n.scope.rfind("head", 0) == 0;
    if (!head && n.kind == ir::OpKind::kEmbedding) lookups += cm.ComputeTime(n);
    if (head && n.kind == ir::OpKind::kLayerNorm) norm += cm.ComputeTime(n), norm_output += n.output.Bytes();
    if (head && n.kind == ir::OpKind::kInput) targets += n.output.Bytes();  // kept for the loss's gradient
  }
  const LayerProfile& e = m->embedding;
  const LayerProfile& h = m->head;
  ASSERT_GT(lookups, 0.0);
  ASSERT_GT(norm, 0.0);
  EXPECT_NEAR(e.lookup_forward_seconds_per_sample, lookups / batch, 1e-15);
  EXPECT_GT(e.lookup_backward_seconds_per_sample, 0.0);  // the embedding gradients
  EXPECT_NEAR(e.replicated_forward_seconds_per_sample, e.forward_seconds_per_sample, 1e-15);
  EXPECT_NEAR(e.replicated_backward_seconds_per_sample, e.backward_seconds_per_sample, 1e-15);
  EXPECT_EQ(e.replicated_activation_bytes_per_sample, e.activation_bytes_per_sample);
  EXPECT_NEAR(h.replicated_forward_seconds_per_sample, norm / batch, 1e-15);
  EXPECT_EQ(h.replicated_activation_bytes_per_sample, (norm_output + targets) / batch);
  EXPECT_EQ(h.lookup_forward_seconds_per_sample, 0.0);
  for (const LayerProfile& p : m->layers) EXPECT_EQ(p.lookup_forward_seconds_per_sample, 0.0);
  // Priced: at TP 4 without SP the embeddings take one device's time; with SP all but the lookups split.
  const auto compute = [&](int tp, bool sp) {
    StageCost c;
    AddLayerCost(OnTpGroup(e, {.tp = tp, .dp = 1, .sequence_parallel = sp}, batch), cm, c);
    return c.compute;
  };
  const double one = (e.forward_seconds_per_sample + e.backward_seconds_per_sample) * batch;
  const double lookup = (e.lookup_forward_seconds_per_sample + e.lookup_backward_seconds_per_sample) * batch;
  EXPECT_NEAR(compute(1, false), one, 1e-12);
  EXPECT_NEAR(compute(4, false), one, 1e-12);
  EXPECT_NEAR(compute(4, true), (one - lookup) / 4 + lookup, 1e-12);
}

TEST(BuildLayerModel, PerSampleActivationsDoNotDependOnTheGraphBatch) {
  const cost::CostModel cm(TestDevice());
  Result<LayerModel> two = BuildLayerModel(SmallGpt(2), 2, cm);
  Result<LayerModel> four = BuildLayerModel(SmallGpt(4), 4, cm);
  ASSERT_TRUE(two.ok() && four.ok());
  for (size_t i = 0; i < two->layers.size(); ++i) {
    EXPECT_EQ(two->layers[i].activation_bytes_per_sample, four->layers[i].activation_bytes_per_sample);
    EXPECT_EQ(two->layers[i].boundary_bytes_per_sample, four->layers[i].boundary_bytes_per_sample);
    EXPECT_EQ(two->layers[i].parameter_bytes, four->layers[i].parameter_bytes);
  }
}

TEST(BuildLayerModel, MixedPrecisionAdamHasSevenStateBytesPerParameterByte) {
  // Llama 2 trains in bf16 with fp32 master weights: 2-byte gradient, 4 + 4 + 4 bytes of master
  // copy and moments per 2-byte parameter (the 16 bytes per parameter of ZeRO, Rajbhandari 2020).
  models::ModelOverrides o;
  o.layers = 1;
  o.hidden = 64;
  o.heads = 4;
  o.seq = 16;
  o.batch = 1;
  o.ffn = 128;
  Result<models::ModelSpec> spec = models::LoadModel("llama2-7b", o);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  ASSERT_TRUE(spec->training.master_weights);
  Result<ir::Graph> g = models::BuildTrainingGraph(*spec);
  ASSERT_TRUE(g.ok()) << g.error().message;
  Result<LayerModel> m = BuildLayerModel(*g, 1, cost::CostModel(TestDevice()));
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_DOUBLE_EQ(m->state_bytes_per_parameter_byte, 7.0);
}

TEST(BuildLayerModel, OneDeviceSimulationHoldsEveryParameterStateAndActivation) {
  const int64_t batch = 2;
  const ir::Graph g = SmallGpt(batch);
  cost::Cluster cluster;
  cluster.name = "one";
  cluster.device = TestDevice();
  cluster.intra_node = {"fast", 1e9, 0.0};
  cluster.inter_node = {"slow", 1e8, 0.0};
  const cost::CostModel cm(cluster.device);
  Result<LayerModel> m = BuildLayerModel(g, batch, cm);
  ASSERT_TRUE(m.ok());
  plan::LayerPlan plan;
  plan.layers.assign(m->layers.size(), plan::LayerStrategy{});
  plan.global_batch = batch;
  Result<LayerSimResult> r = SimulateLayerPlan(*m, plan, cluster, cm);
  ASSERT_TRUE(r.ok()) << r.error().message;
  int64_t transient = std::max(m->embedding.backward_transient_bytes_per_sample, m->head.backward_transient_bytes_per_sample);
  for (const LayerProfile& p : m->layers) transient = std::max(transient, p.backward_transient_bytes_per_sample);
  EXPECT_EQ(r->summary.peak_memory_bytes,
            4 * TotalParameterBytes(g) + ir::SavedActivationBytes(g, -1) + transient * batch);
  EXPECT_GT(r->summary.time.compute, 0.0);
  EXPECT_DOUBLE_EQ(r->summary.time.communication, 0.0);
}

// A tied word embedding (HuggingFace's GPT-2) is counted once, on the embeddings; in a pipeline the last
// stage holds a copy beside the head, and each end all-reduces its gradient with the other once per step
// (Megatron-LM's embedding group, kiwi.torch's tied_embedding.py), as that end holds it: split over TP,
// and over DP under ZeRO.
TEST(BuildLayerModel, TiedEmbeddingHasACopyOnTheLastStageAndSumsItsGradient) {
  Result<models::ModelSpec> spec = models::ParseHfConfig(
      R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 32, "vocab_size": 96})",
      "gpt2.json", {.batch = 4});
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  Result<ir::Graph> g = models::BuildTrainingGraph(*spec);
  ASSERT_TRUE(g.ok()) << g.error().message;
  cost::Cluster cluster;
  cluster.name = "four";
  cluster.device = TestDevice();
  cluster.devices_per_node = 4;
  cluster.intra_node = {"fast", 1e10, 0.0};
  const cost::CostModel cm(cluster.device);
  Result<LayerModel> m = BuildLayerModel(*g, 4, cm);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const int64_t word = 96 * 64 * 4;  // fp32 [vocab, hidden]
  EXPECT_EQ(m->tied_embedding_bytes, word);
  EXPECT_EQ(m->embedding.parameter_bytes, word + 32 * 64 * 4);  // with the positions
  EXPECT_EQ(PipelinedHead(*m, 1), m->head);
  EXPECT_EQ(PipelinedHead(*m, 2).parameter_bytes, m->head.parameter_bytes + word);

  plan::LayerPlan pipelined;
  pipelined.layers.assign(2, plan::LayerStrategy{.dp = 2, .zero = plan::Zero::kGradients});
  pipelined.pp_degree = 2;
  pipelined.pp_partition = {1, 1};
  pipelined.global_batch = 4;
  pipelined.micro_batches = 2;
  Result<PlanTraffic> t = LayerPlanTraffic(*m, pipelined, cluster);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->embedding.tied_all_reduce_bytes, word / 2);  // ZeRO-2 over 2: this rank's rows
  EXPECT_EQ(t->head.tied_all_reduce_bytes, word / 2);
  plan::LayerPlan replicated = pipelined;
  for (plan::LayerStrategy& s : replicated.layers) s.zero = plan::Zero::kNone;
  t = LayerPlanTraffic(*m, replicated, cluster);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->head.tied_all_reduce_bytes, word);  // DP: the whole weight
  // The copy costs the last stage memory and the step a sync; without stages there is none.
  Result<LayerSimResult> tied = SimulateLayerPlan(*m, pipelined, cluster, cm);
  LayerModel untied = *m;
  untied.tied_embedding_bytes = 0;
  Result<LayerSimResult> once = SimulateLayerPlan(untied, pipelined, cluster, cm);
  ASSERT_TRUE(tied.ok()) << tied.error().message;
  ASSERT_TRUE(once.ok()) << once.error().message;
  EXPECT_GT(tied->stages[1].peak_memory_bytes, once->stages[1].peak_memory_bytes + word);  // weights + states
  EXPECT_EQ(tied->stages[0].peak_memory_bytes, once->stages[0].peak_memory_bytes);
  EXPECT_GT(tied->summary.iteration_seconds, once->summary.iteration_seconds);
  plan::LayerPlan single = pipelined;
  single.pp_degree = 1;
  single.pp_partition = {2};
  single.micro_batches = 1;
  single.layers.assign(2, plan::LayerStrategy{.dp = 4, .zero = plan::Zero::kGradients});
  t = LayerPlanTraffic(*m, single, cluster);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->embedding.tied_all_reduce_bytes + t->head.tied_all_reduce_bytes, 0);
}

TEST(BuildLayerModel, RejectsANonPositiveGraphBatch) {
  Result<LayerModel> m = BuildLayerModel(SmallGpt(2), 0, cost::CostModel(TestDevice()));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, ErrorCode::kBadInput);
  EXPECT_NE(m.error().message.find("graph batch"), std::string::npos);
}

}  // namespace
}  // namespace kiwi::sim
