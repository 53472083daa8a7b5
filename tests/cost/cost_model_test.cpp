#include "kiwi/cost/cost_model.h"

#include <gtest/gtest.h>

#include "cost_test_util.h"

namespace kiwi::cost {
namespace {

using ir::DType;
using ir::OpKind;

using testing::ExpectSeconds;
using testing::TestDevice;

ir::Node Op(OpKind kind, double flops, int64_t bytes, DType dtype = DType::kF32) {
  ir::Node n;
  n.name = "op";
  n.kind = kind;
  n.output = {dtype, {16, 16}};
  n.flops = flops;
  n.bytes_accessed = bytes;
  return n;
}

TEST(ComputeTime, RooflineComputeBound) {
  const CostModel cm(TestDevice());
  // flops roof: 3e9 / (1e12 * 0.75) = 4 ms; memory roof: 8e6 / 8e10 = 0.1 ms.
  const ir::Node matmul = Op(OpKind::kMatmul, 3e9, 8'000'000);
  ExpectSeconds(cm.ComputeTime(matmul), 4e-3);
  ExpectSeconds(cm.ComputeTime(matmul, 0.25), 1e-3);
}

TEST(ComputeTime, RooflineMemoryBound) {
  const CostModel cm(TestDevice());
  // memory roof: 4e8 / 8e10 = 5 ms; flops roof: 1e6 / 1e12 = 1 us.
  const ir::Node gelu = Op(OpKind::kElementwise, 1e6, 400'000'000);
  ExpectSeconds(cm.ComputeTime(gelu), 5e-3);
  ExpectSeconds(cm.ComputeTime(gelu, 0.5), 2.5e-3);
  CostModelOptions options;
  options.kernel_overhead = 1e-5;
  options.memory_efficiency = 0.5;
  ExpectSeconds(CostModel(TestDevice(), options).ComputeTime(gelu), 4e8 / 5e10 + 1e-5);
}

TEST(ComputeTime, UnsupportedDtypeFallsBackToF32Peak) {
  const ir::Node matmul = Op(OpKind::kMatmul, 3e9, 8'000'000, DType::kBF16);
  ExpectSeconds(CostModel(TestDevice()).ComputeTime(matmul), 4e-3);
  DeviceSpec with_bf16 = TestDevice();
  with_bf16.SetPeakFlops(DType::kBF16, 1e13);
  ExpectSeconds(CostModel(with_bf16).ComputeTime(matmul), 3e9 / 7.5e12);
}

TEST(ComputeTime, MeasuredCostsArePreferred) {
  ir::Node n = Op(OpKind::kMatmul, 3e9, 8'000'000);
  n.measured_cost = 0.5;
  ExpectSeconds(CostModel(TestDevice()).ComputeTime(n), 0.5);
  ExpectSeconds(CostModel(TestDevice()).ComputeTime(n, 0.5), 0.25);
  Profile profile;
  profile.op_seconds["op"] = 0.2;
  profile.op_seconds["other"] = 7.0;
  ExpectSeconds(CostModel(TestDevice(), {}, profile).ComputeTime(n, 0.5), 0.1);  // profile beats node
  CostModelOptions roofline_only;
  roofline_only.use_measured_costs = false;
  ExpectSeconds(CostModel(TestDevice(), roofline_only, profile).ComputeTime(n), 4e-3);
}

TEST(ComputeTime, NotComputedNodesCostNothing) {
  const CostModel cm(TestDevice());
  for (OpKind kind : {OpKind::kInput, OpKind::kParameter, OpKind::kOptimizerState}) {
    ir::Node n = Op(kind, 1e9, 1'000'000);
    n.measured_cost = 1.0;
    EXPECT_EQ(cm.ComputeTime(n), 0.0) << ir::OpKindName(kind);
  }
  CostModelOptions options;
  options.kernel_overhead = 1e-5;
  EXPECT_EQ(CostModel(TestDevice(), options).ComputeTime(Op(OpKind::kReshape, 0.0, 0)), 0.0);
}

TEST(ComputeTime, DefaultEfficiencies) {
  const auto eff = CostModelOptions::DefaultComputeEfficiency();
  for (OpKind kind : {OpKind::kMatmul, OpKind::kBatchMatmul, OpKind::kConv}) {
    EXPECT_GE(eff[static_cast<size_t>(kind)], 0.6);
    EXPECT_LE(eff[static_cast<size_t>(kind)], 0.75);
  }
  for (OpKind kind : {OpKind::kElementwise, OpKind::kSoftmax, OpKind::kLayerNorm, OpKind::kReduce})
    EXPECT_EQ(eff[static_cast<size_t>(kind)], 1.0);
}

TEST(LaunchBoundTime, TheLongerOfDeviceWorkAndKernelLaunches) {
  DeviceSpec d = TestDevice();
  d.kernel_launch_seconds = 35e-6;
  const CostModel cm(d);
  ExpectSeconds(cm.LaunchBoundTime(1e-3, 100), 3.5e-3);  // launch-bound: 100 x 35 us
  ExpectSeconds(cm.LaunchBoundTime(5e-3, 100), 5e-3);    // device-bound
  EXPECT_EQ(cm.LaunchBoundTime(0.0, 0), 0.0);
  EXPECT_EQ(CostModel(TestDevice()).LaunchBoundTime(1e-3, 1000), 1e-3);  // no launch figure: never bound
}

TEST(WaveUtilization, TilesOfTheOutputInWavesOverTheMultiprocessors) {
  DeviceSpec d = TestDevice();
  d.multiprocessors = 108;  // A100
  const CostModel cm(d);
  auto matmul = [](OpKind kind, ir::Shape out) {
    ir::Node n = Op(kind, 1e9, 1000);
    n.output.shape = std::move(out);
    return n;
  };
  // [1024 tokens, 4096]: 8 x 32 = 256 tiles in 3 waves of 108: 256 / 324.
  EXPECT_DOUBLE_EQ(cm.WaveUtilization(matmul(OpKind::kMatmul, {1, 1024, 4096})), 256.0 / 324.0);
  // 108 tiles exactly: one full wave. 9 x 12 tiles, the last of each row partial (1100 = 8.6 x 128).
  EXPECT_DOUBLE_EQ(cm.WaveUtilization(matmul(OpKind::kMatmul, {1152, 1536})), 1.0);
  EXPECT_DOUBLE_EQ(cm.WaveUtilization(matmul(OpKind::kMatmul, {1100, 1536})), 1.0);
  // Batched: [16 heads, 1024, 1024]: 16 x 8 x 8 = 1024 tiles in 10 waves: 1024 / 1080.
  EXPECT_DOUBLE_EQ(cm.WaveUtilization(matmul(OpKind::kBatchMatmul, {16, 1024, 1024})), 1024.0 / 1080.0);
  // One tile: 1 / 108 of the device.
  EXPECT_DOUBLE_EQ(cm.WaveUtilization(matmul(OpKind::kMatmul, {64, 64})), 1.0 / 108.0);
  // The time: flops / (peak x 0.75 x utilization).
  ExpectSeconds(cm.ComputeTime(matmul(OpKind::kMatmul, {1, 1024, 4096})), 1e9 / (1e12 * 0.75 * 256.0 / 324.0));
  // Not GEMM-like, or no multiprocessors given: no wave model.
  EXPECT_EQ(cm.WaveUtilization(matmul(OpKind::kElementwise, {64, 64})), 1.0);
  EXPECT_EQ(CostModel(TestDevice()).WaveUtilization(matmul(OpKind::kMatmul, {64, 64})), 1.0);
}

TEST(MisalignedForTensorCores, SixteenBitGemmsWithALeadingDimensionNotAMultipleOf8) {
  DeviceSpec d = TestDevice();
  d.SetPeakFlops(DType::kBF16, 8e12);  // tensor cores: 8x the f32 rate
  d.multiprocessors = 132;
  const CostModel cm(d);
  // [tokens, out] = [tokens, in] x [in, out]: flops 2 x tokens x out x in.
  auto matmul = [](DType dtype, ir::Shape out, int64_t in, OpKind kind = OpKind::kMatmul) {
    ir::Node n = Op(kind, 0.0, 1000, dtype);
    double numel = 1.0;
    for (int64_t dim : out) numel *= static_cast<double>(dim);
    n.flops = 2.0 * numel * static_cast<double>(in);
    n.output.shape = std::move(out);
    return n;
  };
  const ir::Node lm_head = matmul(DType::kBF16, {8, 1024, 50257}, 1024);  // GPT-2's vocabulary
  EXPECT_TRUE(cm.MisalignedForTensorCores(lm_head));
  ExpectSeconds(cm.ComputeTime(lm_head), lm_head.flops / (8e12 * 0.14));  // the measured fallback rate
  const ir::Node padded = matmul(DType::kBF16, {8, 1024, 50304}, 1024);  // padded to a multiple of 128
  EXPECT_FALSE(cm.MisalignedForTensorCores(padded));
  ExpectSeconds(cm.ComputeTime(padded), padded.flops / (8e12 * 0.75 * cm.WaveUtilization(padded)));
  EXPECT_TRUE(cm.MisalignedForTensorCores(matmul(DType::kBF16, {8192, 1024}, 1001)));      // the depth
  EXPECT_TRUE(cm.MisalignedForTensorCores(matmul(DType::kBF16, {50257, 1024}, 8192)));     // a weight gradient
  EXPECT_TRUE(cm.MisalignedForTensorCores(matmul(DType::kBF16, {8, 16, 1024, 1024}, 100, OpKind::kBatchMatmul)));
  EXPECT_FALSE(cm.MisalignedForTensorCores(matmul(DType::kBF16, {8, 16, 1024, 1024}, 64, OpKind::kBatchMatmul)));
  // Not 16-bit, not a GEMM, no kernel-level model, or no tensor cores for the dtype: never.
  EXPECT_FALSE(cm.MisalignedForTensorCores(matmul(DType::kF32, {8, 1024, 50257}, 1024)));
  EXPECT_FALSE(cm.MisalignedForTensorCores(matmul(DType::kBF16, {8, 1024, 50257}, 1024, OpKind::kElementwise)));
  d.multiprocessors = 0;
  EXPECT_FALSE(CostModel(d).MisalignedForTensorCores(lm_head));
  d.multiprocessors = 132;
  d.SetPeakFlops(DType::kBF16, 1e12);
  EXPECT_FALSE(CostModel(d).MisalignedForTensorCores(lm_head));
}

TEST(LaunchesKernel, ComputedOpsWithWorkOrAMeasuredTime) {
  const CostModel cm(TestDevice());
  EXPECT_TRUE(cm.LaunchesKernel(Op(OpKind::kMatmul, 1e6, 100)));
  EXPECT_TRUE(cm.LaunchesKernel(Op(OpKind::kElementwise, 0.0, 100)));
  EXPECT_FALSE(cm.LaunchesKernel(Op(OpKind::kElementwise, 0.0, 0)));  // a view: nothing runs
  EXPECT_FALSE(cm.LaunchesKernel(Op(OpKind::kParameter, 0.0, 4096)));
  ir::Node measured = Op(OpKind::kElementwise, 0.0, 0);
  measured.measured_cost = 1e-4;
  EXPECT_TRUE(cm.LaunchesKernel(measured));
}

TEST(OverlappedTime, SlowdownFormula) {
  const CostModel cm(TestDevice());  // k = 1.3
  ExpectSeconds(cm.OverlappedTime(10.0, 4.0), 10.0 + 0.3 * 4.0);
  ExpectSeconds(cm.OverlappedTime(4.0, 10.0), 10.0 + 0.3 * 4.0);
  EXPECT_EQ(cm.OverlappedTime(0.0, 5.0), 5.0);
  CostModelOptions heavy;
  heavy.overlap_slowdown = 3.0;  // 10 + 2 * 4 = 18 > 14: never worse than running one after the other
  EXPECT_EQ(CostModel(TestDevice(), heavy).OverlappedTime(10.0, 4.0), 14.0);
  CostModelOptions perfect;
  perfect.overlap_slowdown = 1.0;
  EXPECT_EQ(CostModel(TestDevice(), perfect).OverlappedTime(10.0, 4.0), 10.0);
}

TEST(CostModelCollectiveTime, MatchesTheFreeFunction) {
  const ir::DeviceMesh mesh = {{{2, 1e9, 1e-5, "ib"}, {4, 1e11, 1e-6, "nvlink"}}};
  const CostModel cm(TestDevice());
  EXPECT_EQ(cm.CollectiveTime(Collective::kAllReduce, 8'000'000, mesh, 3),
            CollectiveTime(Collective::kAllReduce, 8'000'000, mesh, 3));
  ExpectSeconds(cm.CollectiveTime(Collective::kAllReduce, 8'000'000, mesh, ir::AxisBit(1)),
                2 * 3 * (1e-6 + 2e-5));
}

}  // namespace
}  // namespace kiwi::cost
