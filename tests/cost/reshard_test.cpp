#include <gtest/gtest.h>

#include "kiwi/cost/cost_model.h"

namespace kiwi::cost {
namespace {

void ExpectSeconds(double got, double want) { EXPECT_NEAR(got, want, 1e-9 * want) << "want " << want; }

ir::ShardingSpec Spec(const std::string& text, int mesh_rank) {
  Result<ir::ShardingSpec> spec = ir::ParseShardingSpec(text, 2, mesh_rank);
  EXPECT_TRUE(spec.ok()) << text;
  return spec.ok() ? *spec : ir::ShardingSpec{};
}

CostModel Model() {
  DeviceSpec d;
  d.SetPeakFlops(ir::DType::kF32, 1e12);
  d.memory_bandwidth = 1e11;
  return CostModel(d);
}

const ir::TensorType kTensor = {ir::DType::kF32, {1000, 500}};  // 2e6 bytes

// One axis of 4 devices at 1 GB/s, 10 us.
const ir::DeviceMesh kRing4 = {{{4, 1e9, 1e-5, "x"}}};
// Axis 0: 2 devices at 1 GB/s, 10 us; axis 1: 4 devices at 100 GB/s, 1 us.
const ir::DeviceMesh kTwoByFour = {{{2, 1e9, 1e-5, "ib"}, {4, 1e11, 1e-6, "nvlink"}}};

TEST(ReshardTime, DroppingAnAxisAllGathers) {
  // All-gather of the 2e6-byte result over 4 devices: 3 * (1e-5 + 2e6 / 4e9).
  ExpectSeconds(Model().ReshardTime(kTensor, Spec("S0R", 1), Spec("RR", 1), kRing4), 3 * (1e-5 + 5e-4));
}

TEST(ReshardTime, SlicingAndKeepingAreFree) {
  EXPECT_EQ(Model().ReshardTime(kTensor, Spec("RR", 1), Spec("S0R", 1), kRing4), 0.0);
  EXPECT_EQ(Model().ReshardTime(kTensor, Spec("S0R", 1), Spec("S0R", 1), kRing4), 0.0);
  EXPECT_EQ(Model().ReshardTime(kTensor, Spec("RR", 2), Spec("S1S0", 2), kTwoByFour), 0.0);
}

TEST(ReshardTime, MovingAnAxisBetweenDimsIsAnAllToAll) {
  // All-to-all of each device's 5e5 bytes over 4 devices: 3 * (1e-5 + 5e5 / 4e9).
  ExpectSeconds(Model().ReshardTime(kTensor, Spec("S0R", 1), Spec("RS0", 1), kRing4), 3 * (1e-5 + 1.25e-4));
  // Swapping both axes: each device holds 2.5e5 bytes; axis 0: 1 * (1e-5 + 2.5e5 / 2e9),
  // axis 1: 3 * (1e-6 + 2.5e5 / 4e11).
  ExpectSeconds(Model().ReshardTime(kTensor, Spec("S0S1", 2), Spec("S1S0", 2), kTwoByFour),
                (1e-5 + 1.25e-4) + 3 * (1e-6 + 6.25e-7));
}

TEST(ReshardTime, DroppingTwoAxesGathersSlowestFirst) {
  // Axis 0 (slow) first: result R S1 = 5e5 bytes per device: 1 * (1e-5 + 5e5 / 2e9);
  // then axis 1: result 2e6 bytes: 3 * (1e-6 + 2e6 / 4e11). Same as the hierarchical all-gather.
  const double want = (1e-5 + 2.5e-4) + 3 * (1e-6 + 5e-6);
  ExpectSeconds(Model().ReshardTime(kTensor, Spec("RS01", 2), Spec("RR", 2), kTwoByFour), want);
  ExpectSeconds(CollectiveTime(Collective::kAllGather, 2'000'000, kTwoByFour, 3), want);
}

TEST(ReshardTime, SlicesBeforeGathering) {
  // S0R -> RS1: slice axis 1 first (S0S1, 2.5e5 per device), then gather axis 0 into RS1
  // (5e5 per device): 1 * (1e-5 + 5e5 / 2e9), not the 2e6-byte gather of the naive order.
  ExpectSeconds(Model().ReshardTime(kTensor, Spec("S0R", 2), Spec("RS1", 2), kTwoByFour), 1e-5 + 2.5e-4);
}

}  // namespace
}  // namespace kiwi::cost
