// Context parallelism's terms of a layer against closed forms: a device of a CP group holds 1 / cp of
// each sample of its replica's micro-batch, so its activations, compute and model states equal those
// of its cp 1 twin with that share; the ring attention sends its keys and values (split over TP by
// heads) cp - 1 times forward and 2 (cp - 1) times backward (again when recomputed), each hop costing
// only what its send a + n / B takes beyond the attention block it overlaps (1 / cp of the pass's
// attention); neighbouring layers of different CP degrees exchange the boundary in all-to-alls.
#include <gtest/gtest.h>

#include <algorithm>

#include "cost_test_util.h"
#include "kiwi/cost/layer_cost.h"

namespace kiwi::cost {
namespace {

using testing::OneNode;

LayerProfile AttentionLayer() {
  LayerProfile p;
  p.name = "layer";
  p.parameter_bytes = 1'000'000;
  p.replicated_parameter_bytes = 2'000;
  p.activation_bytes_per_sample = 3'000'000;
  p.replicated_activation_bytes_per_sample = 1'000'000;
  p.boundary_bytes_per_sample = 100'000;
  p.backward_transient_bytes_per_sample = 400'000;
  p.tp_comm_bytes_per_sample = 200'000;
  p.forward_seconds_per_sample = 1e-3;
  p.backward_seconds_per_sample = 2e-3;
  p.attention_sequence = 4096;
  p.attention_kv_bytes_per_sample = 800'000;
  p.attention_forward_seconds_per_sample = 4e-4;
  p.attention_backward_seconds_per_sample = 8e-4;
  return p;
}

LayerModel MixedAdam() {
  LayerModel m;
  m.state_bytes_per_parameter_byte = 7.0;
  m.gradient_bytes_per_parameter_byte = 1.0;
  return m;
}

PlacedLayer Place(const LayerProfile& p, const plan::LayerStrategy& s, int64_t microbatch) {
  Result<StageMesh> mesh = MakeLayerMesh(OneNode(8), 1, s);
  EXPECT_TRUE(mesh.ok()) << mesh.error().message;
  return {p, s, *mesh, microbatch};
}

TEST(ContextParallelism, ADeviceHoldsItsShareOfEachSample) {
  const LayerProfile p = AttentionLayer();
  const plan::LayerStrategy cp{.tp = 2, .dp = 4, .zero = plan::Zero::kOptimizerStates, .sequence_parallel = true, .cp = 4};
  plan::LayerStrategy twin = cp;
  twin.cp = 1;
  // One sample per replica over 4 ranks = a quarter of a sample per device; the twin at 1 sample per
  // device with 4x the batch over the same devices holds 4x as much.
  const StageMemory split = LayerMemory(Place(p, cp, 1), MixedAdam());
  const StageMemory whole = LayerMemory(Place(p, twin, 1), MixedAdam());
  EXPECT_EQ(split.model_states, whole.model_states);  // weights replicated over the CP group, ZeRO over all dp
  // SP-TP2: all of the layer's 3,000,000 bytes per sample split over TP, then a quarter of a sample.
  EXPECT_EQ(split.activations, 3'000'000 / 4 / 2);
  EXPECT_EQ(whole.activations, 3'000'000 / 2);
  // The transient holds the backward's gradients in flight plus another rank's keys and values and their
  // gradients: 2 ring sends of 800,000 / 4 / 2 bytes.
  EXPECT_EQ(split.transient, 400'000 / 4 / 2 + 2 * (800'000 / 4 / 2));
  // At 4 samples per replica a device holds one sample: its twin's share at 1 sample, plus the buffers.
  const StageMemory four = LayerMemory(Place(p, cp, 4), MixedAdam());
  EXPECT_EQ(four.activations, whole.activations);
  EXPECT_EQ(four.transient, whole.transient + 2 * (800'000 / 2));
}

TEST(ContextParallelism, TheRingSendsKeysAndValuesCpMinusOneTimesPerPass) {
  const LayerProfile p = AttentionLayer();
  plan::LayerStrategy s{.tp = 1, .dp = 8, .cp = 4};
  LayerCommunication c = LayerCommunicationOf(Place(p, s, 2));
  EXPECT_EQ(c.ring_bytes, 800'000 * 2 / 4);  // a device's half sample of keys and values
  EXPECT_EQ(c.ring_sends, 3 * (4 - 1));      // forward, backward twice (with the gradients)
  EXPECT_EQ(c.ring_sends_recomputed, 0);
  s.checkpoint = true;
  EXPECT_EQ(LayerCommunicationOf(Place(p, s, 2)).ring_sends_recomputed, 4 - 1);
  s.checkpoint = false;
  s.selective_recompute = true;  // the attention core's recomputation needs the keys and values again
  EXPECT_EQ(LayerCommunicationOf(Place(p, s, 2)).ring_sends_recomputed, 4 - 1);
  s = {.tp = 2, .dp = 4, .sequence_parallel = true, .cp = 2};
  EXPECT_EQ(LayerCommunicationOf(Place(p, s, 2)).ring_bytes, 800'000 * 2 / 2 / 2);  // heads over TP
  s.cp = 1;
  EXPECT_EQ(LayerCommunicationOf(Place(p, s, 2)).ring_sends, 0);
  // The gradient sync is over all dp ranks, as without CP.
  s = {.tp = 1, .dp = 8, .cp = 4};
  plan::LayerStrategy twin = s;
  twin.cp = 1;
  EXPECT_EQ(LayerCommunicationOf(Place(p, s, 2)).gradient_sync_bytes, LayerCommunicationOf(Place(p, twin, 1)).gradient_sync_bytes);
}

TEST(ContextParallelism, AHopCostsWhatItsSendTakesBeyondTheBlockItOverlaps) {
  LayerProfile p = AttentionLayer();
  const plan::LayerStrategy s{.tp = 1, .dp = 8, .cp = 4};
  plan::LayerStrategy twin = s;
  twin.cp = 1;
  const CostModel cm(OneNode(8).device);
  const auto cost = [&](const plan::LayerStrategy& x, int64_t microbatch) {
    StageCost c;
    AddLayerCost(Place(p, x, microbatch), cm, c);
    return c;
  };
  // The ring's 4 ranks are consecutive on one node: a hop is a + n / B over NVLink.
  const double send = 3e-6 + (800'000.0 * 4 / 4) / 1e11;
  // Attention blocks far longer than a send hide the ring: the same times as the twin's.
  StageCost with = cost(s, 4), without = cost(twin, 1);
  EXPECT_NEAR(with.compute, without.compute, 1e-12);
  EXPECT_NEAR(with.communication, without.communication, 1e-12);
  // Without attention work to overlap every hop shows: 3 forward, 3 of two sends backward.
  p.attention_forward_seconds_per_sample = p.attention_backward_seconds_per_sample = 0.0;
  with = cost(s, 4);
  without = cost(twin, 1);
  EXPECT_NEAR(with.communication - without.communication, 3 * send + 3 * 2 * send, 1e-12);
  // Blocks of half a send: each forward hop shows half a send, each backward hop 1.5 sends.
  p.attention_forward_seconds_per_sample = p.attention_backward_seconds_per_sample = send / 2 * 4;  // 1 sample, cp 4
  with = cost(s, 4);
  EXPECT_NEAR(with.communication - without.communication, 3 * send / 2 + 3 * (2 * send - send / 2), 1e-12);
  plan::LayerStrategy ckpt = s;
  ckpt.checkpoint = true;
  plan::LayerStrategy ckpt_twin = twin;
  ckpt_twin.checkpoint = true;
  EXPECT_NEAR(cost(ckpt, 4).recompute - cost(ckpt_twin, 1).recompute, 3 * send / 2, 1e-12);
}

TEST(ContextParallelism, LayersOfAnotherCpDegreeExchangeTheBoundaryAllToAll) {
  const LayerProfile p = AttentionLayer();
  const PlacedLayer cp4 = Place(p, {.tp = 1, .dp = 8, .cp = 4}, 4);
  const PlacedLayer cp2 = Place(p, {.tp = 1, .dp = 8, .cp = 2}, 2);
  const PlacedLayer cp4_again = Place(p, {.tp = 1, .dp = 8, .cp = 4}, 4);
  EXPECT_FALSE(SameLayout(cp4, cp2));
  EXPECT_TRUE(SameLayout(cp4, cp4_again));
  EXPECT_EQ(ContextReshardBytes(cp4, cp2), 100'000);  // one sample's boundary per device
  EXPECT_EQ(ContextReshardBytes(cp4, cp4_again), 0);
  const Cluster cluster = OneNode(8);
  const CostModel cm(cluster.device);
  Result<double> seconds = SliceGatherSeconds(cp4, cp2, cluster, cm);
  ASSERT_TRUE(seconds.ok());
  // Forward and backward: an all-to-all over the wider (4-rank) group.
  EXPECT_NEAR(*seconds, 2 * cm.CollectiveTime(Collective::kAllToAll, 100'000, cp4.mesh.context.mesh, cp4.mesh.context.group),
              1e-15);
  EXPECT_EQ(cp4.mesh.context.mesh.GroupSize(cp4.mesh.context.group), 4);
  EXPECT_EQ(cp4.mesh.context.mesh.GroupSize(cp4.mesh.context.across), 2);
}

}  // namespace
}  // namespace kiwi::cost

namespace kiwi::cost {
namespace {

// DeepSpeed-Ulysses in place of the ring (plan::LayerStrategy::ulysses; Jacobs et al. 2023 §3.1): per
// pass a pair of all-to-alls over the CP group, of the queries + keys + values (a device's sequence
// block: [s/cp, h] and the keys and values as the attention reads them) and of the output [s/cp, h];
// backward their gradients; the forward pair again when checkpointed. Nothing hides them; memory and
// compute are CP's (a device's share of each sample).
TEST(ContextParallelism, UlyssesAllToAllsTheHiddenStatesAroundTheAttention) {
  const LayerProfile p = AttentionLayer();  // hidden states: 200,000 / 2 bytes per sample
  plan::LayerStrategy s{.tp = 1, .dp = 8, .cp = 4};
  s.ulysses = 4;
  const LayerCommunication c = LayerCommunicationOf(Place(p, s, 2));
  EXPECT_EQ(c.ring_sends, 0);
  EXPECT_EQ(c.ring_bytes, 0);
  EXPECT_EQ(c.ulysses_qkv_bytes, (100'000 + 800'000) * 2 / 4);  // two samples' sequence blocks
  EXPECT_EQ(c.ulysses_out_bytes, 100'000 * 2 / 4);
  EXPECT_FALSE(c.ulysses_recomputed);
  const CostModel cm(OneNode(8).device);
  Result<StageMesh> mesh = MakeLayerMesh(OneNode(8), 1, s);
  ASSERT_TRUE(mesh.ok());
  const double pair = cost::CollectiveTime(Collective::kAllToAll, c.ulysses_qkv_bytes, mesh->context.mesh, mesh->context.group) +
                      cost::CollectiveTime(Collective::kAllToAll, c.ulysses_out_bytes, mesh->context.mesh, mesh->context.group);
  StageCost ulysses;
  AddLayerCost(Place(p, s, 2), cm, ulysses);
  EXPECT_NEAR(ulysses.communication_kinds.context_parallel, 2 * pair, 1e-15);
  EXPECT_NEAR(ulysses.recompute, 0.0, 1e-15);
  plan::LayerStrategy ring = s;
  ring.ulysses = 1;
  StageCost ring_cost;
  AddLayerCost(Place(p, ring, 2), cm, ring_cost);
  EXPECT_NEAR(ulysses.compute, ring_cost.compute, 1e-15);  // the same share of the work
  EXPECT_EQ(LayerMemory(Place(p, s, 2), MixedAdam()).activations, LayerMemory(Place(p, ring, 2), MixedAdam()).activations);
  s.checkpoint = true;
  EXPECT_TRUE(LayerCommunicationOf(Place(p, s, 2)).ulysses_recomputed);
  StageCost checkpointed;
  AddLayerCost(Place(p, s, 2), cm, checkpointed);
  EXPECT_NEAR(checkpointed.communication_kinds.context_parallel, 2 * pair, 1e-15);
  EXPECT_GE(checkpointed.recompute, pair);  // the forward again, with its pair
}

// USP (Ulysses inside the CP group, a ring across; Galvatron's use_sp beside cp_sizes_enc): the all-to-alls
// over u consecutive ranks carry Ulysses' bytes, then the ring's cp / u - 1 hops over ranks u apart carry
// as many bytes as a device's own keys and values, each hidden by 1 / (cp / u) of its attention.
TEST(ContextParallelism, UspAllToAllsInsideAndARingAcross) {
  const LayerProfile p = AttentionLayer();
  plan::LayerStrategy s{.tp = 1, .dp = 8, .cp = 4};
  s.ulysses = 2;
  EXPECT_EQ(s.RingDegree(), 2);
  const LayerCommunication c = LayerCommunicationOf(Place(p, s, 2));
  EXPECT_EQ(c.ulysses_qkv_bytes, (100'000 + 800'000) * 2 / 4);
  EXPECT_EQ(c.ulysses_out_bytes, 100'000 * 2 / 4);
  EXPECT_EQ(c.ring_bytes, 800'000 * 2 / 4);
  EXPECT_EQ(c.ring_sends, 3 * (2 - 1));  // one hop: forward, and backward with the gradients
  Result<StageMesh> mesh = MakeLayerMesh(OneNode(8), 1, s);
  ASSERT_TRUE(mesh.ok());
  EXPECT_EQ(mesh->context.mesh.GroupSize(mesh->ulysses), 2);
  EXPECT_EQ(mesh->context.mesh.GroupSize(mesh->ring), 2);
  EXPECT_EQ(mesh->ring & mesh->ulysses, 0u);
  EXPECT_EQ(mesh->ring | mesh->ulysses, mesh->context.group);  // the CP group: both
  EXPECT_EQ(mesh->context.mesh.GroupSize(mesh->context.group), 4);
  const CostModel cm(OneNode(8).device);
  const double pair =
      cost::CollectiveTime(Collective::kAllToAll, c.ulysses_qkv_bytes, mesh->context.mesh, mesh->ulysses) +
      cost::CollectiveTime(Collective::kAllToAll, c.ulysses_out_bytes, mesh->context.mesh, mesh->ulysses);
  const double send = cost::CollectiveTime(Collective::kPointToPoint, c.ring_bytes, mesh->context.mesh, mesh->ring);
  const double block = 2.0 / 4 / 2;  // a device's samples (2 / cp 4), 1 / ring of them per hop
  const double ring = std::max(send - 4e-4 * block, 0.0) + std::max(2 * send - 8e-4 * block, 0.0);
  StageCost usp;
  AddLayerCost(Place(p, s, 2), cm, usp);
  EXPECT_NEAR(usp.communication_kinds.context_parallel, 2 * pair + ring, 1e-12);
  // Between the pure forms: more than Ulysses over 2 ranks alone would be, and the ring half as long.
  plan::LayerStrategy pure = s;
  pure.ulysses = 4;
  StageCost ulysses;
  AddLayerCost(Place(p, pure, 2), cm, ulysses);
  EXPECT_NEAR(usp.compute, ulysses.compute, 1e-15);
  EXPECT_EQ(LayerMemory(Place(p, s, 2), MixedAdam()).activations, LayerMemory(Place(p, pure, 2), MixedAdam()).activations);
}

}  // namespace
}  // namespace kiwi::cost
