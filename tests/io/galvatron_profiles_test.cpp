// Galvatron's computation, memory and hardware profiles read into kiwi's layer model and cluster,
// with hand-computed values (MB = 2^20 bytes, ms per sample, GB/s = 10^9 bytes/s).
#include "kiwi/io/galvatron_profiles.h"

#include "kiwi/cost/cost_model.h"
#include "kiwi/cost/pipeline.h"

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
  EXPECT_EQ(enc.parameter_bytes, 48 * 1048576);  // fp32 (the file name says): parameter_size as it is
  EXPECT_EQ(enc.activation_bytes_per_sample, 160 * 1048576);
  EXPECT_EQ(enc.replicated_activation_bytes_per_sample, 20 * 1048576);  // 160 at TP 1, 90 at TP 2: 20 + 140 / tp
  EXPECT_EQ(enc.boundary_bytes_per_sample, 5 * 1048576);
  EXPECT_EQ(enc.tp_comm_bytes_per_sample, 10 * 1048576);
  // Galvatron's batch mode: 1 x 12 ms and 8 x 10.5 ms on a line: 72/7 ms per sample + 12/7 ms per micro-batch
  EXPECT_NEAR(enc.forward_seconds_per_sample, 72.0 / 7 / 1e3, 1e-15);
  EXPECT_NEAR(enc.forward_overhead_seconds, 12.0 / 7 / 1e3, 1e-15);
  EXPECT_NEAR(enc.backward_seconds_per_sample, 2 * 72.0 / 7 / 1e3, 1e-15);
  EXPECT_NEAR(enc.backward_overhead_seconds, 2 * 12.0 / 7 / 1e3, 1e-15);
  const cost::LayerProfile& dec = m->layers[4];
  EXPECT_EQ(dec.parameter_bytes, 64 * 1048576);
  EXPECT_EQ(dec.boundary_bytes_per_sample, 2621440);  // 2.5 MB
  EXPECT_DOUBLE_EQ(dec.forward_seconds_per_sample, 0.007);  // one micro-batch size: no line, no intercept
  EXPECT_DOUBLE_EQ(dec.forward_overhead_seconds, 0.0);
  // The pipeline entries: the first stage's to the embeddings, the last's to the head, half the time each
  EXPECT_EQ(m->embedding.parameter_bytes, 80 * 1048576);  // 320 MB of fp32 Adam model states / 4
  EXPECT_EQ(m->embedding.activation_bytes_per_sample, 10 * 1048576);
  EXPECT_DOUBLE_EQ(m->embedding.forward_seconds_per_sample, 0.001);
  EXPECT_EQ(m->head.parameter_bytes, 80 * 1048576);
  EXPECT_DOUBLE_EQ(m->head.forward_seconds_per_sample, 0.001);
  EXPECT_DOUBLE_EQ(m->state_bytes_per_parameter_byte, 3.0);
  EXPECT_TRUE(Fixture({2, 3}, 512).ok());
}

