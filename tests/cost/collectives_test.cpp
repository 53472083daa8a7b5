#include "kiwi/cost/collectives.h"

#include <gtest/gtest.h>

namespace kiwi::cost {
namespace {

using ir::AxisBit;

// Relative tolerance: the expected values below are hand-computed sums of a few terms.
void ExpectSeconds(double got, double want) { EXPECT_NEAR(got, want, 1e-9 * want) << "want " << want; }

// One axis of 4 devices, 1 GB/s, 10 us.
ir::DeviceMesh Ring4() { return {{{4, 1e9, 1e-5, "slow"}}}; }

// Axis 0: 2 devices at 1 GB/s, 10 us (between nodes); axis 1: 4 devices at 100 GB/s, 1 us (in a node).
ir::DeviceMesh TwoByFour() { return {{{2, 1e9, 1e-5, "ib"}, {4, 1e11, 1e-6, "nvlink"}}}; }

TEST(CollectiveTime, OneAxisRingFormulas) {
  const ir::DeviceMesh mesh = Ring4();
  const int64_t n = 4'000'000;  // n/(pB) = 1e-3 s per step, a = 1e-5
  ExpectSeconds(CollectiveTime(Collective::kAllReduce, n, mesh, AxisBit(0)), 2 * 3 * (1e-5 + 1e-3));
  ExpectSeconds(CollectiveTime(Collective::kAllGather, n, mesh, AxisBit(0)), 3 * (1e-5 + 1e-3));
  ExpectSeconds(CollectiveTime(Collective::kReduceScatter, n, mesh, AxisBit(0)), 3 * (1e-5 + 1e-3));
  ExpectSeconds(CollectiveTime(Collective::kAllToAll, n, mesh, AxisBit(0)), 3 * (1e-5 + 1e-3));
  ExpectSeconds(CollectiveTime(Collective::kPointToPoint, n, mesh, AxisBit(0)), 1e-5 + 4e-3);
}

TEST(CollectiveTime, OneDeviceOrNoBytesCostsNothing) {
  const ir::DeviceMesh mesh = {{{1, 1e9, 1e-5, "x"}, {4, 1e9, 1e-5, "y"}}};
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kAllToAll, Collective::kPointToPoint}) {
    EXPECT_EQ(CollectiveTime(c, 1'000'000, mesh, AxisBit(0)), 0.0) << CollectiveName(c);
    EXPECT_EQ(CollectiveTime(c, 1'000'000, mesh, 0), 0.0) << CollectiveName(c);
    EXPECT_EQ(CollectiveTime(c, 0, mesh, AxisBit(1)), 0.0) << CollectiveName(c);
    EXPECT_EQ(CollectiveBytesSent(c, 1'000'000, mesh, AxisBit(0)), 0) << CollectiveName(c);
    // A size-1 axis adds nothing to a group with a real axis.
    EXPECT_EQ(CollectiveTime(c, 1'000'000, mesh, AxisBit(0) | AxisBit(1)),
              CollectiveTime(c, 1'000'000, mesh, AxisBit(1)))
        << CollectiveName(c);
  }
}

// Stages for n = 8e6 on TwoByFour: the fast axis (p=4) on 8e6 bytes: 3 * (1e-6 + 8e6/4e11) = 6.3e-5;
// the slow axis (p=2) on 2e6 bytes: 1 * (1e-5 + 2e6/2e9) = 1.01e-3.
constexpr double kFastStage = 3 * (1e-6 + 2e-5);
constexpr double kSlowStage = 1e-5 + 1e-3;

