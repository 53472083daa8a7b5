// Galvatron's computation, memory and hardware profiles read into kiwi's layer model and cluster,
// with hand-computed values (MB = 2^20 bytes, ms per sample, GB/s = 10^9 bytes/s).
#include "kiwi/io/galvatron_profiles.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace kiwi::io {
namespace {

const std::string kData = std::string(KIWI_TEST_DATA_DIR) + "/galvatron/";

Result<cost::LayerModel> Fixture(std::vector<int> layers, int64_t seq = 0) {
  GalvatronModelOptions o;
  o.layers_per_type = std::move(layers);
  o.seq = seq;
  return ReadGalvatronModel(kData + "computation_profiling_fp32_test.json", kData + "memory_profiling_fp32_test.json", o);
}

TEST(GalvatronProfiles, ReadLayerTypesAndEmbeddings) {
  Result<cost::LayerModel> m = Fixture({2, 3});
  ASSERT_TRUE(m.ok()) << m.error().message;
  ASSERT_EQ(m->layers.size(), 5u);
  const cost::LayerProfile& enc = m->layers[0];
  EXPECT_EQ(enc.parameter_bytes, 48 * 1048576);
  EXPECT_EQ(enc.activation_bytes_per_sample, 160 * 1048576);
  EXPECT_EQ(enc.boundary_bytes_per_sample, 5 * 1048576);
  EXPECT_EQ(enc.tp_comm_bytes_per_sample, 10 * 1048576);
  EXPECT_DOUBLE_EQ(enc.forward_seconds_per_sample, 0.0105);  // the bsz8 entry, not bsz1
  EXPECT_DOUBLE_EQ(enc.backward_seconds_per_sample, 0.021);
  const cost::LayerProfile& dec = m->layers[4];
  EXPECT_EQ(dec.parameter_bytes, 64 * 1048576);
  EXPECT_EQ(dec.boundary_bytes_per_sample, 2621440);  // 2.5 MB
  EXPECT_DOUBLE_EQ(dec.forward_seconds_per_sample, 0.007);
  EXPECT_EQ(m->embedding.parameter_bytes, 160 * 1048576);  // 640 MB of fp32 Adam model states / 4
  EXPECT_EQ(m->embedding.activation_bytes_per_sample, 20 * 1048576);
  EXPECT_DOUBLE_EQ(m->embedding.forward_seconds_per_sample, 0.002);
  EXPECT_DOUBLE_EQ(m->state_bytes_per_parameter_byte, 3.0);
  EXPECT_TRUE(Fixture({2, 3}, 512).ok());
}

TEST(GalvatronProfiles, ErrorsNameTheFileAndEntry) {
  Result<cost::LayerModel> three = Fixture({1, 1, 1});
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.error().message.find("layertype_2"), std::string::npos) << three.error().message;
  Result<cost::LayerModel> wrong_seq = Fixture({1, 1}, 1024);
  ASSERT_FALSE(wrong_seq.ok());
  EXPECT_FALSE(Fixture({}).ok());
  GalvatronModelOptions o;
  o.layers_per_type = {1};
  Result<cost::LayerModel> bad = ParseGalvatronModel(
      {R"({"layertype_0_bsz1_seq8": 1.0})", R"({"layertype_0": {"parameter_size": -1,
       "tp_activation_per_bsz_dict": {"1": 1, "checkpoint": 1}}})", "c.json", "m.json"}, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("m.json: layertype_0.parameter_size"), std::string::npos) << bad.error().message;
  // Issue 18 item 4: 1e18 MiB wrapped to a small byte count and made an absurd plan "fit".
  for (const char* huge : {R"("parameter_size": 1e18, "tp_activation_per_bsz_dict": {"1": 1, "checkpoint": 1})",
                           R"("parameter_size": 1, "tp_activation_per_bsz_dict": {"1": 1e18, "checkpoint": 1})",
                           R"("parameter_size": 1, "tp_activation_per_bsz_dict": {"1": 1, "checkpoint": 3e7})"}) {
    Result<cost::LayerModel> r = ParseGalvatronModel(
        {R"({"layertype_0_bsz1_seq8": 1.0})", fmt::format(R"({{"layertype_0": {{{}}}}})", huge), "c.json", "m.json"}, o);
    ASSERT_FALSE(r.ok()) << huge;
    EXPECT_NE(r.error().message.find("m.json: layertype_0."), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("more than any device holds"), std::string::npos) << r.error().message;
  }
  Result<cost::LayerModel> two_seqs = ParseGalvatronModel(
      {R"({"layertype_0_bsz1_seq8": 1.0})", R"({"layertype_0": {"8": {}, "16": {}}})", "c.json", "m.json"}, o);
  ASSERT_FALSE(two_seqs.ok());
  EXPECT_NE(two_seqs.error().message.find("sequence length"), std::string::npos);
}

TEST(GalvatronProfiles, HardwareSetsLinkBandwidthsAndOverlap) {
  Result<cost::Cluster> base = cost::ClusterPreset("rtx-titan-pcie-8");
  ASSERT_TRUE(base.ok());
  Result<GalvatronHardware> h = ReadGalvatronHardware(kData + "allreduce_bandwidth_1nodes_8gpus_per_node.json",
                                                      kData + "p2p_bandwidth_1nodes_8gpus_per_node.json",
                                                      kData + "overlap_coefficient.json", *base);
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_DOUBLE_EQ(h->cluster.intra_node.bandwidth, 12.5e9);
  EXPECT_DOUBLE_EQ(h->overlap_coefficient, 1.15);
  EXPECT_EQ(h->p2p_bandwidth.size(), 3u);
  EXPECT_DOUBLE_EQ(h->p2p_bandwidth[4], 10e9);
  Result<cost::Cluster> two_nodes = cost::ClusterPreset("a100-nvlink-ib-16");
  ASSERT_TRUE(two_nodes.ok());
  Result<GalvatronHardware> missing =
      ReadGalvatronHardware(kData + "allreduce_bandwidth_1nodes_8gpus_per_node.json", "", "", *two_nodes);
  ASSERT_FALSE(missing.ok());  // 16 devices: needs allreduce_size_16_consec_1
  EXPECT_NE(missing.error().message.find("allreduce_size_16_consec_1"), std::string::npos);
}

}  // namespace
}  // namespace kiwi::io