// Galvatron's shipped Llama-2-7B profiles have only sequence-parallel memory entries, in bf16, and
// a fixed time per micro-batch: read as its estimator reads them (search_engine.py, layer_cost.py).
TEST(GalvatronProfiles, SixteenBitSequenceParallelProfilesAsGalvatronReadsThem) {
  const std::string computation = R"({"layertype_0_bsz1_seq2048": 5.0, "layertype_0_bsz2_seq2048": 4.5,
    "layertype_0_bsz4_seq2048": 4.25, "layertype_other_bsz1_seq2048": 3.0, "layertype_other_bsz2_seq2048": 2.5,
    "layernum[2]_bsz1_seq2048": 15.0})";
  const std::string memory = R"({"1_1_8_sp": {"layernum[1]_bsz8_seq2048_rank0_ms": 904.3},
    "layertype_0_sp": {"2048": {"parameter_size": 800.0,
      "tp_activation_per_bsz_dict": {"1": 512.0, "2": 260.0, "4": 134.0, "8": 71.0, "checkpoint": 32.0}}},
    "other_memory_pp_off_sp": {"2048": {"model_states": {"1": 4096.0, "8": 848.0}, "activation": {"1": 800.0, "8": 100.0}}}})";
  GalvatronModelOptions o;
  o.layers_per_type = {32};
  o.hidden = 4096;
  Result<cost::LayerModel> m = ParseGalvatronModel(
      {computation, memory, "configs/computation_profiling_bf16_llama2-7b_all.json", "m.json"}, o);
  ASSERT_TRUE(m.ok()) << m.error().message;
  ASSERT_EQ(m->layers.size(), 32u);
  const cost::LayerProfile& l = m->layers[0];
  EXPECT_EQ(l.parameter_bytes, 400 * 1048576);              // 800 MB of fp32 parameters in bf16
  EXPECT_DOUBLE_EQ(m->state_bytes_per_parameter_byte, 7.0);  // 16 bytes of model states per parameter
  EXPECT_EQ(l.activation_bytes_per_sample, 512 * 1048576);
  EXPECT_EQ(l.replicated_activation_bytes_per_sample, 8 * 1048576);  // 512 at TP 1, 71 at TP 8: 8 + 504 / tp
  EXPECT_EQ(l.boundary_bytes_per_sample, 32 * 1048576);
  EXPECT_EQ(l.tp_comm_bytes_per_sample, 2 * 2048 * 4096 * 2);  // [seq, hidden] in bf16, twice (kiwi's convention)
  EXPECT_NEAR(l.forward_seconds_per_sample, 4e-3, 1e-15);      // b x ms = 4 b + 1
  EXPECT_NEAR(l.forward_overhead_seconds, 1e-3, 1e-15);
  EXPECT_NEAR(m->embedding.forward_seconds_per_sample, 2e-3, 1e-15);  // b x ms = 2 b + 1, all of it
  EXPECT_NEAR(m->embedding.forward_overhead_seconds, 1e-3, 1e-15);
  EXPECT_EQ(m->embedding.parameter_bytes, 512 * 1048576);             // 4096 MB of states / 8 per parameter byte
  EXPECT_EQ(m->embedding.replicated_parameter_bytes, 48 * 1048576);   // (8 x 848 - 4096) / 7 / 8
  EXPECT_EQ(m->embedding.replicated_activation_bytes_per_sample, 0);  // (8 x 100 - 800) / 7
  EXPECT_EQ(m->head.parameter_bytes, 0);                               // no pipeline entries: all on the embeddings
  // An explicit precision wins over the file name; the plain entries are read where there are no _sp ones.
  o.precision = GalvatronPrecision::kFp32;
  Result<cost::LayerModel> fp32 = ParseGalvatronModel({computation, memory, "computation_profiling_bf16_x.json", "m.json"}, o);
  ASSERT_TRUE(fp32.ok()) << fp32.error().message;
  EXPECT_EQ(fp32->layers[0].parameter_bytes, 800 * 1048576);
  EXPECT_DOUBLE_EQ(fp32->state_bytes_per_parameter_byte, 3.0);
  EXPECT_EQ(fp32->layers[0].tp_comm_bytes_per_sample, 2 * 2048 * 4096 * 4);
  // Both kinds present: the plain ones unless sequence parallelism is asked for.
  const std::string both = R"({"layertype_0": {"parameter_size": 10.0, "tp_activation_per_bsz_dict": {"1": 4.0, "checkpoint": 1.0}},
    "layertype_0_sp": {"parameter_size": 10.0, "tp_activation_per_bsz_dict": {"1": 2.0, "checkpoint": 1.0}}})";
  o.hidden = 0;
  Result<cost::LayerModel> plain = ParseGalvatronModel({computation, both, "c.json", "m.json"}, o);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_EQ(plain->layers[0].activation_bytes_per_sample, 4 * 1048576);
  o.sequence_parallel = true;
  Result<cost::LayerModel> sp = ParseGalvatronModel({computation, both, "c.json", "m.json"}, o);
  ASSERT_TRUE(sp.ok()) << sp.error().message;
  EXPECT_EQ(sp->layers[0].activation_bytes_per_sample, 2 * 1048576);
}

