#include "kiwi/cost/cluster.h"

#include <gtest/gtest.h>

namespace kiwi::cost {
namespace {

using ir::DType;

constexpr int64_t kGiB = int64_t{1} << 30;

Cluster Preset(const std::string& name) {
  Result<Cluster> c = ClusterPreset(name);
  EXPECT_TRUE(c.ok()) << name;
  return c.ok() ? *c : Cluster{};
}

TEST(ClusterPreset, NamesAreTheContractsInOrder) {
  EXPECT_EQ(ClusterPresetNames(), (std::vector<std::string>{"v100-nvlink-8", "rtx-titan-pcie-8", "a100-nvlink-ib-16",
                                                            "a100-nvlink-ib-64", "h100-nvlink-8", "dgx-a100-80gb",
                                                            "dgx-h100"}));
}

TEST(ClusterPreset, EveryPresetIsSane) {
  for (const std::string& name : ClusterPresetNames()) {
    const Cluster c = Preset(name);
    EXPECT_EQ(c.name, name);
    EXPECT_GT(c.device.memory_bytes, 0) << name;
    EXPECT_GT(c.device.memory_bandwidth, 0.0) << name;
    EXPECT_GT(c.device.PeakFlops(DType::kF32), 0.0) << name;
    EXPECT_GT(c.device.PeakFlops(DType::kF64), 0.0) << name;
    EXPECT_GT(c.device.PeakFlops(DType::kF16), c.device.PeakFlops(DType::kF32)) << name;  // tensor cores
    EXPECT_GT(c.intra_node.bandwidth, 0.0) << name;
    EXPECT_GT(c.inter_node.bandwidth, 0.0) << name;
    EXPECT_GT(c.intra_node.latency, 0.0) << name;
    EXPECT_LE(c.inter_node.bandwidth, c.intra_node.bandwidth) << name;
    EXPECT_EQ(c.FlatMesh().NumDevices(), c.NumDevices()) << name;
  }
}

TEST(ClusterPreset, PublishedFigures) {
  const Cluster v100 = Preset("v100-nvlink-8");
  EXPECT_EQ(v100.NumDevices(), 8);
  EXPECT_EQ(v100.device.memory_bytes, 16 * kGiB);
  EXPECT_DOUBLE_EQ(v100.device.PeakFlops(DType::kF32), 15.7e12);
  EXPECT_DOUBLE_EQ(v100.device.PeakFlops(DType::kF16), 125e12);
  EXPECT_EQ(v100.device.PeakFlops(DType::kBF16), 0.0);  // Volta has no bf16
  EXPECT_DOUBLE_EQ(v100.device.memory_bandwidth, 900e9);
  EXPECT_DOUBLE_EQ(v100.intra_node.bandwidth, 150e9);

  const Cluster titan = Preset("rtx-titan-pcie-8");
  EXPECT_EQ(titan.device.memory_bytes, 24 * kGiB);
  EXPECT_DOUBLE_EQ(titan.device.PeakFlops(DType::kF32), 16.3e12);
  EXPECT_DOUBLE_EQ(titan.intra_node.bandwidth, 15.75e9);

  const Cluster a100 = Preset("a100-nvlink-ib-16");
  EXPECT_EQ(a100.num_nodes, 2);
  EXPECT_EQ(a100.devices_per_node, 8);
  EXPECT_EQ(a100.device.memory_bytes, 40 * kGiB);
  EXPECT_DOUBLE_EQ(a100.device.PeakFlops(DType::kBF16), 312e12);
  EXPECT_DOUBLE_EQ(a100.intra_node.bandwidth, 300e9);
  EXPECT_DOUBLE_EQ(a100.inter_node.bandwidth, 12.5e9);  // 100 Gb/s per node
  EXPECT_EQ(Preset("a100-nvlink-ib-64").NumDevices(), 64);

  const Cluster h100 = Preset("h100-nvlink-8");
  EXPECT_EQ(h100.device.memory_bytes, 80 * kGiB);
  EXPECT_DOUBLE_EQ(h100.device.PeakFlops(DType::kBF16), 989e12);
  EXPECT_DOUBLE_EQ(h100.device.memory_bandwidth, 3350e9);
  EXPECT_DOUBLE_EQ(h100.intra_node.bandwidth, 450e9);
}

TEST(ClusterPreset, DgxSystemsWithANodeCount) {
  const Cluster one = Preset("dgx-a100-80gb");
  EXPECT_EQ(one.NumDevices(), 8);
  EXPECT_EQ(one.device.name, "A100-SXM4-80GB");
  EXPECT_EQ(one.device.memory_bytes, 80 * kGiB);
  EXPECT_DOUBLE_EQ(one.device.memory_bandwidth, 2039e9);  // A100 80GB SXM datasheet
  EXPECT_DOUBLE_EQ(one.device.PeakFlops(DType::kF16), 312e12);
  EXPECT_DOUBLE_EQ(one.intra_node.bandwidth, 300e9);
  EXPECT_EQ(one.adapters_per_node, 8);
  EXPECT_DOUBLE_EQ(one.inter_node.bandwidth, 25e9);  // one 200 Gb/s HDR adapter per GPU
  EXPECT_DOUBLE_EQ(one.device.kernel_launch_seconds, 35e-6);  // Megatron-LM's dispatch (docs/fidelity.md)
  EXPECT_EQ(one.device.reserved_bytes, 3 * kGiB);
  EXPECT_EQ(one.device.multiprocessors, 108);                  // A100 whitepaper
  EXPECT_EQ(Preset("dgx-h100").device.multiprocessors, 132);   // H100 SXM5 whitepaper
  EXPECT_EQ(Preset("a100-nvlink-ib-16").device.multiprocessors, 0);  // the papers' presets: flat efficiency
  const Cluster many = Preset("dgx-a100-80gb:48");
  EXPECT_EQ(many.name, "dgx-a100-80gb:48");
  EXPECT_EQ(many.num_nodes, 48);
  EXPECT_EQ(many.NumDevices(), 384);
  const Cluster h100 = Preset("dgx-h100:4");
  EXPECT_EQ(h100.NumDevices(), 32);
  EXPECT_DOUBLE_EQ(h100.device.PeakFlops(DType::kBF16), 989e12);
  EXPECT_DOUBLE_EQ(h100.inter_node.bandwidth, 50e9);  // one 400 Gb/s NDR adapter per GPU
  EXPECT_DOUBLE_EQ(h100.intra_node.bandwidth, 450e9);
  for (const std::string bad : {"dgx-a100-80gb:0", "dgx-a100-80gb:", "dgx-a100-80gb:x", "dgx-a100-80gb:-2",
                                "dgx-a100-80gb:4097", "dgx-h100:99999999999"}) {
    Result<Cluster> c = ClusterPreset(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.error().code, ErrorCode::kBadInput);
    EXPECT_NE(c.error().message.find("node count"), std::string::npos) << c.error().message;
  }
  EXPECT_FALSE(ClusterPreset("v100-nvlink-8:2").ok());  // only systems sold as nodes take a count
}

TEST(ClusterPreset, UnknownNameListsTheValidOnes) {
  Result<Cluster> c = ClusterPreset("tpu-v4-8");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ErrorCode::kBadInput);
  EXPECT_NE(c.error().message.find("tpu-v4-8"), std::string::npos) << c.error().message;
  for (const std::string& name : ClusterPresetNames())
    EXPECT_NE(c.error().message.find(name), std::string::npos) << c.error().message;
  EXPECT_EQ(c.error().message.find('\n'), std::string::npos);
}

void ExpectAxis(const ir::MeshAxis& axis, int size, double bandwidth, double latency, const std::string& link) {
  EXPECT_EQ(axis.size, size);
  EXPECT_DOUBLE_EQ(axis.bandwidth, bandwidth);
  EXPECT_DOUBLE_EQ(axis.latency, latency);
  EXPECT_EQ(axis.link, link);
}

TEST(MakeMesh, TwoNodesByEight) {
  Result<ir::DeviceMesh> mesh = Preset("a100-nvlink-ib-16").MakeMesh({2, 8});
  ASSERT_TRUE(mesh.ok()) << mesh.error().message;
  ASSERT_EQ(mesh->Rank(), 2);
  // Axis 0 pairs device j with 8 + j: 8 rings cross each node's 100 Gb NIC at once.
  ExpectAxis(mesh->axes[0], 2, 12.5e9 / 8, 10e-6, "ib-100g");
  ExpectAxis(mesh->axes[1], 8, 300e9, 5e-6, "nvlink3");
}

TEST(MakeMesh, FlatSixteenIsOneRingThroughTheNic) {
  Result<ir::DeviceMesh> mesh = Preset("a100-nvlink-ib-16").MakeMesh({16});
  ASSERT_TRUE(mesh.ok()) << mesh.error().message;
  ASSERT_EQ(mesh->Rank(), 1);
  ExpectAxis(mesh->axes[0], 16, 12.5e9, 10e-6, "ib-100g");
  const ir::DeviceMesh flat = Preset("a100-nvlink-ib-16").FlatMesh();
  ASSERT_EQ(flat.Rank(), 1);
  ExpectAxis(flat.axes[0], 16, 12.5e9, 10e-6, "ib-100g");
}

TEST(MakeMesh, FourByFourOuterAxisMixesNodes) {
  Result<ir::DeviceMesh> mesh = Preset("a100-nvlink-ib-16").MakeMesh({4, 4});
  ASSERT_TRUE(mesh.ok()) << mesh.error().message;
  // Axis 0 groups {j, j+4, j+8, j+12}: 2 devices per node, 4 such rings share each NIC.
  ExpectAxis(mesh->axes[0], 4, 12.5e9 / 4, 10e-6, "ib-100g");
  ExpectAxis(mesh->axes[1], 4, 300e9, 5e-6, "nvlink3");
}

TEST(MakeMesh, InnerAxesStayInANode) {
  Result<ir::DeviceMesh> mesh = Preset("a100-nvlink-ib-64").MakeMesh({8, 2, 4});
  ASSERT_TRUE(mesh.ok()) << mesh.error().message;
  ExpectAxis(mesh->axes[0], 8, 12.5e9 / 8, 10e-6, "ib-100g");
  ExpectAxis(mesh->axes[1], 2, 300e9, 5e-6, "nvlink3");
  ExpectAxis(mesh->axes[2], 4, 300e9, 5e-6, "nvlink3");
  // A mesh within one node never touches the NIC.
  Result<ir::DeviceMesh> small = Preset("a100-nvlink-ib-16").MakeMesh({2, 4});
  ASSERT_TRUE(small.ok());
  ExpectAxis(small->axes[0], 2, 300e9, 5e-6, "nvlink3");
}

TEST(MakeMesh, RailsCarryOneRingEachAndAFlatRingIsLimitedByOneAdapter) {
  const Cluster dgx = Preset("dgx-a100-80gb:2");
  // 2x8: 8 rings cross each node, one per adapter: each gets a whole 25 GB/s rail.
  Result<ir::DeviceMesh> railed = dgx.MakeMesh({2, 8});
  ASSERT_TRUE(railed.ok()) << railed.error().message;
  ExpectAxis(railed->axes[0], 2, 25e9, 5e-6, "ib-hdr-200g");
  ExpectAxis(railed->axes[1], 8, 300e9, 5e-6, "nvlink3");
  // One flat ring over 16 GPUs leaves each node once: one adapter, not the node's eight. NCCL's
  // hierarchical algorithm runs 8 rings across nodes at once, one per GPU and rail.
  const ir::MeshAxis flat = dgx.FlatMesh().axes[0];
  ExpectAxis(flat, 16, 25e9, 5e-6, "ib-hdr-200g");
  EXPECT_EQ(flat.per_node, 8);
  EXPECT_DOUBLE_EQ(flat.node_bandwidth, 300e9);
  EXPECT_DOUBLE_EQ(flat.rail_bandwidth, 25e9);
  EXPECT_EQ(railed->axes[0].per_node, 1);  // one device per node in each group: nothing to do inside nodes
  EXPECT_EQ(railed->axes[1].per_node, 0);  // within a node
  // One NIC per node (a100-nvlink-ib-16): the 8 rings share it.
  EXPECT_DOUBLE_EQ(Preset("a100-nvlink-ib-16").FlatMesh().axes[0].rail_bandwidth, 12.5e9 / 8);
  // More rings than adapters share them.
  Cluster fewer = dgx;
  fewer.adapters_per_node = 2;
  Result<ir::DeviceMesh> shared = fewer.MakeMesh({2, 8});
  ASSERT_TRUE(shared.ok());
  ExpectAxis(shared->axes[0], 2, 25e9 * 2 / 8, 5e-6, "ib-hdr-200g");
}

TEST(MakeMesh, SingleNodeUsesItsLink) {
  Result<ir::DeviceMesh> mesh = Preset("v100-nvlink-8").MakeMesh({2, 4});
  ASSERT_TRUE(mesh.ok());
  ExpectAxis(mesh->axes[0], 2, 150e9, 5e-6, "nvlink2");
  ExpectAxis(mesh->axes[1], 4, 150e9, 5e-6, "nvlink2");
  ExpectAxis(Preset("rtx-titan-pcie-8").FlatMesh().axes[0], 8, 15.75e9, 10e-6, "pcie3");
}

TEST(MakeMesh, RejectsAMeshLargerThanTheCluster) {
  Result<ir::DeviceMesh> mesh = Preset("v100-nvlink-8").MakeMesh({4, 4});
  ASSERT_FALSE(mesh.ok());
  EXPECT_EQ(mesh.error().code, ErrorCode::kBadInput);
  EXPECT_EQ(mesh.error().message, "--mesh 4x4: needs 16 devices, cluster v100-nvlink-8 has 8");
  EXPECT_FALSE(Preset("a100-nvlink-ib-16").MakeMesh({1000000, 1000000, 1000000}).ok());  // no overflow
}

TEST(MakeMesh, RejectsBadShapesAndUnevenStraddling) {
  const Cluster a100 = Preset("a100-nvlink-ib-16");
  for (const std::vector<int>& shape : std::vector<std::vector<int>>{{}, {0}, {2, -1}, {2, 6}, {12}, {3, 4}}) {
    Result<ir::DeviceMesh> mesh = a100.MakeMesh(shape);
    ASSERT_FALSE(mesh.ok()) << shape.size();
    EXPECT_EQ(mesh.error().code, ErrorCode::kBadInput);
    EXPECT_NE(mesh.error().message.find("--mesh"), std::string::npos) << mesh.error().message;
  }
  // 2x6: the group {6..11} takes 2 devices of node 0 and 4 of node 1.
  EXPECT_NE(a100.MakeMesh({2, 6}).error().message.find("axis 1"), std::string::npos);
}

}  // namespace
}  // namespace kiwi::cost
