// IOPDDL contest files: the streaming reader, exact round trips, and one-line errors naming the field.
#include "kiwi/io/iopddl_json.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "io_test_util.h"

namespace kiwi::io {
namespace {

using testing::ScratchDir;

const char* kExample = R"({"problem": {"name": "example",
  "nodes": {"intervals": [[30, 70], [40, 70], [50, 120], [110, 140], [110, 150]],
            "costs": [[15], [55, 65], [25, 45, 35], [85, 75], [95]],
            "usages": [[10], [25, 25], [15, 20, 15], [10, 10], [15]]},
  "edges": {"nodes": [[0, 1], [0, 2], [1, 3], [2, 4], [3, 4]],
            "costs": [[30, 40], [50, 10, 40], [90, 10, 20, 80], [60, 20, 30], [70, 60]]},
  "usage_limit": 50}})";

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

std::string ErrorFor(const std::string& text) {
  Result<ir::ShardingProblem> p = ParseIopddlJson(text, "bad.json");
  EXPECT_FALSE(p.ok());
  if (p.ok()) return "";
  EXPECT_EQ(p.error().code, ErrorCode::kBadInput);
  EXPECT_EQ(p.error().message.find('\n'), std::string::npos);
  return p.error().message;
}

TEST(IopddlJson, ReadsTheExample) {
  Result<ir::ShardingProblem> p = ParseIopddlJson(kExample, "example.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->name, "example");
  ASSERT_EQ(p->nodes.size(), 5u);
  EXPECT_EQ(p->nodes[2].start, 50);
  EXPECT_EQ(p->nodes[2].end, 120);
  EXPECT_EQ(p->nodes[2].cost, (std::vector<int64_t>{25, 45, 35}));
  EXPECT_EQ(p->nodes[2].usage, (std::vector<int64_t>{15, 20, 15}));
  ASSERT_EQ(p->edges.size(), 5u);
  EXPECT_EQ(p->edges[2].u, 1);
  EXPECT_EQ(p->edges[2].v, 3);
  EXPECT_EQ(p->edges[2].cost, (std::vector<int64_t>{90, 10, 20, 80}));
  EXPECT_EQ(p->usage_limit, 50);
  EXPECT_EQ(ir::Evaluate(*p, {0, 0, 2, 1, 0}).cost, 445);
}

TEST(IopddlJson, RoundTripsExactlyThroughTheWriter) {
  Result<ir::ShardingProblem> p = ParseIopddlJson(kExample, "example.json");
  ASSERT_TRUE(p.ok());
  Result<ir::ShardingProblem> again = ParseIopddlJson(WriteIopddlJson(*p), "written.json");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(WriteIopddlJson(*again), WriteIopddlJson(*p));
  EXPECT_EQ(again->edges[4].cost, p->edges[4].cost);
}

TEST(IopddlJson, ReadsGzippedFilesAndIgnoresUnknownFields) {
  ScratchDir dir;
  const std::string text = Replace(kExample, "\"usage_limit\"", "\"comment\": [1, {\"a\": null}], \"usage_limit\"");
  const std::string path = dir.Write("p.json.gz", testing::Gzip(text));
  Result<ir::ShardingProblem> p = ReadIopddlFile(path);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->nodes.size(), 5u);
}

TEST(IopddlJson, ReadsThePublicInstances) {
  const std::string path = std::string(KIWI_SHARED_DIR) + "/benchmarks/iopddl/asplos-2025-iopddl-G.json.gz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  Result<ir::ShardingProblem> p = ReadIopddlFile(path);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->nodes.size(), 816u);
  EXPECT_EQ(p->edges.size(), 1023u);
  EXPECT_EQ(p->usage_limit, 14392528);
}

TEST(IopddlJson, BadFilesNameTheField) {
  EXPECT_EQ(ErrorFor(Replace(kExample, "\"usage_limit\": 50", "\"limit\": 50")),
            "bad.json: problem.usage_limit: missing");
  EXPECT_EQ(ErrorFor(Replace(kExample, "\"usages\": [[10], [25, 25], [15, 20, 15], [10, 10], [15]]", "\"u\": 1")),
            "bad.json: problem.nodes.usages: missing");
  EXPECT_EQ(ErrorFor(Replace(kExample, "[3, 4]]", "[3, 7]]")),
            "bad.json: problem.edges.nodes[4]: node 7 out of range [0, 5)");
  EXPECT_EQ(ErrorFor(Replace(kExample, "[90, 10, 20, 80]", "[90, 10, 20]")),
            "bad.json: problem.edges.costs[2]: has 3 entries, expected 2 x 2 = 4");
  EXPECT_EQ(ErrorFor(Replace(kExample, "[15, 20, 15]", "[15, -20, 15]")),
            "bad.json: problem.nodes.usages[2][1]: must be >= 0 (got -20)");
  EXPECT_EQ(ErrorFor(Replace(kExample, "[55, 65]", "[55, 6.5]")),
            "bad.json: problem.nodes.costs[1][1]: must be an integer (got 6.5)");
  EXPECT_EQ(ErrorFor(Replace(kExample, "[55, 65]", "[55, \"x\"]")),
            "bad.json: problem.nodes.costs[1][1]: must be an integer, not a string");
  EXPECT_EQ(ErrorFor(Replace(kExample, "[[30, 70],", "[[30, 70, 80],")),
            "bad.json: problem.nodes.intervals[0]: must be [start, end]");
  EXPECT_EQ(ErrorFor(Replace(kExample, "[[30, 70],", "[[70, 30],")),  // reversed; [30, 30] would be empty
            "bad.json: problem.nodes.intervals[0]: end 30 is before start 70");
  EXPECT_EQ(ErrorFor(Replace(kExample, "[[15],", "[15,")),
            "bad.json: problem.nodes.costs[0]: must be an array, not a number");
  EXPECT_EQ(ErrorFor(Replace(kExample, "\"usage_limit\": 50", "\"usage_limit\": \"50\"")),
            "bad.json: problem.usage_limit: must be an integer, not a string");
  EXPECT_EQ(ErrorFor(Replace(kExample, "[[15], [55, 65],", "[[15],")),
            "bad.json: problem.nodes: intervals, costs and usages must have one entry per node (got 5, 4, 5)");
  EXPECT_EQ(ErrorFor(""), "bad.json: empty file");
  EXPECT_NE(ErrorFor(std::string(kExample).substr(0, 100)).find("bad.json: invalid JSON at byte"), std::string::npos);
  EXPECT_EQ(ErrorFor("[1, 2]"), "bad.json: the document must be a JSON object with a \"problem\" field");
}

TEST(IopddlJson, FormatsSolutionsAsTheContestDoes) {
  EXPECT_EQ(FormatIopddlSolution({0, 0, 2, 1, 0}), "[0, 0, 2, 1, 0]");
  EXPECT_EQ(FormatIopddlSolution({}), "[]");
}

}  // namespace
}  // namespace kiwi::io
