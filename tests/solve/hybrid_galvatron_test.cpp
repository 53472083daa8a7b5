// Galvatron interop end to end: a model read from Galvatron's profiles (with its measured hardware),
// planned by kiwi, exported in Galvatron's strategy-config format and read back, replays with the
// same predicted throughput and memory.
#include <gtest/gtest.h>

#include "kiwi/io/galvatron_config.h"
#include "kiwi/io/galvatron_profiles.h"
#include "kiwi/solve/hybrid/search.h"

namespace kiwi::solve::hybrid {
namespace {

const std::string kData = std::string(KIWI_TEST_DATA_DIR) + "/galvatron/";

TEST(GalvatronInterop, ExportedPlanReadsBackWithTheSameThroughput) {
  io::GalvatronModelOptions mo;
  mo.layers_per_type = {8, 8};
  Result<cost::LayerModel> model = io::ReadGalvatronModel(kData + "computation_profiling_fp32_test.json",
                                                         kData + "memory_profiling_fp32_test.json", mo);
  ASSERT_TRUE(model.ok()) << model.error().message;
  Result<cost::Cluster> base = cost::ClusterPreset("rtx-titan-pcie-8");
  ASSERT_TRUE(base.ok());
  Result<io::GalvatronHardware> hw = io::ReadGalvatronHardware(
      kData + "allreduce_bandwidth_1nodes_8gpus_per_node.json", "", kData + "overlap_coefficient.json", *base);
  ASSERT_TRUE(hw.ok()) << hw.error().message;
  cost::CostModelOptions cmo;
  cmo.overlap_slowdown = hw->overlap_coefficient;
  const cost::CostModel cm(hw->cluster.device, cmo);
  for (int64_t gib : {4, 8, 16}) {
    HybridSearchOptions o;
    o.method = Method::kBmw;  // Galvatron's space (kiwi's adds ZeRO-1, which Galvatron cannot express)
    o.memory_budget_bytes = gib << 30;
    o.max_batch = 128;
    Result<HybridSearchResult> r = SearchHybridPlan(*model, hw->cluster, cm, o);
    ASSERT_TRUE(r.ok() && r->feasible) << gib;
    Result<std::string> exported = io::WriteGalvatronConfig(r->plan);
    ASSERT_TRUE(exported.ok()) << exported.error().message;
    Result<plan::LayerPlan> back = io::ParseGalvatronConfig(*exported, "exported.json", {.num_devices = 8});
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->layers, r->plan.layers);
    Result<sim::LayerSimResult> replay = sim::SimulateLayerPlan(*model, *back, hw->cluster, cm);
    ASSERT_TRUE(replay.ok()) << replay.error().message;
    EXPECT_EQ(replay->throughput_samples_per_second, r->simulated.throughput_samples_per_second) << gib;
    EXPECT_EQ(replay->summary.peak_memory_bytes, r->simulated.summary.peak_memory_bytes);
    EXPECT_LE(replay->summary.peak_memory_bytes, o.memory_budget_bytes);
  }
}

}  // namespace
}  // namespace kiwi::solve::hybrid
