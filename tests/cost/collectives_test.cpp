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

TEST(CollectiveTime, TreeAllReduceWhenLatencyDominates) {
  // 64 nodes, 1 kB, a = 10 us: the ring's 2 x 63 steps cost 1.26 ms, the tree's 2 x 6 levels 0.12 ms.
  ir::MeshAxis nodes{64, 1e10, 1e-5, "net"};
  nodes.per_node = 1;  // across nodes, where NCCL runs trees
  const ir::DeviceMesh mesh{{nodes}};
  const int64_t n = 1000;
  ExpectSeconds(CollectiveTime(Collective::kAllReduce, n, mesh, AxisBit(0)), 2 * (6 * 1e-5 + 1e3 / 1e10));
  // All-gather and reduce-scatter have no tree: the ring, (p - 1)(a + n/(pB)).
  ExpectSeconds(CollectiveTime(Collective::kAllGather, n, mesh, AxisBit(0)), 63 * (1e-5 + 1e3 / 64e10));
  // Large messages: the ring's 2(p-1)/p n/B beats the tree's 2n/B.
  const int64_t big = 1'000'000'000;
  ExpectSeconds(CollectiveTime(Collective::kAllReduce, big, mesh, AxisBit(0)), 2 * 63 * (1e-5 + 1e9 / 64e10));
  // Inside a node NCCL runs rings: no tree.
  const ir::DeviceMesh node = {{{64, 1e10, 1e-5, "nvlink"}}};
  ExpectSeconds(CollectiveTime(Collective::kAllReduce, n, node, AxisBit(0)), 2 * 63 * (1e-5 + 1e3 / 64e10));
}

// Two DGX A100 nodes as one 16-GPU axis: a flat ring leaves each node through one 25 GB/s adapter;
// NCCL's hierarchical all-reduce reduce-scatters over NVLink (8 GPUs, 300 GB/s), all-reduces 1/8 of the
// data across the 2 nodes on each GPU's own rail, and all-gathers over NVLink.
TEST(CollectiveTime, HierarchicalAcrossRailedNodes) {
  ir::MeshAxis axis{16, 25e9, 5e-6, "ib"};
  axis.per_node = 8;
  axis.node_bandwidth = 300e9;
  axis.node_latency = 5e-6;
  axis.rail_bandwidth = 25e9;
  const ir::DeviceMesh mesh{{axis}};
  const double n = 1e9;
  const double local = 7 * (5e-6 + n / (8 * 300e9));
  const double across = 1 * (5e-6 + n / (8 * 2 * 25e9));
  const double flat = 2 * 15 * (5e-6 + n / (16 * 25e9));
  ExpectSeconds(CollectiveTime(Collective::kAllReduce, 1'000'000'000, mesh, AxisBit(0)), 2 * (local + across));
  EXPECT_LT(2 * (local + across), flat / 6);  // ~10.9 ms instead of ~75 ms
  ExpectSeconds(CollectiveTime(Collective::kReduceScatter, 1'000'000'000, mesh, AxisBit(0)), local + across);
  ExpectSeconds(CollectiveTime(Collective::kAllGather, 1'000'000'000, mesh, AxisBit(0)), local + across);
  // All-to-all has no hierarchical form here: the flat ring.
  ExpectSeconds(CollectiveTime(Collective::kAllToAll, 1'000'000'000, mesh, AxisBit(0)), 15 * (5e-6 + n / (16 * 25e9)));
  // Bytes sent stay the ring's (the runtime tested here, gloo, runs rings).
  EXPECT_EQ(CollectiveBytesSent(Collective::kAllReduce, 1'600'000'000, mesh, AxisBit(0)), int64_t{3'000'000'000});
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
