// The first example of each format document in docs/ is a valid file: the docs cannot drift from the readers.
#include <gtest/gtest.h>

#include "io_test_util.h"
#include "kiwi/io/cluster_json.h"
#include "kiwi/io/graph_json.h"
#include "kiwi/io/plan_json.h"

namespace kiwi::io {
namespace {

// The n-th ```json block of docs/<name>.
std::string JsonExample(const std::string& name, int n = 0) {
  const std::string doc = testing::ReadAll(std::string(KIWI_TEST_DATA_DIR) + "/../../docs/" + name);
  size_t at = 0;
  for (int i = 0; i <= n; ++i) {
    at = doc.find("```json\n", at);
    if (at == std::string::npos) return "";
    at += 8;
  }
  return doc.substr(at, doc.find("```", at) - at);
}

TEST(DocsExamples, GraphFormat) {
  Result<ir::Graph> g = ParseGraphJson(JsonExample("graph-format.md"), "graph-format.md");
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->size(), 5);
  EXPECT_EQ(g->node(2).measured_cost, 0.5);
}

TEST(DocsExamples, PlanFormat) {
  Result<plan::Plan> p = ParsePlanJson(JsonExample("plan-format.md"), "plan-format.md");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->op->schedule.size(), 3u);
  ASSERT_EQ(p->layer->layers.size(), 3u);
  EXPECT_TRUE(p->layer->layers[1].SelectiveRecompute());
}

TEST(DocsExamples, ClusterAndProfileFormats) {
  Result<cost::Cluster> c = ParseClusterJson(JsonExample("cluster-format.md"), "cluster-format.md");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->NumDevices(), 16);
  Result<cost::Profile> p = ParseProfileJson(JsonExample("cluster-format.md", 1), "cluster-format.md");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_DOUBLE_EQ(*p->Find("layer0.attn.qkv"), 1.5e-3);
  EXPECT_EQ(p->device.gemm.size(), 1u);
  EXPECT_EQ(p->device.conv.size(), 1u);
  EXPECT_EQ(p->device.collectives.size(), 1u);
  EXPECT_DOUBLE_EQ(p->device.op_bandwidth.at("adam"), 4.6e9);
}

}  // namespace
}  // namespace kiwi::io
