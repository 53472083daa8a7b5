// SimulateOperatorPlan with per-operator shardings on a 2x2 mesh: work fractions, partial-sum
// reductions (plan.h OpSharding), resharding of operands, per-device memory of shards.
#include <gtest/gtest.h>

#include "kiwi/cost/collectives.h"
#include "kiwi/sim/simulator.h"
#include "op_sim_test_util.h"

namespace kiwi::sim {
namespace {

using cost::Collective;
using ir::AxisBit;
using ir::NodeId;
using ir::ShardingSpec;
using op_test::C;
using op_test::F;

// Axis 0: 2 devices, 1 GB/s, 10 us; axis 1: 2 devices, 4 GB/s, 1 us.
constexpr double kBw0 = 1e9, kLat0 = 1e-5, kBw1 = 4e9, kLat1 = 1e-6;
constexpr double kMatmulSeconds = 8e-3;  // y's measured cost on one device

// y[64, 256] = x[64, 128] . w[128, 256], all f32: x 32768 B, w 131072 B, y 65536 B.
class ShardedMatmul : public ::testing::Test {
 protected:
  ShardedMatmul() {
    x_ = op_test::AddTyped(g_, "x", {ir::DType::kF32, {64, 128}}, 0.0, {}, ir::OpKind::kInput);
    w_ = op_test::AddTyped(g_, "w", {ir::DType::kF32, {128, 256}}, 0.0, {}, ir::OpKind::kParameter);
    y_ = op_test::AddTyped(g_, "y", {ir::DType::kF32, {64, 256}}, kMatmulSeconds, {x_, w_}, ir::OpKind::kMatmul);
    mesh_.axes = {{2, kBw0, kLat0, "slow"}, {2, kBw1, kLat1, "fast"}};
    plan_.mesh_shape = {2, 2};
  }

  // Megatron-style row split: K over axis 1, M over axis 0; y's partial sums all-reduced over axis 1.
  void ContractionSplitPlan() {
    plan_.shardings[x_] = {S0S1(), {}, 0, ""};
    plan_.shardings[w_] = {ShardingSpec::SplitDim(2, 0, AxisBit(1)), {}, 0, ""};
    plan_.shardings[y_] = {ShardingSpec::SplitDim(2, 0, AxisBit(0)),
                           {S0S1(), ShardingSpec::SplitDim(2, 0, AxisBit(1))}, AxisBit(1), "S0R = S0S1 x S1R"};
  }
  static ShardingSpec S0S1() { return ShardingSpec{{AxisBit(0), AxisBit(1)}}; }

  SimResult Run() {
    Result<SimResult> r = SimulateOperatorPlan(g_, plan_, cm_, mesh_);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : SimResult{};
  }

