#include "kiwi/cost/throughput.h"

#include <gtest/gtest.h>

namespace kiwi::cost {
namespace {

// MFU = model FLOPs per iteration / (iteration seconds x devices x peak), PaLM App. B.
TEST(ThroughputOf, SamplesTokensAndModelFlopsUtilization) {
  LayerModel model;
  model.layers.resize(2);
  model.layers[0].flops_per_sample = 3e9;
  model.layers[1].flops_per_sample = 3e9;
  model.embedding.flops_per_sample = 1e9;
  model.head.flops_per_sample = 1e9;
  Cluster cluster;
  cluster.num_nodes = 2;
  cluster.devices_per_node = 4;
  cluster.device.SetPeakFlops(ir::DType::kBF16, 1e12);
  const TrainingThroughput t = ThroughputOf(model, 16, 512, 0.5, cluster, ir::DType::kBF16);
  EXPECT_DOUBLE_EQ(t.samples_per_second, 32.0);
  EXPECT_DOUBLE_EQ(t.tokens_per_second_per_device, 32.0 * 512 / 8);
  EXPECT_DOUBLE_EQ(t.model_flops_per_iteration, 8e9 * 16);
  EXPECT_DOUBLE_EQ(t.mfu, 8e9 * 16 / (0.5 * 8 * 1e12));
  // a dtype the device has no peak for, or a model without FLOPs: no MFU, the rest stays
  EXPECT_DOUBLE_EQ(ThroughputOf(model, 16, 512, 0.5, cluster, ir::DType::kF32).mfu, 0.0);
  EXPECT_DOUBLE_EQ(ThroughputOf(LayerModel{}, 16, 512, 0.5, cluster, ir::DType::kBF16).mfu, 0.0);
  EXPECT_DOUBLE_EQ(ThroughputOf(model, 16, 512, 0.0, cluster, ir::DType::kBF16).samples_per_second, 0.0);
}

}  // namespace
}  // namespace kiwi::cost
