// Device profiles (cost/profile.h): interpolation, and the cost model using measured figures in
// place of the datasheet's.
#include "kiwi/cost/profile.h"

#include <gtest/gtest.h>

#include "cost_test_util.h"

#include "kiwi/cost/cost_model.h"

namespace kiwi::cost {
namespace {

using ir::DType;
using ir::OpKind;

using testing::ExpectSeconds;
using testing::TestDevice;

GemmSample Gemm(std::string op, int64_t m, int64_t n, int64_t k, double seconds, DType dtype = DType::kF32) {
  GemmSample s;
  s.op = std::move(op);
  s.m = m;
  s.n = n;
  s.k = k;
  s.dtype = dtype;
  s.seconds = seconds;
  return s;
}

TEST(InterpolatedGemmRate, AMeasuredShapeGivesItsRateWithoutTheKernelTime) {
  const std::vector<GemmSample> samples = {Gemm("matmul", 64, 64, 64, 11e-6), Gemm("matmul", 256, 256, 256, 1e-4)};
  // 2 * 64^3 flops in 11 us, of which 1 us is the kernel's own: rate = 524288 / 10e-6.
  EXPECT_NEAR(*InterpolatedGemmRate(samples, "matmul", 64, 64, 64, DType::kF32, 1e-6), 2.0 * 64 * 64 * 64 / 10e-6, 1.0);
  EXPECT_NEAR(*InterpolatedGemmRate(samples, "matmul", 256, 256, 256, DType::kF32, 0.0), 2.0 * 256 * 256 * 256 / 1e-4,
              1.0);
}

TEST(InterpolatedGemmRate, BetweenSamplesTheNearerWeighsMore) {
  const std::vector<GemmSample> samples = {Gemm("", 64, 64, 64, 1e-5), Gemm("", 1024, 1024, 1024, 1e-2)};
  const double slow = 2.0 * 64 * 64 * 64 / 1e-5;
  const double fast = 2.0 * 1024 * 1024 * 1024 / 1e-2;
  ASSERT_LT(slow, fast);
  // log2 distances: (128,128,128) is sqrt(3) from the small sample and 3*sqrt(3) from the large one:
  // inverse-square weights 1/3 and 1/27 -> (27 slow + 3 fast) / 30.
  const double mid = *InterpolatedGemmRate(samples, "matmul", 128, 128, 128, DType::kF32, 0.0);
  EXPECT_NEAR(mid, (27.0 * slow + 3.0 * fast) / 30.0, 1e-6 * mid);
  // Beyond the grid the nearest samples still decide (no extrapolation of the rate).
  const double huge = *InterpolatedGemmRate(samples, "matmul", 8192, 8192, 8192, DType::kF32, 0.0);
  EXPECT_GT(huge, mid);
  EXPECT_LE(huge, fast);
}

TEST(InterpolatedGemmRate, MisalignedShapesUseTheMisalignedSamplesWhenTheProfileHasThem) {
  // A GPU's bf16 samples: aligned 1024^3 in 2 ms; with 1025 columns (off the tensor cores) in 10 ms.
  std::vector<GemmSample> samples = {Gemm("matmul", 1024, 1024, 1024, 2e-3, DType::kBF16),
                                     Gemm("matmul", 4096, 4096, 1024, 32e-3, DType::kBF16),
                                     Gemm("matmul", 1024, 1025, 1024, 10e-3, DType::kBF16)};
  const double aligned = 2.0 * 1024 * 1024 * 1024 / 2e-3;
  const double misaligned = 2.0 * 1024 * 1025 * 1024 / 10e-3;
  // A vocabulary of 50,257 columns: the misaligned sample alone, though the aligned ones are nearer.
  EXPECT_NEAR(*InterpolatedGemmRate(samples, "matmul", 1024, 50257, 1024, DType::kBF16, 0.0), misaligned, 1.0);
  EXPECT_NEAR(*InterpolatedGemmRate(samples, "matmul_grad_a", 1024, 1024, 50257, DType::kBF16, 0.0), misaligned, 1.0);
  EXPECT_NEAR(*InterpolatedGemmRate(samples, "matmul", 1024, 1024, 1024, DType::kBF16, 0.0), aligned, 1.0);
  // A weight gradient's depth is the tokens: 1000 tokens do not make it misaligned.
  samples.push_back(Gemm("matmul_grad_b", 1024, 1024, 1024, 2e-3, DType::kBF16));
  EXPECT_NEAR(*InterpolatedGemmRate(samples, "matmul_grad_b", 1024, 1024, 1000, DType::kBF16, 0.0),
              2.0 * 1024 * 1024 * 1024 / 2e-3, 1.0);
  // A profile with aligned shapes only (a CPU's): every shape uses them.
  samples.erase(samples.begin() + 2);
  EXPECT_GT(*InterpolatedGemmRate(samples, "matmul", 1024, 50257, 1024, DType::kBF16, 0.0), 2 * misaligned);
}

TEST(InterpolatedGemmRate, BackwardOpsUseTheirOwnSamplesThenTheirVariantThenTheForward) {
  const std::vector<GemmSample> samples = {Gemm("matmul", 64, 64, 64, 1e-5), Gemm("matmul_grad_a", 64, 64, 64, 2e-5),
                                           Gemm("matmul_grad_b", 64, 64, 64, 4e-5)};
  const double forward = 2.0 * 64 * 64 * 64 / 1e-5;
  EXPECT_NEAR(*InterpolatedGemmRate(samples, "matmul", 64, 64, 64, DType::kF32, 0.0), forward, 1.0);
  EXPECT_NEAR(*InterpolatedGemmRate(samples, "matmul_grad_a", 64, 64, 64, DType::kF32, 0.0), forward / 2, 1.0);
  EXPECT_NEAR(*InterpolatedGemmRate(samples, "batch_matmul_grad_b", 64, 64, 64, DType::kF32, 0.0), forward / 4, 1.0);
  EXPECT_NEAR(*InterpolatedGemmRate(samples, "batch_matmul", 64, 64, 64, DType::kF32, 0.0), forward, 1.0);
  const std::vector<GemmSample> forward_only = {Gemm("", 64, 64, 64, 1e-5)};
  EXPECT_NEAR(*InterpolatedGemmRate(forward_only, "matmul_grad_b", 64, 64, 64, DType::kF32, 0.0), forward, 1.0);
}

TEST(InterpolatedGemmRate, OtherDtypesAreNotUsed) {
  const std::vector<GemmSample> samples = {Gemm("", 64, 64, 64, 1e-5, DType::kF32)};
  EXPECT_FALSE(InterpolatedGemmRate(samples, "matmul", 64, 64, 64, DType::kBF16, 0.0).has_value());
  EXPECT_FALSE(InterpolatedGemmRate({}, "matmul", 64, 64, 64, DType::kF32, 0.0).has_value());
}

CollectiveSample Coll(Collective op, int devices, int64_t bytes, double seconds) {
  return CollectiveSample{op, devices, bytes, seconds};
}

AttentionSample Attn(std::string op, int64_t batch_heads, int64_t seq, int64_t head_dim, bool causal, double dropout,
                     double seconds) {
  AttentionSample s;
  s.op = std::move(op);
  s.batch_heads = batch_heads;
  s.seq = seq;
  s.head_dim = head_dim;
  s.causal = causal;
  s.dropout = dropout;
  s.seconds = seconds;
  return s;
}

TEST(AttentionSample, FlopsAreTheIrsCount) {
  // tests/ir/attention_test.cpp pins the IR's: 4 b s^2 d forward, 2.5x backward, half under a causal mask.
  EXPECT_DOUBLE_EQ(Attn("attention", 8, 1024, 64, false, 0.0, 1.0).Flops(), 4.0 * 8 * 1024 * 1024 * 64);
  EXPECT_DOUBLE_EQ(Attn("attention_grad", 8, 1024, 64, false, 0.0, 1.0).Flops(), 10.0 * 8 * 1024 * 1024 * 64);
  EXPECT_DOUBLE_EQ(Attn("attention_grad", 8, 1024, 64, true, 0.1, 1.0).Flops(), 5.0 * 8 * 1024 * 1024 * 64);
}

TEST(InterpolatedAttentionRate, SamplesOfTheSameDirectionMaskAndDropout) {
  const std::vector<AttentionSample> samples = {
      Attn("attention", 64, 1024, 64, true, 0.0, 1e-4), Attn("attention", 64, 1024, 64, true, 0.1, 2e-4),
      Attn("attention", 64, 1024, 64, false, 0.0, 1.5e-4), Attn("attention_grad", 64, 1024, 64, true, 0.0, 4e-4)};
  const double fwd_causal = 0.5 * 4.0 * 64 * 1024 * 1024 * 64;
  const auto rate = [&](bool backward, bool causal, bool dropout) {
    return *InterpolatedAttentionRate(samples, backward, 64, 1024, 64, causal, dropout, DType::kBF16, 0.0);
  };
  EXPECT_NEAR(rate(false, true, false), fwd_causal / 1e-4, 1.0);
  EXPECT_NEAR(rate(false, true, true), fwd_causal / 2e-4, 1.0);      // dropout's own sample
  EXPECT_NEAR(rate(false, false, false), 2 * fwd_causal / 1.5e-4, 1.0);
  EXPECT_NEAR(rate(false, false, true), 2 * fwd_causal / 1.5e-4, 1.0);  // no such sample: the mask decides
  EXPECT_NEAR(rate(true, true, true), 2.5 * fwd_causal / 4e-4, 1.0);  // the backward's only sample
  // The kernel's own time comes off a sample's, as for GEMMs; other dtypes have no rate.
  EXPECT_NEAR(*InterpolatedAttentionRate(samples, false, 64, 1024, 64, true, false, DType::kBF16, 2e-5),
              fwd_causal / 8e-5, 1.0);
  EXPECT_FALSE(InterpolatedAttentionRate(samples, false, 64, 1024, 64, true, false, DType::kF32, 0.0).has_value());
  // Between shapes: the nearer in log2(batch x heads, seq, head dim) weighs more.
  const std::vector<AttentionSample> two = {Attn("attention", 8, 512, 64, false, 0.0, 1e-5),
                                            Attn("attention", 8, 4096, 64, false, 0.0, 1e-3)};
  const double short_rate = 4.0 * 8 * 512 * 512 * 64 / 1e-5, long_rate = 4.0 * 8 * 4096 * 4096 * 64 / 1e-3;
  // seq 1024 is 1 octave from 512 and 2 from 4096: weights 1 and 1/4.
  EXPECT_NEAR(*InterpolatedAttentionRate(two, false, 8, 1024, 64, false, false, DType::kBF16, 0.0),
              (short_rate + long_rate / 4) / 1.25, 1e-9 * long_rate);
}

TEST(NonDecreasingFit, PoolsEveryRunThatDecreases) {
  EXPECT_EQ(NonDecreasingFit({}), std::vector<double>{});
  EXPECT_EQ(NonDecreasingFit({1, 2, 3}), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(NonDecreasingFit({3, 1, 2}), (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(NonDecreasingFit({1, 4, 2, 3, 5}), (std::vector<double>{1, 3, 3, 3, 5}));
  EXPECT_EQ(NonDecreasingFit({2, 1, 4, 3}), (std::vector<double>{1.5, 1.5, 3.5, 3.5}));
}

// gloo's small messages on a loaded 2-core machine: 1 KiB measured slower than 16 KiB (kiwi profile
// --processes 4 here: 6.58 ms and 4.81 ms). The two are priced at their mean, the larger sizes as measured.
TEST(InterpolatedCollectiveSeconds, NoisySmallMessagesArePooled) {
  const std::vector<CollectiveSample> s = {{Collective::kAllReduce, 4, 1024, 6.58e-3},
                                           {Collective::kAllReduce, 4, 16384, 4.81e-3},
                                           {Collective::kAllReduce, 4, 262144, 6.26e-3}};
  ExpectSeconds(*InterpolatedCollectiveSeconds(s, Collective::kAllReduce, 4, 512), 5.695e-3);
  ExpectSeconds(*InterpolatedCollectiveSeconds(s, Collective::kAllReduce, 4, 8192), 5.695e-3);
  ExpectSeconds(*InterpolatedCollectiveSeconds(s, Collective::kAllReduce, 4, 262144), 6.26e-3);
}

TEST(InterpolatedCollectiveSeconds, PiecewiseLinearInBytes) {
  const std::vector<CollectiveSample> s = {
      Coll(Collective::kAllReduce, 2, 1000, 1e-4), Coll(Collective::kAllReduce, 2, 3000, 3e-4),
      Coll(Collective::kAllReduce, 2, 5000, 4e-4), Coll(Collective::kAllReduce, 4, 1000, 9e-4),
      Coll(Collective::kAllGather, 2, 1000, 7e-4)};
  ExpectSeconds(*InterpolatedCollectiveSeconds(s, Collective::kAllReduce, 2, 3000), 3e-4);
  ExpectSeconds(*InterpolatedCollectiveSeconds(s, Collective::kAllReduce, 2, 2000), 2e-4);
  ExpectSeconds(*InterpolatedCollectiveSeconds(s, Collective::kAllReduce, 2, 4000), 3.5e-4);
  ExpectSeconds(*InterpolatedCollectiveSeconds(s, Collective::kAllReduce, 2, 9000), 6e-4);  // last slope continues
  ExpectSeconds(*InterpolatedCollectiveSeconds(s, Collective::kAllReduce, 2, 10), 1e-4);    // latency floor
  // One sample: its time, proportionally more above its size.
  ExpectSeconds(*InterpolatedCollectiveSeconds(s, Collective::kAllReduce, 4, 500), 9e-4);
  ExpectSeconds(*InterpolatedCollectiveSeconds(s, Collective::kAllReduce, 4, 2000), 18e-4);
  ExpectSeconds(*InterpolatedCollectiveSeconds(s, Collective::kAllGather, 2, 1000), 7e-4);
  EXPECT_FALSE(InterpolatedCollectiveSeconds(s, Collective::kAllReduce, 8, 1000).has_value());
  EXPECT_FALSE(InterpolatedCollectiveSeconds(s, Collective::kReduceScatter, 2, 1000).has_value());
}

ir::Node Op(OpKind kind, std::string op, ir::Shape shape, double flops, int64_t bytes) {
  ir::Node n;
  n.name = "node";
  n.kind = kind;
  n.op = std::move(op);
  n.output = {DType::kF32, std::move(shape)};
  n.flops = flops;
  n.bytes_accessed = bytes;
  return n;
}

TEST(GemmShapeOf, MatmulRowsColumnsAndDepth) {
  const ir::Node mm = Op(OpKind::kMatmul, "matmul", {8, 16, 32}, 2.0 * 128 * 32 * 64, 0);
  const GemmShape s = *CostModel::GemmShapeOf(mm);
  EXPECT_EQ(s.m, 128);
  EXPECT_EQ(s.n, 32);
  EXPECT_EQ(s.k, 64);
  EXPECT_EQ(CostModel::GemmShapeOf(mm, 0.25)->m, 32);  // a quarter of the rows per device
  // A convolution's implicit GEMM: rows N x H x W, columns C_out, depth C_in x kh x kw.
  const ir::Node conv = Op(OpKind::kConv, "conv2d", {4, 16, 8, 8}, 2.0 * 256 * 16 * 72, 0);
  const GemmShape c = *CostModel::GemmShapeOf(conv);
  EXPECT_EQ(c.m, 256);
  EXPECT_EQ(c.n, 16);
  EXPECT_EQ(c.k, 72);
  EXPECT_FALSE(CostModel::GemmShapeOf(Op(OpKind::kElementwise, "relu", {8, 8}, 64, 512)).has_value());
}

TEST(ProfiledCostModel, GemmsTakeTheMeasuredRatePlusTheKernelTime) {
  Profile p;
  p.device.gemm = {Gemm("matmul", 128, 32, 64, 3e-5)};
  p.device.kernel_seconds = 1e-6;
  const CostModel cm(TestDevice(), {}, p);
  const double flops = 2.0 * 128 * 32 * 64;
  const ir::Node mm = Op(OpKind::kMatmul, "matmul", {128, 32}, flops, 1000);
  ExpectSeconds(cm.ComputeTime(mm), 3e-5);  // the sample itself
  // Without the profile: the roofline, 0.75 of 1 TFLOP/s, no overhead.
  ExpectSeconds(CostModel(TestDevice()).ComputeTime(mm), flops / 0.75e12);
  // Ops of a dtype the profile did not measure keep the roofline (plus the measured kernel time).
  ir::Node half = mm;
  half.output.dtype = DType::kBF16;
  ExpectSeconds(cm.ComputeTime(half), flops / 0.75e12 + 1e-6);
}

// The per-op time of eager training calibrated from the reference pass (DeviceProfile::step_op_seconds)
// is what every priced op pays on a CPU; the profile's own samples are still stripped of its kernel time.
TEST(ProfiledCostModel, TheCalibratedPerOpTimeIsPaidAndTheSamplesKeepTheirRate) {
  Profile p;
  p.device.gemm = {Gemm("matmul", 128, 32, 64, 3e-5)};
  p.device.kernel_seconds = 1e-6;
  p.device.step_op_seconds = 4e-6;
  const CostModel cm(TestDevice(), {}, p);
  const ir::Node mm = Op(OpKind::kMatmul, "matmul", {128, 32}, 2.0 * 128 * 32 * 64, 1000);
  ExpectSeconds(cm.ComputeTime(mm), 3e-5 - 1e-6 + 4e-6);
  ExpectSeconds(cm.OverheadIn(mm), 4e-6);
  const ir::Node relu = Op(OpKind::kElementwise, "relu", {10}, 10, 80);
  ExpectSeconds(cm.ComputeTime(relu), 80 / 8e10 + 4e-6);
  // A GPU's host issues kernels ahead of the device: no per-op time is added there, calibrated or not.
  p.device.overhead = OverheadKind::kLaunchBound;
  const CostModel gpu(TestDevice(), {}, p);
  ExpectSeconds(gpu.ComputeTime(relu), 80 / 8e10);
  EXPECT_EQ(gpu.OverheadIn(relu), 0.0);
}

// aten.convolution_backward asked for both gradients (op conv2d_grad_xw) is two kernels in one call:
// half its flops at the input gradient's measured rate, half at the weight gradient's, one op's time.
TEST(ProfiledCostModel, AConvolutionsTwoGradientsInOneCallArePricedAsTheirTwoKernels) {
  Profile p;
  // The input's gradient of a 3x3 convolution, 16 -> 16 channels on 8x8 images of 4: rows 256, cols 16,
  // depth 144; the weight's: rows 144, cols 16, depth 256. Measured at different rates.
  p.device.conv = {Gemm("conv2d_grad_x", 256, 16, 144, 4e-5), Gemm("conv2d_grad_w", 144, 16, 256, 1e-4),
                   Gemm("conv2d", 256, 16, 144, 1e-5)};
  p.device.kernel_seconds = 1e-6;
  p.device.step_op_seconds = 5e-6;
  const CostModel cm(TestDevice(), {}, p);
  const double one = 2.0 * 256 * 16 * 144;  // each gradient's flops: the forward's
  const ir::Node both = Op(OpKind::kConv, "conv2d_grad_xw", {4, 16, 8, 8}, 2 * one, 1000);
  ExpectSeconds(cm.ComputeTime(both), (4e-5 - 1e-6) + (1e-4 - 1e-6) + 5e-6);
  // Each gradient alone is its own sample.
  const ir::Node input = Op(OpKind::kConv, "conv2d_grad_x", {4, 16, 8, 8}, one, 1000);
  const ir::Node weight = Op(OpKind::kConv, "conv2d_grad_w", {16, 16, 3, 3}, one, 1000);
  ExpectSeconds(cm.ComputeTime(input), 4e-5 - 1e-6 + 5e-6);
  ExpectSeconds(cm.ComputeTime(weight), 1e-4 - 1e-6 + 5e-6);
  // A profile without gradient samples prices both at the forward's rate, as it does one gradient.
  Profile forward_only;
  forward_only.device.conv = {Gemm("conv2d", 256, 16, 144, 1e-5)};
  ExpectSeconds(CostModel(TestDevice(), {}, forward_only).ComputeTime(both), 2 * 1e-5);
}

// A depthwise convolution (one input channel per group) has samples of its own; its weight's gradient
// [C, 1, kh, kw] reads as C x area rows, 1 column, N x H x W deep, alone or inside the pair.
TEST(ProfiledCostModel, DepthwiseConvolutionsUseTheirOwnSamples) {
  Profile p;
  // 3x3 depthwise over 16 channels on 8x8 images of 4: rows 256, cols 16, depth 9.
  p.device.conv = {Gemm("conv2d", 256, 16, 9, 1e-5), Gemm("conv2d_depthwise", 256, 16, 9, 6e-5),
                   Gemm("conv2d_depthwise_grad_x", 256, 16, 9, 7e-5),
                   Gemm("conv2d_depthwise_grad_w", 144, 1, 256, 9e-5)};
  const CostModel cm(TestDevice(), {}, p);
  const double one = 2.0 * 256 * 16 * 9;
  ExpectSeconds(cm.ComputeTime(Op(OpKind::kConv, "conv2d_depthwise", {4, 16, 8, 8}, one, 100)), 6e-5);
  ExpectSeconds(cm.ComputeTime(Op(OpKind::kConv, "conv2d", {4, 16, 8, 8}, one, 100)), 1e-5);
  ExpectSeconds(cm.ComputeTime(Op(OpKind::kConv, "conv2d_depthwise_grad_w", {16, 1, 3, 3}, one, 100)), 9e-5);
  ExpectSeconds(cm.ComputeTime(Op(OpKind::kConv, "conv2d_depthwise_grad_xw", {4, 16, 8, 8}, 2 * one, 100)),
                7e-5 + 9e-5);
}

TEST(ProfiledCostModel, FusedAttentionAtTheMeasuredRateOfItsDirection) {
  // q, k, v of [2, 4, 256, 32]: batch x heads = 8; causal, dropout 0.1, as a GPT preset's layer.
  const double forward_flops = 0.5 * 4.0 * 8 * 256 * 256 * 32;
  ir::Node fwd = Op(OpKind::kAttention, "attention", {2, 4, 256, 32}, forward_flops, 1 << 20);
  fwd.output.dtype = DType::kBF16;
  fwd.attrs.causal = true;
  fwd.attrs.dropout_p = 0.1;
  ir::Node grad_k = fwd;
  grad_k.op = "attention_grad_k";
  grad_k.flops = forward_flops / 2;  // one of the backward's three outputs
  Profile p;
  p.device.attention = {Attn("attention", 8, 256, 32, true, 0.1, 1e-4),
                        Attn("attention_grad", 8, 256, 32, true, 0.1, 5e-4)};
  for (AttentionSample& s : p.device.attention) s.dtype = DType::kBF16;
  const CostModel cm(TestDevice(), {}, p);
  ExpectSeconds(cm.ComputeTime(fwd), 1e-4);
  // The backward's rate: 2.5x the forward's FLOPs in 5e-4 s; grad_k does a fifth of them.
  ExpectSeconds(cm.ComputeTime(grad_k), (forward_flops / 2) / (2.5 * forward_flops / 5e-4));
  // Half the heads on each of two devices: half the batch x heads, at the measured shape's neighbours.
  EXPECT_GT(cm.ComputeTime(fwd, 0.5), 0.0);
  // Without attention samples: the datasheet roofline at FlashAttention-2's efficiency.
  EXPECT_NE(CostModel(TestDevice()).ComputeTime(fwd), cm.ComputeTime(fwd));
}

TEST(ProfiledCostModel, MemoryBoundOpsAtTheirMeasuredBandwidth) {
  Profile p;
  p.device.memory_bandwidth = 2e10;
  p.device.op_bandwidth["gelu"] = 5e9;
  const CostModel cm(TestDevice(), {}, p);
  ExpectSeconds(cm.ComputeTime(Op(OpKind::kElementwise, "gelu", {10}, 8, 1'000'000)), 1e6 / 5e9);
  ExpectSeconds(cm.ComputeTime(Op(OpKind::kElementwise, "relu", {10}, 1, 1'000'000)), 1e6 / 2e10);
  ExpectSeconds(CostModel(TestDevice()).ComputeTime(Op(OpKind::kElementwise, "relu", {10}, 1, 1'000'000)), 1e6 / 8e10);
}

TEST(ProfiledCostModel, OptimizerStepTraffic) {
  // Adam reads parameters, gradients and both moments once (the IR's bytes) but PyTorch's
  // implementation makes 18 passes over the 4: 4.5x the bytes at the device's bandwidth.
  const ir::Node adam = Op(OpKind::kOptimizer, "adam", {}, 12e6, 16'000'000);
  ExpectSeconds(CostModel(TestDevice()).ComputeTime(adam), 16e6 * 4.5 / 8e10);
  const ir::Node sgd = Op(OpKind::kOptimizer, "sgd", {}, 2e6, 8'000'000);
  ExpectSeconds(CostModel(TestDevice()).ComputeTime(sgd), 8e6 * 1.5 / 8e10);
  // A fused Adam reads the 4 tensors once and writes 3 of them: 1.75x.
  ir::Node fused = adam;
  fused.op = "fused_adam";
  ExpectSeconds(CostModel(TestDevice()).ComputeTime(fused), 16e6 * 1.75 / 8e10);
  // A measured step rate is the rate of the IR's bytes: no factor on top; the per-tensor time adds per input.
  Profile p;
  p.device.op_bandwidth["adam"] = 4e9;
  p.device.optimizer_tensor_seconds["adam"] = 1e-6;
  ir::Node adam_of_8 = adam;
  adam_of_8.inputs = {0, 1, 2, 3, 4, 5, 6, 7};
  ExpectSeconds(CostModel(TestDevice(), {}, p).ComputeTime(adam_of_8), 16e6 / 4e9 + 8e-6);
  // Each implementation has its own measured rate: the fused step is not priced at the loop's.
  ir::Node fused_of_8 = adam_of_8;
  fused_of_8.op = "fused_adam";
  ExpectSeconds(CostModel(TestDevice(), {}, p).ComputeTime(fused_of_8), 16e6 * 1.75 / 8e10);
  p.device.op_bandwidth["fused_adam"] = 2e10;
  p.device.optimizer_tensor_seconds["fused_adam"] = 2e-7;
  ExpectSeconds(CostModel(TestDevice(), {}, p).ComputeTime(fused_of_8), 16e6 / 2e10 + 8 * 2e-7);
  // The layer-level simulator asks for the step of a device's model states directly.
  ExpectSeconds(CostModel(TestDevice()).OptimizerStepTime("adam", 16e6, 0), 16e6 * 4.5 / 8e10);
  EXPECT_EQ(CostModel(TestDevice()).OptimizerStepTime("", 16e6, 4), 0.0);  // no optimizer
}

// Megatron's vocabulary-parallel cross-entropy on 1 MB of logits: the counted bytes are the logits read
// and the softmax written (2 MB); forward 4x that in traffic, backward 1x (in place), at 80 GB/s
// without a profile; a measured rate is the counted bytes' (no factor); 14 and 5 kernels.
TEST(ProfiledCostModel, VocabParallelCrossEntropyPasses) {
  const CostModel datasheet(TestDevice());
  const CostModel::PassTime forward = datasheet.VocabParallelCrossEntropyTime(1'000'000, false);
  const CostModel::PassTime backward = datasheet.VocabParallelCrossEntropyTime(1'000'000, true);
  ExpectSeconds(forward.seconds, 8e6 / 8e10);
  ExpectSeconds(backward.seconds, 2e6 / 8e10);
  EXPECT_EQ(forward.kernels, 14);
  EXPECT_EQ(backward.kernels, 5);
  EXPECT_EQ(datasheet.VocabParallelCrossEntropyTime(0, false).seconds, 0.0);
  Profile p;
  p.device.op_bandwidth["vocab_parallel_cross_entropy"] = 1e10;
  p.device.memory_bandwidth = 4e10;  // the copy bandwidth: the backward's rate without its own
  const CostModel measured(TestDevice(), {}, p);
  ExpectSeconds(measured.VocabParallelCrossEntropyTime(1'000'000, false).seconds, 2e6 / 1e10);
  ExpectSeconds(measured.VocabParallelCrossEntropyTime(1'000'000, true).seconds, 2e6 / 4e10);
}

TEST(ProfiledCostModel, KernelTimeIsAddedOnCpusAndBoundsLaunchesOnGpus) {
  Profile additive;
  additive.device.kernel_seconds = 5e-6;
  const ir::Node relu = Op(OpKind::kElementwise, "relu", {10}, 10, 80);
  ExpectSeconds(CostModel(TestDevice(), {}, additive).ComputeTime(relu), 80 / 8e10 + 5e-6);
  EXPECT_EQ(CostModel(TestDevice(), {}, additive).device().kernel_launch_seconds, 0.0);
  Profile launch = additive;
  launch.device.overhead = OverheadKind::kLaunchBound;
  const CostModel gpu(TestDevice(), {}, launch);
  ExpectSeconds(gpu.ComputeTime(relu), 80 / 8e10);
  EXPECT_EQ(gpu.device().kernel_launch_seconds, 5e-6);
  ExpectSeconds(gpu.LaunchBoundTime(1e-6, 10), 5e-5);
  // A per-op time given for the executor (op_time: kiwi.torch's runner, issuing from Python) is the
  // host's time per op instead, on a GPU as on a CPU.
  launch.device.op_seconds = 2e-5;
  const CostModel runner(TestDevice(), {}, launch);
  EXPECT_EQ(runner.device().kernel_launch_seconds, 2e-5);
  ExpectSeconds(runner.ComputeTime(relu), 80 / 8e10);
  ExpectSeconds(runner.LaunchBoundTime(1e-6, 10), 2e-4);
}

TEST(ProfiledCostModel, CollectivesMeasuredForTheGroupSizeReplaceTheFormula) {
  const ir::DeviceMesh mesh = {{{2, 1e9, 1e-5, "a"}, {4, 1e10, 1e-6, "b"}}};
  Profile p;
  p.device.collectives = {Coll(Collective::kAllReduce, 4, 1 << 20, 2e-3), Coll(Collective::kAllReduce, 4, 1 << 22, 5e-3)};
  const CostModel cm(TestDevice(), {}, p);
  ExpectSeconds(cm.CollectiveTime(Collective::kAllReduce, 1 << 20, mesh, ir::AxisBit(1)), 2e-3);
  ExpectSeconds(cm.CollectiveTime(Collective::kAllReduce, 1 << 21, mesh, ir::AxisBit(1)), 3e-3);
  // Group sizes and collectives it did not measure: the alpha-beta algorithms.
  EXPECT_EQ(cm.CollectiveTime(Collective::kAllReduce, 1 << 20, mesh, ir::AxisBit(0)),
            CollectiveTime(Collective::kAllReduce, 1 << 20, mesh, ir::AxisBit(0)));
  EXPECT_EQ(cm.CollectiveTime(Collective::kAllGather, 1 << 20, mesh, ir::AxisBit(1)),
            CollectiveTime(Collective::kAllGather, 1 << 20, mesh, ir::AxisBit(1)));
}

}  // namespace
}  // namespace kiwi::cost
