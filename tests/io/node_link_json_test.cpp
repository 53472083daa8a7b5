// networkx node-link graphs: Checkmate exports and random layered graphs (fixtures and the shared benchmarks).
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "io_test_util.h"
#include "kiwi/io/graph_json.h"

namespace kiwi::io {
namespace {

using testing::BenchmarkPath;
using testing::ExpectBadInput;
using testing::FixturePath;

double TotalCost(const ir::Graph& g) {
  double total = 0;
  for (const ir::Node& n : g.nodes()) total += n.measured_cost.value_or(-1e9);
  return total;
}
int64_t TotalBytes(const ir::Graph& g) {
  int64_t total = 0;
  for (const ir::Node& n : g.nodes()) total += n.output.Bytes();
  return total;
}

TEST(CheckmateNodeLink, MapsSparseUnorderedIdsToDenseIndices) {
  Result<ir::Graph> g = ReadGraphFile(FixturePath("checkmate_sparse_ids.json"));
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->name(), "tiny checkmate");
  ASSERT_EQ(g->size(), 4);
  // File ids 10, 20, 30, 40 become 0..3 in ascending id order, whatever the order in the file.
  const std::vector<std::string> names = {"input", "conv", "relu", "relu_backward"};
  const std::vector<double> costs = {1.5, 2, 3, 4};
  for (ir::NodeId i = 0; i < 4; ++i) {
    const ir::Node& n = g->node(i);
    EXPECT_EQ(n.name, names[static_cast<size_t>(i)]);
    EXPECT_EQ(n.kind, ir::OpKind::kOpaque);
    EXPECT_EQ(n.op, "");
    EXPECT_EQ(n.output, (ir::TensorType{ir::DType::kU8, {100 * (i + 1)}}));
    EXPECT_EQ(n.measured_cost, costs[static_cast<size_t>(i)]);
    EXPECT_EQ(n.pass, i == 3 ? ir::Pass::kBackward : ir::Pass::kForward);
  }
  EXPECT_TRUE(g->node(0).inputs.empty());
  EXPECT_EQ(g->node(1).inputs, (std::vector<ir::NodeId>{0}));  // the repeated link counts once
  EXPECT_EQ(g->node(2).inputs, (std::vector<ir::NodeId>{1, 0}));
  EXPECT_EQ(g->node(3).inputs, (std::vector<ir::NodeId>{2}));
  EXPECT_EQ(g->NumEdges(), 4);
  EXPECT_FALSE(g->has_explicit_order());
}

TEST(CheckmateNodeLink, NonTopologicalIdsGetTheSmallestIdFirstTopologicalOrder) {
  const std::string text = R"({"nodes": [
      {"id": 0, "cost_cpu": 1, "cost_ram": 8}, {"id": 1, "cost_cpu": 1, "cost_ram": 8},
      {"id": 2, "cost_cpu": 1, "cost_ram": 8}, {"id": 3, "cost_cpu": 1, "cost_ram": 8}],
    "links": [{"source": 2, "target": 0}, {"source": 3, "target": 1}, {"source": 0, "target": 1}]})";
  Result<ir::Graph> g = ParseGraphJson(text, "g.json");
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->order(), (std::vector<ir::NodeId>{2, 0, 3, 1}));
  EXPECT_EQ(g->node(0).name, "0");  // no name in the file: the id
}

TEST(CheckmateNodeLink, AcceptsTheEdgesKeyOfNewerNetworkx) {
  const std::string text = R"({"nodes": [{"id": 0, "cost_cpu": 1, "cost_ram": 8}, {"id": 1, "cost_cpu": 1, "cost_ram": 8}],
    "edges": [{"source": 0, "target": 1}]})";
  Result<ir::Graph> g = ParseGraphJson(text, "g.json");
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->node(1).inputs, (std::vector<ir::NodeId>{0}));
}