// Galvatron's static and sequence profile modes (search_engine.py get_profiled_model_configs): static
// takes the profiled per-sample time; sequence fits micro-batch-1 times over sequence lengths (a
// quadratic for a layer, a line for "other") at the length asked for, and scales the longest length's
// activations to it with the shortest length's parameters.
TEST(GalvatronProfiles, StaticAndSequenceModes) {
  // Layer: 1 + 2 (s/1024) + 3 (s/1024)^2 ms at micro-batch 1; other: 0.5 + s/1024 ms.
  const auto layer_ms = [](double s) { return 1.0 + 2.0 * s / 1024 + 3.0 * (s / 1024) * (s / 1024); };
  const auto other_ms = [](double s) { return 0.5 + s / 1024; };
  std::string computation = "{";
  for (int s : {512, 1024, 2048, 4096})
    computation += fmt::format(R"("layertype_0_bsz1_seq{0}": {1}, "layertype_other_bsz1_seq{0}": {2}, )", s,
                               layer_ms(s), other_ms(s));
  computation += R"("layertype_0_bsz4_seq1024": 5.0, "layertype_other_bsz4_seq1024": 1.0})";
  const std::string memory = R"({
    "layertype_0": {"1024": {"parameter_size": 100.0, "tp_activation_per_bsz_dict": {"1": 40.0, "2": 24.0, "checkpoint": 4.0}},
                    "4096": {"parameter_size": 101.0, "tp_activation_per_bsz_dict": {"1": 160.0, "2": 96.0, "checkpoint": 16.0}}},
    "other_memory_pp_off": {"1024": {"model_states": 64.0, "activation": 2.0},
                            "4096": {"model_states": 65.0, "activation": {"1": 8.0, "2": 6.0}}}})";
  GalvatronModelOptions o;
  o.layers_per_type = {2};
  o.seq = 3072;
  o.time_mode = GalvatronTimeMode::kSequence;
  o.memory_mode = GalvatronMemoryMode::kSequence;
  Result<cost::LayerModel> m = ParseGalvatronModel({computation, memory, "c.json", "m.json"}, o);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const cost::LayerProfile& layer = m->layers[0];
  EXPECT_NEAR(layer.forward_seconds_per_sample, layer_ms(3072) / 1e3, 1e-12);  // the quadratic, exactly
  EXPECT_DOUBLE_EQ(layer.forward_overhead_seconds, 0.0);
  EXPECT_NEAR(m->embedding.forward_seconds_per_sample, other_ms(3072) / 1e3, 1e-12);
  EXPECT_EQ(layer.parameter_bytes, 100 * 1048576);  // the shortest length's
  EXPECT_EQ(layer.activation_bytes_per_sample, 120 * 1048576);  // 160 MB at 4096, x 3072 / 4096
  EXPECT_EQ(layer.boundary_bytes_per_sample, 12 * 1048576);
  EXPECT_EQ(m->embedding.activation_bytes_per_sample, 6 * 1048576);  // 8 MB at 4096, scaled
  EXPECT_EQ(m->embedding.parameter_bytes, 65 * 1048576 / 4);          // the longest length's states
  // The sequence the profiles are read at is the attention's, which CP splits.
  EXPECT_EQ(layer.attention_sequence, 3072);
  EXPECT_EQ(layer.attention_kv_bytes_per_sample, layer.tp_comm_bytes_per_sample);
  EXPECT_EQ(m->ContextParallelSequence(), 3072);

  // Static: the profiled per-sample time (the largest micro-batch's), no line; memory at the length.
  o.seq = 1024;
  o.time_mode = GalvatronTimeMode::kStatic;
  o.memory_mode = GalvatronMemoryMode::kStatic;
  Result<cost::LayerModel> st = ParseGalvatronModel({computation, memory, "c.json", "m.json"}, o);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_DOUBLE_EQ(st->layers[0].forward_seconds_per_sample, 5.0 / 1e3);
  EXPECT_DOUBLE_EQ(st->layers[0].forward_overhead_seconds, 0.0);
  EXPECT_EQ(st->layers[0].activation_bytes_per_sample, 40 * 1048576);
  o.time_mode = GalvatronTimeMode::kBatch;  // the line through micro-batches 1 and 4
  Result<cost::LayerModel> batch = ParseGalvatronModel({computation, memory, "c.json", "m.json"}, o);
  ASSERT_TRUE(batch.ok()) << batch.error().message;
  EXPECT_GT(batch->layers[0].forward_overhead_seconds, 0.0);

  // The sequence modes need a length, and the time mode enough of them.
  o.seq = 0;
  o.time_mode = GalvatronTimeMode::kSequence;
  Result<cost::LayerModel> no_seq = ParseGalvatronModel({computation, memory, "c.json", "m.json"}, o);
  ASSERT_FALSE(no_seq.ok());
  EXPECT_NE(no_seq.error().message.find("c.json: the sequence time mode needs the sequence length"), std::string::npos)
      << no_seq.error().message;
  o.seq = 2048;
  Result<cost::LayerModel> too_few = ParseGalvatronModel(
      {R"({"layertype_0_bsz1_seq1024": 2.0, "layertype_0_bsz1_seq2048": 3.0})", memory, "c.json", "m.json"}, o);
  ASSERT_FALSE(too_few.ok());
  EXPECT_NE(too_few.error().message.find("at least 3 sequence lengths"), std::string::npos) << too_few.error().message;
  o.time_mode = GalvatronTimeMode::kStatic;
  o.memory_mode = GalvatronMemoryMode::kSequence;
  Result<cost::LayerModel> bad = ParseGalvatronModel(
      {computation, R"({"layertype_0": {"1024": {"parameter_size": 1.0, "tp_activation_per_bsz_dict": {"1": "x"}}}})",
       "c.json", "m.json"},
      o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("m.json: layertype_0.1024.tp_activation_per_bsz_dict.1"), std::string::npos)
      << bad.error().message;
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

