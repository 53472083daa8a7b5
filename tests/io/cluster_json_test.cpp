#include "kiwi/io/cluster_json.h"

#include <gtest/gtest.h>

#include "io_test_util.h"

namespace kiwi::io {
namespace {

using testing::ExpectBadInput;
using testing::FixturePath;
using testing::ScratchDir;

// The fixture with `replace` substituted for `find` (which must occur in it).
std::string EditedFixture(const std::string& find, const std::string& replace) {
  std::string text = testing::ReadAll(FixturePath("cluster_example.json"));
  const size_t at = text.find(find);
  EXPECT_NE(at, std::string::npos) << find;
  if (at != std::string::npos) text.replace(at, find.size(), replace);
  return text;
}

TEST(ClusterJson, ReadsTheFixtureInSiUnits) {
  Result<cost::Cluster> c = ReadClusterFile(FixturePath("cluster_example.json"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->name, "my-cluster");
  EXPECT_EQ(c->num_nodes, 2);
  EXPECT_EQ(c->devices_per_node, 8);
  EXPECT_EQ(c->NumDevices(), 16);
  EXPECT_EQ(c->device.name, "A100-80GB");
  EXPECT_EQ(c->device.memory_bytes, int64_t{80} << 30);
  EXPECT_DOUBLE_EQ(c->device.memory_bandwidth, 2039e9);
  EXPECT_DOUBLE_EQ(c->device.PeakFlops(ir::DType::kF32), 19.5e12);
  EXPECT_DOUBLE_EQ(c->device.PeakFlops(ir::DType::kBF16), 312e12);
  EXPECT_DOUBLE_EQ(c->device.PeakFlops(ir::DType::kF16), 312e12);
  EXPECT_EQ(c->device.PeakFlops(ir::DType::kF64), 0.0);
  EXPECT_EQ(c->intra_node.name, "nvlink3");
  EXPECT_DOUBLE_EQ(c->intra_node.bandwidth, 300e9);
  EXPECT_DOUBLE_EQ(c->intra_node.latency, 5e-6);
  EXPECT_EQ(c->inter_node.name, "ib-100g");
  EXPECT_DOUBLE_EQ(c->inter_node.bandwidth, 12.5e9);
  EXPECT_DOUBLE_EQ(c->inter_node.latency, 10e-6);
}

TEST(ClusterJson, MemoryInBytesAndOneNodeWithoutInterNodeLink) {
  const std::string text = R"({"kiwi_cluster_version": 1, "devices_per_node": 4,
      "device": {"memory": 17179869184, "memory_bandwidth_gbps": 900, "peak_tflops": {"fp32": 15.7}},
      "intra_node": {"bandwidth_gbps": 150}})";
  Result<cost::Cluster> c = ParseClusterJson(text, "/tmp/small-box.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->name, "small-box");  // no name: the file's stem
  EXPECT_EQ(c->num_nodes, 1);
  EXPECT_EQ(c->device.memory_bytes, int64_t{16} << 30);
  EXPECT_DOUBLE_EQ(c->device.PeakFlops(ir::DType::kF32), 15.7e12);
  EXPECT_EQ(c->intra_node.name, "intra_node");
  EXPECT_EQ(c->intra_node.latency, 0.0);
  EXPECT_EQ(c->inter_node.bandwidth, 0.0);
}

TEST(ClusterJson, KernelLaunchTime) {
  EXPECT_EQ(ParseClusterJson(testing::ReadAll(FixturePath("cluster_example.json")), "c.json")->device.kernel_launch_seconds,
            0.0);
  Result<cost::Cluster> c =
      ParseClusterJson(EditedFixture("\"memory_bandwidth_gbps\": 2039", "\"memory_bandwidth_gbps\": 2039, \"kernel_launch_us\": 35"), "c.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_DOUBLE_EQ(c->device.kernel_launch_seconds, 35e-6);
  ExpectBadInput(ParseClusterJson(EditedFixture("\"memory_bandwidth_gbps\": 2039",
                                                "\"memory_bandwidth_gbps\": 2039, \"kernel_launch_us\": -1"), "c.json"),
                 {"c.json: device.kernel_launch_us: must be a non-negative finite number (got -1)"});
}

TEST(ClusterJson, HostLinkAndMemoryForOffloading) {
  Result<cost::Cluster> c = ParseClusterJson(
      EditedFixture("\"memory\": \"80GiB\"",
                    "\"memory\": \"80GiB\", \"host_link_bandwidth_gbps\": 63, \"host_memory_bandwidth_gbps\": 76.8"),
      "c.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_DOUBLE_EQ(c->device.host_link_bandwidth, 63e9);
  EXPECT_DOUBLE_EQ(c->device.host_memory_bandwidth, 76.8e9);
  EXPECT_TRUE(c->device.HasHost());
  Result<cost::Cluster> none = ParseClusterJson(EditedFixture("\"memory\": \"80GiB\"", "\"memory\": \"80GiB\""), "c.json");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->device.HasHost());
  ExpectBadInput(ParseClusterJson(EditedFixture("\"memory\": \"80GiB\"", "\"memory\": \"80GiB\", \"host_link_bandwidth_gbps\": 0"),
                                  "c.json"),
                 {"c.json: device.host_link_bandwidth_gbps:"});
}

TEST(ClusterJson, ReservedMemory) {
  Result<cost::Cluster> c = ParseClusterJson(EditedFixture("\"memory\": \"80GiB\"", "\"memory\": \"80GiB\", \"reserved\": \"3GiB\""), "c.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->device.reserved_bytes, int64_t{3} << 30);
  EXPECT_EQ(ParseClusterJson(EditedFixture("\"memory\": \"80GiB\"", "\"memory\": \"80GiB\", \"reserved\": 0"), "c.json")
                ->device.reserved_bytes,
            0);
  ExpectBadInput(ParseClusterJson(EditedFixture("\"memory\": \"80GiB\"", "\"memory\": \"80GiB\", \"reserved\": \"80GiB\""), "c.json"),
                 {"c.json: device.reserved: must be less than the device's memory"});
  ExpectBadInput(ParseClusterJson(EditedFixture("\"memory\": \"80GiB\"", "\"memory\": \"80GiB\", \"reserved\": -5"), "c.json"),
                 {"c.json: device.reserved:"});
}

TEST(ClusterJson, Multiprocessors) {
  Result<cost::Cluster> c = ParseClusterJson(EditedFixture("\"memory\": \"80GiB\"", "\"memory\": \"80GiB\", \"multiprocessors\": 108"), "c.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->device.multiprocessors, 108);
  ExpectBadInput(ParseClusterJson(EditedFixture("\"memory\": \"80GiB\"", "\"memory\": \"80GiB\", \"multiprocessors\": -1"), "c.json"),
                 {"c.json: device.multiprocessors:"});
}

TEST(ClusterJson, AdaptersPerNode) {
  Result<cost::Cluster> one = ParseClusterJson(testing::ReadAll(FixturePath("cluster_example.json")), "c.json");
  ASSERT_TRUE(one.ok()) << one.error().message;
  EXPECT_EQ(one->adapters_per_node, 1);  // the default: one NIC per node
  Result<cost::Cluster> rails = ParseClusterJson(EditedFixture("\"num_nodes\": 2", "\"num_nodes\": 2, \"adapters_per_node\": 8"), "c.json");
  ASSERT_TRUE(rails.ok()) << rails.error().message;
  EXPECT_EQ(rails->adapters_per_node, 8);
  ExpectBadInput(ParseClusterJson(EditedFixture("\"num_nodes\": 2", "\"num_nodes\": 2, \"adapters_per_node\": 0"), "c.json"),
                 {"c.json: adapters_per_node: must be an integer in [1, 1048576] (got 0)"});
}

TEST(ClusterJson, InterNodeLinkRequiredForSeveralNodes) {
  std::string text = testing::ReadAll(FixturePath("cluster_example.json"));
  text = text.substr(0, text.find(",\n  \"inter_node\"")) + "\n}\n";
  ExpectBadInput(ParseClusterJson(text, "c.json"), {"c.json: inter_node: missing"});
}

TEST(ClusterJson, FieldErrors) {
  ExpectBadInput(ParseClusterJson(EditedFixture("\"80GiB\"", "\"80 parsecs\""), "c.json"),
                 {"c.json: device.memory: '80 parsecs' is not a size"});
  ExpectBadInput(ParseClusterJson(EditedFixture("\"bf16\": 312", "\"bf17\": 312"), "c.json"),
                 {"c.json: device.peak_tflops.bf17: unknown dtype"});
  ExpectBadInput(ParseClusterJson(EditedFixture("\"bandwidth_gbps\": 300", "\"bandwidth_gbps\": -300"), "c.json"),
                 {"c.json: intra_node.bandwidth_gbps: must be a non-negative finite number (got -300)"});
  ExpectBadInput(ParseClusterJson(EditedFixture("\"bandwidth_gbps\": 300", "\"bandwidth_gbps\": 0"), "c.json"),
                 {"c.json: intra_node.bandwidth_gbps: must be positive (got 0)"});
  ExpectBadInput(ParseClusterJson(EditedFixture("\"latency_us\": 5", "\"latency_ms\": 5"), "c.json"),
                 {"c.json: intra_node.latency_ms: unknown field (expected name, bandwidth_gbps, latency_us)"});
  ExpectBadInput(ParseClusterJson(EditedFixture("\"num_nodes\": 2", "\"num_nodes\": 0"), "c.json"),
                 {"c.json: num_nodes: must be an integer in [1, 1048576] (got 0)"});
  ExpectBadInput(ParseClusterJson(EditedFixture("\"f32\": 19.5, \"bf16\": 312, \"f16\": 312", "\"f32\": 0"), "c.json"),
                 {"c.json: device.peak_tflops: must give a positive peak for at least one dtype"});
  ExpectBadInput(ParseClusterJson(EditedFixture("\"kiwi_cluster_version\": 1", "\"kiwi_cluster_version\": 3"), "c.json"),
                 {"c.json: kiwi_cluster_version: unsupported version 3"});
}

// A rate or delay no hardware has is refused with the file and the field; accepted, it priced an
// operator at 10^9 s and the refusal named the operator, not the file (issue 18, item 14).
TEST(ClusterJson, ImplausibleRatesAndDelaysNameTheField) {
  ExpectBadInput(ParseClusterJson(EditedFixture("\"latency_us\": 5", "\"latency_us\": 1e15"), "c.json"),
                 {"c.json: intra_node.latency_us: 1e+15 is not a plausible value: give one in [0, 1e+06]"});
  ExpectBadInput(ParseClusterJson(EditedFixture("\"bandwidth_gbps\": 12.5", "\"bandwidth_gbps\": 1e-9"), "c.json"),
                 {"c.json: inter_node.bandwidth_gbps: 1e-09 is not a plausible value: give one in [0.001, 1e+06]"});
  ExpectBadInput(ParseClusterJson(EditedFixture("\"memory_bandwidth_gbps\": 2039", "\"memory_bandwidth_gbps\": 1e300"), "c.json"),
                 {"c.json: device.memory_bandwidth_gbps: 1e+300 is not a plausible value"});
  ExpectBadInput(ParseClusterJson(EditedFixture("\"f32\": 19.5", "\"f32\": 1e-12"), "c.json"),
                 {"c.json: device.peak_tflops.f32: 1e-12 is not a plausible value: give one in [1e-06, 1e+06] or 0"});
  for (const char* edge : {"\"latency_us\": 0", "\"latency_us\": 1e6"}) {
    Result<cost::Cluster> c = ParseClusterJson(EditedFixture("\"latency_us\": 5", edge), "c.json");
    EXPECT_TRUE(c.ok()) << edge << ": " << c.error().message;
  }
}

TEST(LoadCluster, PresetNameFirst) {
  Result<cost::Cluster> c = LoadCluster("v100-nvlink-8");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->name, "v100-nvlink-8");
  EXPECT_EQ(c->NumDevices(), 8);
}

TEST(LoadCluster, ThenAFile) {
  Result<cost::Cluster> c = LoadCluster(FixturePath("cluster_example.json"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->name, "my-cluster");
}

TEST(LoadCluster, BadFileReportsTheFile) {
  ScratchDir dir;
  const std::string path = dir.Write("broken.json", "{\"kiwi_cluster_version\": 1");
  ExpectBadInput(LoadCluster(path), {path + ": invalid JSON"});
}

TEST(LoadCluster, UnknownNameListsThePresets) {
  ExpectBadInput(LoadCluster("tpu-v9-pod"),
                 {"--cluster: unknown cluster 'tpu-v9-pod'", "v100-nvlink-8", "rtx-titan-pcie-8", "a100-nvlink-ib-16",
                  "a100-nvlink-ib-64", "h100-nvlink-8"});
  // Named by where the name came from: a plan file's field, an API argument.
  ExpectBadInput(LoadCluster("tpu-v9-pod", "plan.json: cluster"), {"plan.json: cluster: unknown cluster 'tpu-v9-pod'"});
  ExpectBadInput(LoadCluster("dgx-h100:0", "cluster"), {"cluster: 'dgx-h100:0': the node count"});
}

}  // namespace
}  // namespace kiwi::io