TEST(RandomLayeredNodeLink, ReadsTheStringOrder) {
  Result<ir::Graph> g = ReadGraphFile(FixturePath("random_layered_string_order.json"));
  ASSERT_TRUE(g.ok()) << g.error().message;
  ASSERT_EQ(g->size(), 5);
  EXPECT_EQ(g->name(), "random_layered_n5");
  // Ids 0, 1, 2, 3, 4 (file order 0, 2, 3, 4, 1) are dense already; names keep the ids.
  const std::vector<int64_t> bytes = {10, 50, 20, 30, 40};
  const std::vector<double> durations = {0, 0, 5, 6, 7};
  for (ir::NodeId i = 0; i < 5; ++i) {
    EXPECT_EQ(g->node(i).name, std::to_string(i));
    EXPECT_EQ(g->node(i).output.Bytes(), bytes[static_cast<size_t>(i)]);
    EXPECT_EQ(g->node(i).measured_cost, durations[static_cast<size_t>(i)]);
    EXPECT_EQ(g->node(i).pass, ir::Pass::kForward);
  }
  EXPECT_EQ(g->node(1).inputs, (std::vector<ir::NodeId>{4, 3}));
  EXPECT_EQ(g->node(4).inputs, (std::vector<ir::NodeId>{2, 3}));
  EXPECT_EQ(g->order(), (std::vector<ir::NodeId>{0, 3, 2, 4, 1}));
}

TEST(RandomLayeredNodeLink, SparseIdsAndAListOrder) {
  const std::string text = R"({"graph": {"order": [100, 7, 50]}, "nodes": [
      {"name": 50, "duration": 1, "out_cost": 5, "param_cost": 0}, {"name": 7, "duration": 2, "out_cost": 6},
      {"name": 100, "duration": 3, "out_cost": 7}],
    "links": [{"0": 100, "1": 7}, {"0": 7, "1": 50}]})";
  Result<ir::Graph> g = ParseGraphJson(text, "g.json");
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->node(0).name, "7");
  EXPECT_EQ(g->node(1).name, "50");
  EXPECT_EQ(g->node(2).name, "100");
  EXPECT_EQ(g->node(0).inputs, (std::vector<ir::NodeId>{2}));
  EXPECT_EQ(g->node(1).inputs, (std::vector<ir::NodeId>{0}));
  EXPECT_EQ(g->order(), (std::vector<ir::NodeId>{2, 0, 1}));
}

TEST(RandomLayeredNodeLink, OrderErrorsNameTheField) {
  const std::string head = R"({"nodes": [{"name": 0, "duration": 1, "out_cost": 5}, {"name": 1, "duration": 1, "out_cost": 5}],
    "links": [{"0": 0, "1": 1}], "graph": {"order": )";
  ExpectBadInput(ParseGraphJson(head + "[0, 9]}}", "g.json"), {"g.json: graph.order[1]: node 9 does not exist"});
  ExpectBadInput(ParseGraphJson(head + "[0, 0]}}", "g.json"), {"g.json: graph.order[1]: node 0 listed twice"});
  ExpectBadInput(ParseGraphJson(head + "[0]}}", "g.json"), {"g.json: graph.order: lists 1 nodes, the graph has 2"});
  ExpectBadInput(ParseGraphJson(head + "\"[0, 1\"}}", "g.json"), {"g.json: graph.order: must be a list"});
  ExpectBadInput(ParseGraphJson(head + "[1, 0]}}", "g.json"), {"g.json: ", "order"});  // not topological
}

TEST(RandomLayeredNodeLink, NonzeroParamCostIsRejected) {
  const std::string text = R"({"nodes": [{"name": 0, "duration": 1, "out_cost": 5, "param_cost": 64}], "links": []})";
  ExpectBadInput(ParseGraphJson(text, "g.json"), {"g.json: nodes[0].param_cost: nonzero parameter memory"});
}

TEST(RandomLayeredNodeLink, ZeroDurationIsAllowedZeroSizeIsNot) {
  const std::string ok = R"({"nodes": [{"name": 0, "duration": 0, "out_cost": 5}], "links": []})";
  EXPECT_TRUE(ParseGraphJson(ok, "g.json").ok());
  const std::string zero = R"({"nodes": [{"name": 0, "duration": 1, "out_cost": 0}], "links": []})";
  ExpectBadInput(ParseGraphJson(zero, "g.json"), {"g.json: nodes[0].out_cost: must be a positive integer (got 0)"});
}