  ir::Graph g_{"matmul"};
  NodeId x_ = 0, w_ = 0, y_ = 0;
  ir::DeviceMesh mesh_;
  plan::OperatorPlan plan_;
  cost::CostModel cm_ = op_test::MeasuredCostModel();
};

TEST_F(ShardedMatmul, ContractionSplitGivesAQuarterOfTheWorkAndAnAllReduce) {
  ContractionSplitPlan();
  const SimResult r = Run();
  EXPECT_DOUBLE_EQ(r.time.compute, kMatmulSeconds / 4);
  // y's shard S0R is 32768 B; ring all-reduce over axis 1 (p = 2): 2(p-1)(a + n/(pB)).
  const double expected = 2 * (kLat1 + 32768.0 / (2 * kBw1));
  EXPECT_NEAR(r.time.communication, expected, 1e-15);
  EXPECT_DOUBLE_EQ(r.time.communication, cost::CollectiveTime(Collective::kAllReduce, 32768, mesh_, AxisBit(1)));
  EXPECT_DOUBLE_EQ(r.time.resharding, 0.0);  // every operand arrives in the layout the op wants
  EXPECT_DOUBLE_EQ(r.iteration_seconds, kMatmulSeconds / 4 + r.time.communication);
  // Per device: x 32768/4, w 131072/2, y 65536/2; checkpoint-all peaks right after y.
  EXPECT_EQ(r.peak_memory_bytes, 8192 + 65536 + 32768);
  EXPECT_EQ(r.peak_step, 2);
  EXPECT_EQ(r.peak_memory_per_device, (std::vector<int64_t>(4, 8192 + 65536 + 32768)));
}

TEST_F(ShardedMatmul, ReduceScatterWhenTheOutputIsShardedOnTheReduceAxis) {
  ContractionSplitPlan();
  plan_.shardings[y_].output = S0S1();  // the partial sums are scattered over axis 1 instead
  const SimResult r = Run();
  EXPECT_DOUBLE_EQ(r.time.compute, kMatmulSeconds / 4);
  // Partial buffer before scattering: y as S0R, 32768 B; ring reduce-scatter (p-1)(a + n/(pB)).
  EXPECT_NEAR(r.time.communication, kLat1 + 32768.0 / (2 * kBw1), 1e-15);
  EXPECT_EQ(r.peak_memory_bytes, 8192 + 65536 + 16384);
}

TEST_F(ShardedMatmul, ReduceScatterThenAllReduceOverTheRemainingAxis) {
  ContractionSplitPlan();
  plan_.shardings[y_].reduce_axes = AxisBit(0) | AxisBit(1);  // y stays S0R
  const SimResult r = Run();
  EXPECT_DOUBLE_EQ(r.time.compute, kMatmulSeconds / 4);  // group of axes 0 and 1 = 4 devices
  // Reduce-scatter over axis 0 of the whole partial y (65536 B), then all-reduce over axis 1 of S0R.
  const double rs = kLat0 + 65536.0 / (2 * kBw0);
  const double ar = 2 * (kLat1 + 32768.0 / (2 * kBw1));
  EXPECT_NEAR(r.time.communication, rs + ar, 1e-15);
}

TEST_F(ShardedMatmul, WorkFractionFollowsTheOutputAxes) {
  plan_.shardings[y_] = {ShardingSpec::SplitDim(2, 0, AxisBit(0)), {}, 0, ""};
  EXPECT_DOUBLE_EQ(Run().time.compute, kMatmulSeconds / 2);
  plan_.shardings[y_] = {S0S1(), {}, 0, ""};
  EXPECT_DOUBLE_EQ(Run().time.compute, kMatmulSeconds / 4);
  plan_.shardings[y_] = {ShardingSpec::Replicated(2), {}, AxisBit(0), ""};
  const SimResult r = Run();
  EXPECT_DOUBLE_EQ(r.time.compute, kMatmulSeconds / 2);
  EXPECT_NEAR(r.time.communication, 2 * (kLat0 + 65536.0 / (2 * kBw0)), 1e-15);
}

TEST_F(ShardedMatmul, OperandLayoutMismatchAddsExactlyReshardTime) {
  ContractionSplitPlan();
  const SimResult matched = Run();
  const ShardingSpec x_produced = ShardingSpec::SplitDim(2, 0, AxisBit(1));  // S1R, the op wants S0S1
  plan_.shardings[x_].output = x_produced;
  const SimResult mismatched = Run();
  const double reshard = cm_.ReshardTime(g_.node(x_).output, x_produced, S0S1(), mesh_);
  EXPECT_GT(reshard, 0.0);
  EXPECT_DOUBLE_EQ(mismatched.time.resharding, reshard);
  EXPECT_DOUBLE_EQ(mismatched.time.compute, matched.time.compute);
  EXPECT_DOUBLE_EQ(mismatched.time.communication, matched.time.communication);
  EXPECT_DOUBLE_EQ(mismatched.iteration_seconds, matched.iteration_seconds + reshard);
  // Both operands mismatched: the two conversions add up.
  plan_.shardings.erase(w_);  // w now replicated, the op wants S1R
  const SimResult both = Run();
  const double w_reshard =
      cm_.ReshardTime(g_.node(w_).output, ShardingSpec::Replicated(2), ShardingSpec::SplitDim(2, 0, AxisBit(1)), mesh_);
  EXPECT_DOUBLE_EQ(both.time.resharding, reshard + w_reshard);
}

TEST_F(ShardedMatmul, EmptyOperandsMeanAsProducedWithNoResharding) {
  ContractionSplitPlan();
  plan_.shardings[x_].output = ShardingSpec::SplitDim(2, 0, AxisBit(1));
  plan_.shardings[y_].operands.clear();
  EXPECT_DOUBLE_EQ(Run().time.resharding, 0.0);
}

TEST_F(ShardedMatmul, RecomputingAShardedOpChargesAllItsTimeToRecompute) {
  ContractionSplitPlan();
  plan_.shardings[x_].output = ShardingSpec::SplitDim(2, 0, AxisBit(1));  // so resharding is not 0
  const SimResult once = Run();
  plan_.schedule = {C(x_), C(w_), C(y_), F(y_), C(y_), F(x_), F(y_)};
  const SimResult twice = Run();
  EXPECT_EQ(twice.recomputations, 1);
  EXPECT_DOUBLE_EQ(twice.time.compute, once.time.compute);
  EXPECT_DOUBLE_EQ(twice.time.communication, once.time.communication);
  EXPECT_DOUBLE_EQ(twice.time.resharding, once.time.resharding);
  EXPECT_DOUBLE_EQ(twice.time.recompute, once.time.compute + once.time.communication + once.time.resharding);
  EXPECT_DOUBLE_EQ(twice.iteration_seconds, 2 * once.iteration_seconds);
}

TEST_F(ShardedMatmul, ShardsOfParametersAndInputsSetTheMemory) {
  plan_.shardings[w_] = {ShardingSpec::SplitDim(2, 1, AxisBit(0) | AxisBit(1)), {}, 0, ""};  // RS01
  const SimResult r = Run();
  // Replicated x 32768 + w/4 32768 + replicated y 65536, right after y; x freed after, w stays.
  EXPECT_EQ(r.peak_memory_bytes, 32768 + 32768 + 65536);
  EXPECT_EQ(r.timeline.back().bytes_after, 32768);
}

}  // namespace
}  // namespace kiwi::sim
