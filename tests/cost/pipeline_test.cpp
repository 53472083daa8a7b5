#include "kiwi/cost/pipeline.h"

#include <gtest/gtest.h>

#include "cost_test_util.h"
#include "kiwi/cost/cost_model.h"

namespace kiwi::cost {
namespace {

using plan::PipelineSchedule;

TEST(MicrobatchesInFlight, OneFOneBHoldsPpMinusStageGPipeHoldsAll) {
  // 4 stages, 8 micro-batches: 1F1B stage s holds 4 - s; GPipe holds all 8 on every stage.
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(MicrobatchesInFlight(PipelineSchedule::k1F1B, 4, 8, s), 4 - s);
    EXPECT_EQ(MicrobatchesInFlight(PipelineSchedule::kGPipe, 4, 8, s), 8);
  }
  // Fewer micro-batches than stages: 1F1B never holds more than exist.
  EXPECT_EQ(MicrobatchesInFlight(PipelineSchedule::k1F1B, 4, 2, 0), 2);
  EXPECT_EQ(MicrobatchesInFlight(PipelineSchedule::k1F1B, 4, 2, 3), 1);
}

// Megatron-LM's interleaved schedule: 2 (pp - s - 1) + (v - 1) pp warm-up forwards of one chunk each,
// one more before the first backward. The first stage holds pp (1 + (pp - 1) / (pp v)) micro-batches
// of its layers (Korthikanti et al. 2023 §4.2.3), i.e. v times that in chunk-micro-batches.
TEST(MicrobatchesInFlight, InterleavedCountsChunksAsMegatronsWarmUp) {
  for (int pp : {2, 4, 8})
    for (int v : {2, 3, 4}) {
      const int m = 4 * pp;
      EXPECT_EQ(MicrobatchesInFlight(PipelineSchedule::k1F1B, pp, m, 0, v), pp * v + pp - 1) << pp << " " << v;
      EXPECT_DOUBLE_EQ(MicrobatchesInFlight(PipelineSchedule::k1F1B, pp, m, 0, v) / static_cast<double>(v),
                       pp * (1.0 + (pp - 1.0) / (pp * v)));
      EXPECT_EQ(MicrobatchesInFlight(PipelineSchedule::k1F1B, pp, m, pp - 1, v), (v - 1) * pp + 1);
    }
  // 4 stages, 2 chunks, 8 micro-batches: stage s runs 2 (3 - s) + 4 warm-up forwards.
  for (int s = 0; s < 4; ++s) EXPECT_EQ(MicrobatchesInFlight(PipelineSchedule::k1F1B, 4, 8, s, 2), 2 * (3 - s) + 5);
  // Never more than the v m chunk-micro-batches there are; v = 1 is plain 1F1B.
  EXPECT_EQ(MicrobatchesInFlight(PipelineSchedule::k1F1B, 4, 4, 0, 2), 8);
  EXPECT_EQ(MicrobatchesInFlight(PipelineSchedule::k1F1B, 4, 8, 1, 1), 3);
}

// 2 stages of 2 chunks keeping 10 and 30 bytes per micro-batch, 2 micro-batches. Stage 0 runs every
// forward first (chunks 0, 0, 1, 1): 2 x 10 + 2 x 30; stage 1 two forwards of chunk 0, then chunk 1's
// forward before each of its backwards: 2 x 10 + 30, where its 3 chunk-micro-batches in flight at the
// largest chunk would be 90. States add up; the most one layer's backward holds beyond them, 3 + 50, is added.
TEST(InterleavedStagePeakBytes, HoldsWhatMegatronsOrderHolds) {
  const std::vector<StageMemory> chunks = {LayerTerms(100, 10, 7, 0), LayerTerms(200, 30, 3, 50)};
  EXPECT_EQ(InterleavedStagePeakBytes(chunks, 2, 2, 0), 300 + (2 * 10 + 2 * 30) + 53);
  EXPECT_EQ(InterleavedStagePeakBytes(chunks, 2, 2, 1), 300 + (2 * 10 + 30) + 53);
  // Equal chunks: MicrobatchesInFlight of them.
  const std::vector<StageMemory> equal(3, LayerTerms(100, 10, 0, 0));
  for (int s = 0; s < 4; ++s)
    EXPECT_EQ(InterleavedStagePeakBytes(equal, 4, 8, s), 300 + 10 * MicrobatchesInFlight(PipelineSchedule::k1F1B, 4, 8, s, 3));
}

// The backward pass runs the layers in reverse: layer i's transient and gather sit beside the
// activations of layers <= i only. Three layers keeping 10, 20, 30: their backwards hold 10 + 7,
// 30 + 3 + 50 and 60 + 5 + 40; the last is the peak, 45 above the activations (Eq. 1's sum of the
// largest transient and gather would be 57).
TEST(StageMemory, PeaksAtOneLayersBackwardWithTheEarlierLayersActivations) {
  StageMemory stage;
  stage += LayerTerms(100, 10, 7, 0);
  stage += LayerTerms(200, 20, 3, 50);
  stage += LayerTerms(300, 30, 5, 40);
  EXPECT_EQ(stage.model_states, 600);
  EXPECT_EQ(stage.activations, 60);
  EXPECT_EQ(stage.transient, 7);
  EXPECT_EQ(stage.gathered, 50);
  EXPECT_EQ(stage.backward_peak, 105);
  EXPECT_EQ(stage.Headroom(), 45);
  EXPECT_EQ(stage.AdditiveBytes(3), 600 + 3 * 60);
  // The other micro-batches in flight keep all their activations.
  EXPECT_EQ(stage.PeakBytes(3), 600 + 3 * 60 + 45);
  EXPECT_EQ(stage.PeakBytes(1), 600 + 105);
}

TEST(StageMemory, AnEarlyLayersTransientIsCoveredByTheLaterLayersFreedActivations) {
  StageMemory early, late;
  early += LayerTerms(0, 10, 100, 0);  // a large transient first, then 50 bytes of activations
  early += LayerTerms(0, 50, 0, 0);
  late += LayerTerms(0, 50, 0, 0);
  late += LayerTerms(0, 10, 100, 0);  // the same layers the other way round
  EXPECT_EQ(early.PeakBytes(1), 110);  // the first layer's backward: its 10 + 100, the 50 freed
  EXPECT_EQ(late.PeakBytes(1), 160);   // the last layer's backward: all 60 + 100
  EXPECT_EQ(early.PeakBytes(2), 170);  // another micro-batch's 60 beside it
}

TEST(StageMemory, SixteenBitCountsDoNotOverflow) {
  // A 175B model's stage: tens of GiB of states, micro-batches of GiB in flight.
  const StageMemory stage = LayerTerms(int64_t{60} << 30, int64_t{3} << 30, int64_t{2} << 30, int64_t{1} << 30);
  EXPECT_EQ(stage.PeakBytes(8), (int64_t{60} << 30) + 8 * (int64_t{3} << 30) + (int64_t{3} << 30));
}

TEST(PipelineIterationSeconds, IsEquationEightWithTheOptimizerStep) {
  // Stages C_s = 1, 3, 2 with unhidden syncs G_s = 0.5, 0, 0.25, optimizer steps O_s = 0.1, 0.4, 0.2:
  // (m - 1) x 3 + (1 + 3 + 2 + 0.5 + 0.25) + 0.4.
  const double sum = 1.0 + 3.0 + 2.0 + 0.5 + 0.25;
  testing::ExpectSeconds(PipelineIterationSeconds(8, 3.0, sum, 0.4), 7 * 3.0 + sum + 0.4);
  // One micro-batch: the stages run one after another.
  testing::ExpectSeconds(PipelineIterationSeconds(1, 3.0, sum, 0.4), sum + 0.4);
}

// Narayanan et al. 2021 §2.2: with equal stages C the interleaved bubble is (pp - 1) C / v, a fraction
// (pp - 1) / (v m) of the m C of useful work; v = 1 is Eq. 8.
TEST(InterleavedIterationSeconds, ShrinksTheBubbleVFold) {
  const double c = 2.0;
  for (int pp : {2, 4, 8})
    for (int v : {1, 2, 4})
      for (int m : {pp, 4 * pp}) {
        const double t = InterleavedIterationSeconds(m, v, c, pp * c, 0.0, 0.0);
        EXPECT_NEAR((t - m * c) / (m * c), (pp - 1.0) / (v * m), 1e-12) << pp << " " << v << " " << m;
      }
  // Unequal stages with syncs and optimizer steps: v = 1 is PipelineIterationSeconds, the syncs are
  // not divided.
  const double stages = 1.0 + 3.0 + 2.0, syncs = 0.5 + 0.25;
  testing::ExpectSeconds(InterleavedIterationSeconds(8, 1, 3.0, stages, syncs, 0.4),
                         PipelineIterationSeconds(8, 3.0, stages + syncs, 0.4));
  testing::ExpectSeconds(InterleavedIterationSeconds(8, 2, 3.0, stages, syncs, 0.4), 7.5 * 3.0 + stages / 2 + syncs + 0.4);
}

TEST(ReservedBytes, NegativeMeansNone) {
  DeviceSpec d = testing::TestDevice();
  d.reserved_bytes = int64_t{3} << 30;
  EXPECT_EQ(ReservedBytes(d), int64_t{3} << 30);
  d.reserved_bytes = -5;
  EXPECT_EQ(ReservedBytes(d), 0);
}

// CostModel::WorkFraction and PartialSumTime (sharded_op.cpp): the share of an op's work a device does
// and the collectives that complete its partial sums, against the collectives' own closed forms.
TEST(ShardedOp, WorkFractionIsOneOverTheGroup) {
  const ir::DeviceMesh mesh{{{2, 1e9, 1e-5, "a"}, {4, 1e10, 1e-6, "b"}}};
  ir::ShardingSpec out = ir::ShardingSpec::Replicated(2);
  EXPECT_DOUBLE_EQ(CostModel::WorkFraction(out, 0, mesh), 1.0);
  out.dim_axes[0] = ir::AxisBit(1);
  EXPECT_DOUBLE_EQ(CostModel::WorkFraction(out, 0, mesh), 0.25);
  EXPECT_DOUBLE_EQ(CostModel::WorkFraction(out, ir::AxisBit(0), mesh), 0.125);
}

TEST(ShardedOp, PartialSumsAllReduceOrReduceScatter) {
  const ir::DeviceMesh mesh{{{4, 1e9, 1e-5, "ring"}}};
  const CostModel cm(testing::TestDevice());
  const ir::TensorType type{ir::DType::kF32, {64, 1024}};  // 256 KiB
  const int64_t bytes = type.Bytes();
  // Output replicated, reduced over axis 0: one all-reduce of the whole output.
  const ir::ShardingSpec replicated = ir::ShardingSpec::Replicated(2);
  testing::ExpectSeconds(cm.PartialSumTime(type, replicated, ir::AxisBit(0), mesh),
                         cm.CollectiveTime(Collective::kAllReduce, bytes, mesh, ir::AxisBit(0)));
  // Output sharded over the reduce axis: a reduce-scatter of the whole (partial) buffer instead.
  ir::ShardingSpec rows = replicated;
  rows.dim_axes[0] = ir::AxisBit(0);
  testing::ExpectSeconds(cm.PartialSumTime(type, rows, ir::AxisBit(0), mesh),
                         cm.CollectiveTime(Collective::kReduceScatter, bytes, mesh, ir::AxisBit(0)));
  EXPECT_EQ(cm.PartialSumTime(type, rows, 0, mesh), 0.0);
}

}  // namespace
}  // namespace kiwi::cost