// The shared benchmark graphs; expected values computed offline with python's json module.
class BenchmarkGraphs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(BenchmarkPath("vgg16_b256_train.json"))) GTEST_SKIP() << "no shared benchmarks";
  }
};

TEST_F(BenchmarkGraphs, Vgg16) {
  Result<ir::Graph> g = ReadGraphFile(BenchmarkPath("vgg16_b256_train.json"));
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->name(), "VGG16 (MLSys)_256_(224, 224, 3)_train");
  EXPECT_EQ(g->size(), 45);
  EXPECT_EQ(g->NumEdges(), 87);
  EXPECT_EQ(g->NumNodes(ir::Pass::kBackward), 23);
  EXPECT_EQ(TotalCost(*g), 15500.0);
  EXPECT_EQ(TotalBytes(*g), 30949721088);
  EXPECT_EQ(g->node(3).name, "block2_conv1");
  EXPECT_EQ(g->node(3).output.Bytes(), 1644167168);
  EXPECT_EQ(g->node(44).inputs, (std::vector<ir::NodeId>{0, 1, 43}));
  EXPECT_FALSE(g->has_explicit_order());
}

TEST_F(BenchmarkGraphs, MobilenetAndResnet) {
  Result<ir::Graph> m = ReadGraphFile(BenchmarkPath("mobilenet_b512_train.json"));
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->size(), 185);
  EXPECT_EQ(m->NumEdges(), 367);
  EXPECT_EQ(m->NumNodes(ir::Pass::kBackward), 93);
  EXPECT_EQ(TotalCost(*m), 162080.0);
  EXPECT_EQ(TotalBytes(*m), 69015943168);
  Result<ir::Graph> r = ReadGraphFile(BenchmarkPath("resnet50_b256_train.json"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->size(), 353);
  EXPECT_EQ(r->NumEdges(), 751);
  EXPECT_EQ(r->NumNodes(ir::Pass::kBackward), 177);
  EXPECT_EQ(TotalCost(*r), 405670.0);
  EXPECT_EQ(TotalBytes(*r), 75713913856);
}

TEST_F(BenchmarkGraphs, RandomLayered) {
  Result<ir::Graph> g = ReadGraphFile(BenchmarkPath("random_layered_n100.json"));
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->size(), 100);
  EXPECT_EQ(g->NumEdges(), 236);
  EXPECT_EQ(g->NumNodes(ir::Pass::kBackward), 0);
  EXPECT_EQ(TotalCost(*g), 47769.0);
  EXPECT_EQ(TotalBytes(*g), 204108);
  ASSERT_TRUE(g->has_explicit_order());
  const std::vector<ir::NodeId> order = g->order();
  EXPECT_EQ(std::vector<ir::NodeId>(order.begin(), order.begin() + 6), (std::vector<ir::NodeId>{0, 3, 2, 9, 4, 10}));
  EXPECT_EQ(order.back(), 1);
  EXPECT_EQ(g->node(1).inputs, (std::vector<ir::NodeId>{98, 99}));
  EXPECT_EQ(g->node(50).inputs, (std::vector<ir::NodeId>{44, 46, 48}));
  EXPECT_EQ(g->node(4).output.Bytes(), 5320);
  EXPECT_EQ(g->node(4).measured_cost, 955.0);

  Result<ir::Graph> big = ReadGraphFile(BenchmarkPath("random_layered_n250.json"));
  ASSERT_TRUE(big.ok()) << big.error().message;
  EXPECT_EQ(big->size(), 250);
  EXPECT_EQ(big->NumEdges(), 944);
  EXPECT_EQ(TotalCost(*big), 125569.0);
  EXPECT_EQ(TotalBytes(*big), 510859);
}

}  // namespace
}  // namespace kiwi::io