TEST(CollectiveTime, TwoAxesHierarchical) {
  const ir::DeviceMesh mesh = TwoByFour();
  const ir::AxisMask both = AxisBit(0) | AxisBit(1);
  const int64_t n = 8'000'000;
  ExpectSeconds(CollectiveTime(Collective::kReduceScatter, n, mesh, both), kFastStage + kSlowStage);
  ExpectSeconds(CollectiveTime(Collective::kAllGather, n, mesh, both), kFastStage + kSlowStage);
  ExpectSeconds(CollectiveTime(Collective::kAllReduce, n, mesh, both), 2 * (kFastStage + kSlowStage));
  // All-to-all: the full buffer on each axis: 3 * (1e-6 + 2e-5) + 1 * (1e-5 + 8e6/2e9).
  ExpectSeconds(CollectiveTime(Collective::kAllToAll, n, mesh, both), kFastStage + 1e-5 + 4e-3);
  // Point-to-point crosses the slowest axis: 1e-5 + 8e6/1e9.
  ExpectSeconds(CollectiveTime(Collective::kPointToPoint, n, mesh, both), 1e-5 + 8e-3);
}

TEST(CollectiveTime, FastestAxisGoesFirstWhateverItsIndex) {
  const ir::DeviceMesh mesh = {{{4, 1e11, 1e-6, "nvlink"}, {2, 1e9, 1e-5, "ib"}}};  // swapped
  const ir::AxisMask both = AxisBit(0) | AxisBit(1);
  ExpectSeconds(CollectiveTime(Collective::kReduceScatter, 8'000'000, mesh, both), kFastStage + kSlowStage);
  ExpectSeconds(CollectiveTime(Collective::kPointToPoint, 8'000'000, mesh, both), 1e-5 + 8e-3);
}

TEST(CollectiveBytesSent, RingFormulas) {
  const int64_t n = 4'000'000;
  EXPECT_EQ(CollectiveBytesSent(Collective::kAllReduce, n, Ring4(), AxisBit(0)), 6'000'000);  // 2(p-1)/p n
  EXPECT_EQ(CollectiveBytesSent(Collective::kAllGather, n, Ring4(), AxisBit(0)), 3'000'000);  // (p-1)/p n
  EXPECT_EQ(CollectiveBytesSent(Collective::kReduceScatter, n, Ring4(), AxisBit(0)), 3'000'000);
  EXPECT_EQ(CollectiveBytesSent(Collective::kAllToAll, n, Ring4(), AxisBit(0)), 3'000'000);
  EXPECT_EQ(CollectiveBytesSent(Collective::kPointToPoint, n, Ring4(), AxisBit(0)), 4'000'000);
}

TEST(CollectiveBytesSent, TwoAxesHierarchical) {
  const ir::DeviceMesh mesh = TwoByFour();
  const ir::AxisMask both = AxisBit(0) | AxisBit(1);
  const int64_t n = 8'000'000;
  // Fast stage: 3/4 of 8e6 = 6e6; slow stage: 1/2 of 2e6 = 1e6.
  EXPECT_EQ(CollectiveBytesSent(Collective::kReduceScatter, n, mesh, both), 7'000'000);
  EXPECT_EQ(CollectiveBytesSent(Collective::kAllGather, n, mesh, both), 7'000'000);
  EXPECT_EQ(CollectiveBytesSent(Collective::kAllReduce, n, mesh, both), 14'000'000);
  EXPECT_EQ(CollectiveBytesSent(Collective::kAllToAll, n, mesh, both), 6'000'000 + 4'000'000);
  EXPECT_EQ(CollectiveBytesSent(Collective::kPointToPoint, n, mesh, both), 8'000'000);
}

TEST(CollectiveName, Names) {
  EXPECT_EQ(CollectiveName(Collective::kAllReduce), "all-reduce");
  EXPECT_EQ(CollectiveName(Collective::kAllGather), "all-gather");
  EXPECT_EQ(CollectiveName(Collective::kReduceScatter), "reduce-scatter");
  EXPECT_EQ(CollectiveName(Collective::kAllToAll), "all-to-all");
  EXPECT_EQ(CollectiveName(Collective::kPointToPoint), "point-to-point");
}

}  // namespace
}  // namespace kiwi::cost