// Galvatron's sp_time file: collectives timed over message sizes; all-gathers and reduce-scatters are
// half an all-reduce (config_utils.py remap_config_for_latency), all-to-alls their own entries.
TEST(GalvatronProfiles, CollectiveTimesFromTheSpTimeFile) {
  Result<cost::Cluster> base = cost::ClusterPreset("rtx-titan-pcie-8");
  ASSERT_TRUE(base.ok());
  Result<GalvatronHardware> h =
      ReadGalvatronHardware("", "", "", *base, kData + "sp_time_1nodes_8gpus_per_node.json");
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_EQ(h->collectives.size(), 4u * 3 + 1);  // 4 all-reduces, each with its all-gather and reduce-scatter
  const auto seconds = [&](cost::Collective op, int devices, int64_t mib) {
    return cost::InterpolatedCollectiveSeconds(h->collectives, op, devices, mib << 20);
  };
  EXPECT_DOUBLE_EQ(*seconds(cost::Collective::kAllReduce, 8, 16), 2e-3);
  EXPECT_DOUBLE_EQ(*seconds(cost::Collective::kAllGather, 8, 16), 1e-3);
  EXPECT_DOUBLE_EQ(*seconds(cost::Collective::kReduceScatter, 8, 64), 4e-3);
  EXPECT_DOUBLE_EQ(*seconds(cost::Collective::kAllGather, 8, 40), 2.5e-3);  // between 16 and 64 MB, linear
  EXPECT_DOUBLE_EQ(*seconds(cost::Collective::kAllToAll, 8, 16), 1.5e-3);
  EXPECT_DOUBLE_EQ(*seconds(cost::Collective::kAllReduce, 2, 16), 1e-3);
  EXPECT_FALSE(seconds(cost::Collective::kAllReduce, 4, 16).has_value());  // not timed at 4 devices
  // The time reaches the cost model: an all-gather over 8 devices of the node
  cost::Profile profile;
  profile.device.collectives = h->collectives;
  const cost::CostModel cm(h->cluster.device, {}, profile);
  Result<ir::DeviceMesh> mesh = h->cluster.MakeMesh({8});
  ASSERT_TRUE(mesh.ok());
  EXPECT_DOUBLE_EQ(cm.CollectiveTime(cost::Collective::kAllGather, int64_t{16} << 20, *mesh, ir::AxisBit(0)), 1e-3);
  // No entry at all, and a bad time, are refused naming the file and key
  Result<GalvatronHardware> none = ParseGalvatronHardware({"", "", "", R"({"x": 1})", "", "", "", "s.json"}, *base);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("s.json"), std::string::npos) << none.error().message;
  Result<GalvatronHardware> bad = ParseGalvatronHardware(
      {"", "", "", R"({"allreduce_size_8_1MB_time": -1})", "", "", "", "s.json"}, *base);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("s.json: allreduce_size_8_1MB_time"), std::string::npos) << bad.error().message;
}

TEST(GalvatronProfiles, ReserveIsTwentyPercentOverTwentyGibPlusContext) {
  constexpr int64_t kMiB = 1 << 20;
  EXPECT_EQ(cost::GalvatronReservedBytes(36LL << 30), (7372 + 1024) * kMiB);  // int(36864 x 0.2) MB + 1 GB
  EXPECT_EQ(cost::GalvatronReservedBytes(21LL << 30), (4300 + 1024) * kMiB);
  EXPECT_EQ(cost::GalvatronReservedBytes(20LL << 30), 1024 * kMiB);  // max_mem // 1024 > 20 is false at 20 GiB
  EXPECT_EQ(cost::GalvatronReservedBytes(8LL << 30), 1024 * kMiB);
}

}  // namespace
}  // namespace kiwi::io
