// Prediction against measurement: kiwi's layer simulator on `dgx-a100-80gb` against 1,440 measured
// Megatron-LM iterations on a DGX A100 (vTrain's single-node file in ../shared/fidelity; docs/fidelity.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "vtrain_rows.h"

namespace kiwi::fidelity {
namespace {

double MeanAbsError(const std::vector<Row>& rows) {
  double sum = 0.0;
  for (const Row& r : rows) sum += std::fabs(r.Error());
  return sum / static_cast<double>(rows.size());
}

double MedianAbsError(const std::vector<Row>& rows) {
  std::vector<double> e;
  for (const Row& r : rows) e.push_back(std::fabs(r.Error()));
  std::sort(e.begin(), e.end());
  return e[e.size() / 2];
}

TEST(Fidelity, DgxA100PredictsMeasuredMegatronIterations) {
  const std::string path = std::string(KIWI_SHARED_DIR) + "/fidelity/vtrain_single_node.csv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not here";
  Result<std::vector<Row>> rows = ReadRows(path);
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  ASSERT_EQ(rows->size(), 1440u);
  Result<cost::Cluster> cluster = cost::ClusterPreset("dgx-a100-80gb");
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(PredictRows(*rows, *cluster, cost::CostModel(cluster->device)).ok());
  // Issue 16's target: at most 10% mean absolute error (9.7% when written; median 8.0%).
  EXPECT_LE(MeanAbsError(*rows), 0.10);
  EXPECT_LE(MedianAbsError(*rows), 0.085);
  // Without the launch bound these small models are predicted far too fast (44% when written).
  cost::Cluster unbounded = *cluster;
  unbounded.device.kernel_launch_seconds = 0.0;
  ASSERT_TRUE(PredictRows(*rows, unbounded, cost::CostModel(unbounded.device)).ok());
  EXPECT_GT(MeanAbsError(*rows), 0.30);
}

TEST(Fidelity, BadRowsAreBadInput) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "kiwi_fidelity_bad.csv";
  std::ofstream(path) << "# header\n2,16,8,1024,16,24,1024,1,1\n";
  Result<std::vector<Row>> rows = ReadRows(path.string());
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.error().code, ErrorCode::kBadInput);
  EXPECT_NE(rows.error().message.find("line 2"), std::string::npos) << rows.error().message;
  EXPECT_FALSE(ReadRows("/nonexistent/rows.csv").ok());
}

}  // namespace
}  // namespace kiwi::fidelity
