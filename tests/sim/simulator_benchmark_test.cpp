// SimulateOperatorPlan on the Checkmate paper's training graphs (../shared/benchmarks/remat): the
// checkpoint-all peak and compute cost equal those computed here straight from the file's fields.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "kiwi/io/graph_json.h"
#include "kiwi/sim/simulator.h"
#include "op_sim_test_util.h"

namespace kiwi::sim {
namespace {

// The contract's figures, from the raw node-link JSON, independently of kiwi's reader.
struct RawFigures {
  int64_t checkpoint_all_peak = 0;
  double compute_cost = 0.0;
  size_t nodes = 0;
};

// CONTRACT.md checkpoint_all_peak_bytes: order = node ids; an output is resident from its compute
// until its last consumer has run (or until right after its compute when nothing reads it); the
// peak is read right after each compute.
RawFigures FiguresFromFile(const std::string& path) {
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::map<int64_t, int64_t> ram;
  RawFigures f;
  for (const auto& node : doc.at("nodes")) {
    ram[node.at("id").get<int64_t>()] = node.at("cost_ram").get<int64_t>();
    f.compute_cost += node.at("cost_cpu").get<double>();
  }
  std::map<int64_t, int64_t> last_use;
  for (const auto& [id, bytes] : ram) last_use[id] = id;
  for (const auto& link : doc.at("links")) {
    const int64_t src = link.at("source").get<int64_t>();
    last_use[src] = std::max(last_use[src], link.at("target").get<int64_t>());
  }
  for (const auto& [now, unused] : ram) {
    int64_t live = 0;
    for (const auto& [id, bytes] : ram)
      if (id <= now && last_use[id] >= now) live += bytes;
    f.checkpoint_all_peak = std::max(f.checkpoint_all_peak, live);
  }
  f.nodes = ram.size();
  return f;
}

class CheckmateGraphs : public ::testing::TestWithParam<const char*> {};

TEST_P(CheckmateGraphs, CheckpointAllMatchesTheContractDefinition) {
  const std::string path = std::string(KIWI_SHARED_DIR) + "/benchmarks/remat/" + GetParam();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  Result<ir::Graph> g = io::ReadGraphFile(path);
  ASSERT_TRUE(g) << g.error().message;
  const RawFigures expected = FiguresFromFile(path);
  ASSERT_EQ(static_cast<size_t>(g->size()), expected.nodes);

  Result<SimResult> r = SimulateOperatorPlan(*g, plan::OperatorPlan{}, op_test::MeasuredCostModel(), ir::DeviceMesh{});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_GT(expected.checkpoint_all_peak, 0);
  EXPECT_EQ(r->peak_memory_bytes, expected.checkpoint_all_peak);
  EXPECT_DOUBLE_EQ(r->time.compute, expected.compute_cost);
  EXPECT_DOUBLE_EQ(r->iteration_seconds, expected.compute_cost);
  EXPECT_EQ(r->recomputations, 0);
  EXPECT_EQ(r->timeline.size(), 2 * expected.nodes);  // every node computed once and freed once
  EXPECT_EQ(r->timeline.back().bytes_after, 0);
}

INSTANTIATE_TEST_SUITE_P(Remat, CheckmateGraphs,
                         ::testing::Values("vgg16_b256_train.json", "mobilenet_b512_train.json",
                                           "resnet50_b256_train.json"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           return name.substr(0, name.find('_'));
                         });

}  // namespace
}  // namespace kiwi::sim
