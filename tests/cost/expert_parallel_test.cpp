// Expert parallelism's terms of a mixture-of-experts layer against closed forms: model states per
// device (the experts split over TP x EP and ZeRO-sharded over dp / ep, the rest over TP and dp), the
// gradient sync of each part over its group, and the all-to-alls of the routed rows over the EP group
// (dispatch and combine, forward and backward: 4 per micro-batch, 6 when checkpointed), each the ring's
// (ep - 1)(alpha + n / (ep B)).
#include <gtest/gtest.h>

#include "cost_test_util.h"
#include <memory>
#include <string>
#include <vector>

#include "kiwi/cost/layer_cost.h"
#include "kiwi/cost/recompute_set.h"

namespace kiwi::cost {
namespace {

using testing::OneNode;

LayerProfile MoeLayer() {
  LayerProfile p;
  p.name = "moe";
  p.parameter_bytes = 1'000'000;
  p.replicated_parameter_bytes = 2'000;      // norms and the router
  p.experts = 8;
  p.expert_parameter_bytes = 800'000;
  p.activation_bytes_per_sample = 3'000'000;
  p.boundary_bytes_per_sample = 100'000;
  p.routed_bytes_per_sample = 2 * 100'000;   // top 2
  p.tp_comm_bytes_per_sample = 200'000;
  p.forward_seconds_per_sample = 1e-3;
  p.backward_seconds_per_sample = 2e-3;
  return p;
}

LayerModel MixedAdam() {  // bf16 gradients (1 per parameter byte), fp32 master + Adam (6)
  LayerModel m;
  m.state_bytes_per_parameter_byte = 7.0;
  m.gradient_bytes_per_parameter_byte = 1.0;
  return m;
}

PlacedLayer Place(const LayerProfile& p, const plan::LayerStrategy& s, int64_t microbatch = 4) {
  Result<StageMesh> mesh = MakeLayerMesh(OneNode(8), 1, s);
  EXPECT_TRUE(mesh.ok()) << mesh.error().message;
  return {p, s, *mesh, microbatch};
}

TEST(ExpertParallelism, ModelStatesSplitTheExpertsOverEpAndShardThemOverDpOverEp) {
  const LayerProfile p = MoeLayer();
  const plan::LayerStrategy s{.tp = 2, .dp = 4, .zero = plan::Zero::kOptimizerStates, .ep = 2};
  const int64_t dense_shard = (1'000'000 - 2'000 - 800'000) / 2 + 2'000;  // TP-split, norms and router whole
  const int64_t expert_shard = 800'000 / (2 * 2);                         // TP x EP
  // parameters + gradients whole on the rank; optimizer states (6 bytes) over dp for the rest, dp / ep
  // for the experts (ZeRO-1).
  const int64_t expected = (dense_shard + expert_shard) * 2 + dense_shard * 6 / 4 + expert_shard * 6 / 2;
  EXPECT_EQ(LayerMemory(Place(p, s), MixedAdam()).model_states, expected);
  EXPECT_EQ(TpShardParameterBytes(p, 2, 2), dense_shard + expert_shard);
  plan::LayerStrategy no_ep = s;
  no_ep.ep = 1;  // the experts over TP only, their states over all dp
  EXPECT_EQ(LayerMemory(Place(p, no_ep), MixedAdam()).model_states, (dense_shard + 400'000) * 2 + (dense_shard + 400'000) * 6 / 4);
}

TEST(ExpertParallelism, EachPartSyncsOverItsGroupAndTheRoutedRowsGoAllToAll) {
  const LayerProfile p = MoeLayer();
  const plan::LayerStrategy s{.tp = 1, .dp = 8, .zero = plan::Zero::kGradients, .ep = 4};
  const PlacedLayer placed = Place(p, s);
  const LayerCommunication c = LayerCommunicationOf(placed);
  EXPECT_EQ(c.gradient_sync_bytes, 200'000);         // the rest of the layer, over all 8
  EXPECT_EQ(c.expert_gradient_sync_bytes, 200'000);  // 800,000 / ep 4, over the 2 ranks holding them
  EXPECT_EQ(c.step_all_gather_bytes, 200'000);
  EXPECT_EQ(c.expert_step_all_gather_bytes, 200'000);
  EXPECT_EQ(c.all_to_all_bytes, 2 * 100'000 * 4);  // top 2 copies of the micro-batch's 4 samples
  EXPECT_EQ(c.all_to_alls, 4);
  EXPECT_EQ(c.all_to_alls_recomputed, 0);
  plan::LayerStrategy ckpt = s;
  ckpt.checkpoint = true;
  EXPECT_EQ(LayerCommunicationOf(Place(p, ckpt)).all_to_alls_recomputed, 2);
  // The EP group: 4 consecutive ranks on NVLink; its ring all-to-all.
  ASSERT_NE(placed.mesh.experts.group, 0u);
  EXPECT_EQ(placed.mesh.experts.mesh.GroupSize(placed.mesh.experts.group), 4);
  EXPECT_EQ(placed.mesh.experts.mesh.GroupSize(placed.mesh.experts.across), 2);
  // Priced under plain DP, whose gradient sync is once per iteration (ZeRO-2 reduce-scatters every
  // micro-batch, on the micro-batch's time): the micro-batch gains the 4 all-to-alls alone.
  const double ring = 3 * (3e-6 + static_cast<double>(c.all_to_all_bytes) / (4 * 1e11));
  const CostModel cm(OneNode(8).device);
  plan::LayerStrategy dp = s, no_ep = s;
  dp.zero = no_ep.zero = plan::Zero::kNone;
  no_ep.ep = 1;
  StageCost with, without;
  AddLayerCost(Place(p, dp), cm, with);
  AddLayerCost(Place(p, no_ep), cm, without);
  EXPECT_NEAR(with.communication - without.communication, 4 * ring, 1e-12);
  EXPECT_DOUBLE_EQ(with.compute, without.compute);  // an even load: each rank runs as many rows
}

TEST(ExpertParallelism, ADenseLayerUnderAnEpStrategyPricesAsWithout) {
  LayerProfile dense = MoeLayer();
  dense.experts = dense.expert_parameter_bytes = dense.routed_bytes_per_sample = 0;
  const plan::LayerStrategy s{.tp = 2, .dp = 4, .zero = plan::Zero::kOptimizerStates, .ep = 4};
  plan::LayerStrategy no_ep = s;
  no_ep.ep = 1;
  const StageMemory a_memory = LayerMemory(Place(dense, s), MixedAdam());
  const StageMemory b_memory = LayerMemory(Place(dense, no_ep), MixedAdam());
  EXPECT_EQ(a_memory.model_states, b_memory.model_states);
  EXPECT_EQ(a_memory.activations, b_memory.activations);
  EXPECT_EQ(a_memory.gathered, b_memory.gathered);
  const CostModel cm(OneNode(8).device);
  StageCost a, b;
  AddLayerCost(Place(dense, s), cm, a);
  AddLayerCost(Place(dense, no_ep), cm, b);
  EXPECT_EQ(a.MicrobatchSeconds(), b.MicrobatchSeconds());
  EXPECT_EQ(a.gradient_sync, b.gradient_sync);
}

// A recompute set under EP runs the all-to-all of every routed gather it recomputes (the dispatch, the
// combine) again, and only those: recomputing the experts' activation between them needs none.
TEST(ExpertParallelism, ARecomputeSetRunsTheAllToAllsOfItsRoutedGathersAgain) {
  LayerProfile p = MoeLayer();
  auto menu = std::make_shared<RecomputeMenu>();
  menu->ops = {{.name = "input0", .bytes_per_sample = 100'000, .saved = true},
               {.name = "mlp.dispatch", .inputs = {0}, .bytes_per_sample = 200'000, .saved = true, .recomputable = true,
                .routed = true, .seconds_per_sample = 1e-5, .kernels = 1},
               {.name = "mlp.act", .inputs = {1}, .bytes_per_sample = 400'000, .saved = true, .recomputable = true,
                .seconds_per_sample = 1e-5, .kernels = 1},
               {.name = "mlp.combine", .inputs = {2}, .bytes_per_sample = 200'000, .saved = true, .recomputable = true,
                .routed = true, .seconds_per_sample = 1e-5, .kernels = 1}};
  p.recompute_menu.menu = menu;
  plan::LayerStrategy s{.tp = 1, .dp = 8, .zero = plan::Zero::kOptimizerStates, .ep = 4};
  const CostModel cm(OneNode(8).device);
  StageCost none;
  AddLayerCost(Place(p, s), cm, none);
  // The ring all-to-all over the 4 EP ranks (as above).
  const double all_to_all = 3 * (3e-6 + static_cast<double>(LayerCommunicationOf(Place(p, s)).all_to_all_bytes) / (4 * 1e11));
  for (const auto& [set, again] : {std::pair{std::vector<std::string>{"mlp.act"}, 0},
                                   std::pair{std::vector<std::string>{"mlp.dispatch"}, 1},
                                   std::pair{std::vector<std::string>{"mlp.dispatch", "mlp.act", "mlp.combine"}, 2}}) {
    s.recompute = set;
    EXPECT_EQ(LayerCommunicationOf(Place(p, s)).all_to_alls_recomputed, again) << set.size();
    StageCost with;
    AddLayerCost(Place(p, s), cm, with);
    const RecomputeCost priced = *PriceRecomputeSet(*menu, set);
    const double ops = cm.LaunchBoundTime(priced.seconds_per_sample * 4 + priced.overhead_seconds, priced.kernels);
    EXPECT_NEAR(with.recompute, ops + again * all_to_all, 1e-12) << set.size();
  }
  plan::LayerStrategy no_ep = s;  // the same set without EP: the gathers are local
  no_ep.ep = 1;
  EXPECT_EQ(LayerCommunicationOf(Place(p, no_ep)).all_to_alls_recomputed, 0);
}

// Under sequence parallelism each TP rank all-to-alls the routed rows of its own 1/tp of the tokens
// (Megatron's all-to-all dispatcher; the TP group then all-gathers them), without it all of them.
TEST(ExpertParallelism, SequenceParallelismSendsEachTpRanksShareOfTheRows) {
  const LayerProfile p = MoeLayer();
  const plan::LayerStrategy sp{.tp = 2, .dp = 4, .zero = plan::Zero::kOptimizerStates, .sequence_parallel = true, .ep = 4};
  plan::LayerStrategy no_sp = sp;
  no_sp.sequence_parallel = false;
  EXPECT_EQ(LayerCommunicationOf(Place(p, sp)).all_to_all_bytes, 2 * 100'000 * 4 / 2);
  EXPECT_EQ(LayerCommunicationOf(Place(p, no_sp)).all_to_all_bytes, 2 * 100'000 * 4);
}

// A recompute set dropping the dispatch's output under SP: the rows each rank keeps whole (gathered) are
// no longer kept, come back whole for the backward pass, and their TP all-gather runs again beside the
// all-to-all.
TEST(ExpertParallelism, ARecomputedDispatchUnderSequenceParallelismDropsTheWholeRowsAndGathersThemAgain) {
  LayerProfile p = MoeLayer();
  p.gathered_activation_bytes_per_sample = 200'000;
  p.replicated_activation_bytes_per_sample = 500'000;
  auto menu = std::make_shared<RecomputeMenu>();
  menu->ops = {{.name = "input0", .bytes_per_sample = 100'000, .saved = true, .replicated = true},
               {.name = "mlp.dispatch", .inputs = {0}, .bytes_per_sample = 200'000, .saved = true, .replicated = true,
                .gathered = true, .recomputable = true, .routed = true, .seconds_per_sample = 1e-5, .kernels = 1}};
  p.recompute_menu.menu = menu;
  plan::LayerStrategy none{.tp = 2, .dp = 4, .zero = plan::Zero::kOptimizerStates, .sequence_parallel = true, .ep = 4};
  plan::LayerStrategy set = none;
  set.recompute = {"mlp.dispatch"};
  const RecomputeCost priced = *PriceRecomputeSet(*menu, set.recompute);
  EXPECT_EQ(priced.dropped_gathered_bytes_per_sample, 200'000);
  EXPECT_EQ(priced.recomputed_gathered_bytes_per_sample, 200'000);
  EXPECT_DOUBLE_EQ(priced.routed_seconds_per_sample, 1e-5);
  const LayerModel no_states;
  // Kept: (3,000,000 - 200,000) x 4 samples, all split over the 2 TP ranks (SP); recomputed: 200,000 x 4 whole.
  EXPECT_EQ(LayerMemory(Place(p, none), no_states).activations, (3'000'000 - 200'000) * 4 / 2 + 200'000 * 4);
  EXPECT_EQ(LayerMemory(Place(p, set), no_states).activations, (3'000'000 - 200'000) * 4 / 2);
  EXPECT_EQ(RecomputedBytes(Place(p, set)), 200'000 * 4);
  const CostModel cm(OneNode(8).device);
  StageCost with;
  AddLayerCost(Place(p, set), cm, with);
  const PlacedLayer placed = Place(p, set);
  const double all_to_all = cm.CollectiveTime(Collective::kAllToAll, LayerCommunicationOf(placed).all_to_all_bytes,
                                              placed.mesh.experts.mesh, placed.mesh.experts.group);
  const double gather =
      cm.CollectiveTime(Collective::kAllGather, 2 * 100'000 * 4, placed.mesh.mesh, placed.mesh.masks[kTpAxis]);
  // The dispatch again on the rank's 2 of 4 samples, and its sort on all 4 (8 experts, 2 per rank).
  const double ops = cm.LaunchBoundTime(1e-5 * 2 + 1e-5 * 4, 1);
  EXPECT_NEAR(with.recompute, ops + all_to_all + gather, 1e-12);
}

}  // namespace
}  // namespace kiwi::cost
