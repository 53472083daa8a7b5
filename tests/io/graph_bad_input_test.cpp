// Bad graph input never crashes: each case is a kBadInput error on one line naming the file and the
// field or the JSON parse position.
#include <gtest/gtest.h>

#include <random>

#include "io_test_util.h"
#include "kiwi/io/graph_json.h"

namespace kiwi::io {
namespace {

using testing::ExpectBadInput;
using testing::Gzip;
using testing::ScratchDir;

// A valid Checkmate graph 0 -> 1 -> 2 with `edit` applied to its text.
std::string Checkmate(const std::string& node1 = R"("id": 1, "name": "b", "cost_cpu": 2, "cost_ram": 16)",
                      const std::string& links = R"({"source": 0, "target": 1}, {"source": 1, "target": 2})") {
  return R"({"nodes": [{"id": 0, "name": "a", "cost_cpu": 1, "cost_ram": 8}, {)" + node1 +
         R"(}, {"id": 2, "name": "c", "cost_cpu": 3, "cost_ram": 24, "backward": true}], "links": [)" + links + "]}";
}

TEST(GraphBadInput, TheValidBaseGraphParses) {
  Result<ir::Graph> g = ParseGraphJson(Checkmate(), "g.json");
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->size(), 3);
}

TEST(GraphBadInput, TruncatedJson) {
  const std::string text = Checkmate();
  ExpectBadInput(ParseGraphJson(text.substr(0, 60), "g.json"), {"g.json: invalid JSON at byte 61", "line 1, column 61"});
}

TEST(GraphBadInput, Cycle) {
  const auto r = ParseGraphJson(Checkmate(R"("id": 1, "name": "b", "cost_cpu": 2, "cost_ram": 16)",
                                          R"({"source": 0, "target": 1}, {"source": 1, "target": 2},
                                             {"source": 2, "target": 1})"),
                                "g.json");
  ExpectBadInput(r, {"g.json: ", "cycle"});
}

TEST(GraphBadInput, SelfLoop) {
  ExpectBadInput(ParseGraphJson(Checkmate(R"("id": 1, "name": "b", "cost_cpu": 2, "cost_ram": 16)",
                                          R"({"source": 1, "target": 1})"),
                                "g.json"),
                 {"g.json: ", "cycle"});
}

TEST(GraphBadInput, MissingField) {
  ExpectBadInput(ParseGraphJson(Checkmate(R"("id": 1, "name": "b", "cost_cpu": 2)"), "g.json"),
                 {"g.json: nodes[1].cost_ram: missing"});
}

TEST(GraphBadInput, NegativeSize) {
  ExpectBadInput(ParseGraphJson(Checkmate(R"("id": 1, "name": "b", "cost_cpu": 2, "cost_ram": -16)"), "g.json"),
                 {"g.json: nodes[1].cost_ram: must be a positive integer (got -16)"});
}

TEST(GraphBadInput, ZeroSize) {
  ExpectBadInput(ParseGraphJson(Checkmate(R"("id": 1, "name": "b", "cost_cpu": 2, "cost_ram": 0)"), "g.json"),
                 {"g.json: nodes[1].cost_ram: must be a positive integer (got 0)"});
}

TEST(GraphBadInput, FractionalSize) {
  ExpectBadInput(ParseGraphJson(Checkmate(R"("id": 1, "name": "b", "cost_cpu": 2, "cost_ram": 16.5)"), "g.json"),
                 {"g.json: nodes[1].cost_ram: must be a positive integer (got 16.5)"});
}

TEST(GraphBadInput, SizeBeyondInt64) {
  ExpectBadInput(
      ParseGraphJson(Checkmate(R"("id": 1, "name": "b", "cost_cpu": 2, "cost_ram": 9223372036854775808)"), "g.json"),
      {"g.json: nodes[1].cost_ram: must be a positive integer (got 9223372036854775808)"});
}

TEST(GraphBadInput, NegativeCost) {
  ExpectBadInput(ParseGraphJson(Checkmate(R"("id": 1, "name": "b", "cost_cpu": -2, "cost_ram": 16)"), "g.json"),
                 {"g.json: nodes[1].cost_cpu: must be a non-negative finite number (got -2)"});
}

TEST(GraphBadInput, NanAndInfinityAreNotJson) {
  ExpectBadInput(ParseGraphJson(Checkmate(R"("id": 1, "name": "b", "cost_cpu": NaN, "cost_ram": 16)"), "g.json"),
                 {"g.json: invalid JSON at byte"});
  ExpectBadInput(ParseGraphJson(Checkmate(R"("id": 1, "name": "b", "cost_cpu": 1e999, "cost_ram": 16)"), "g.json"),
                 {"g.json: invalid JSON"});
}

TEST(GraphBadInput, UnknownOpKind) {
  const std::string text = R"({"kiwi_graph_version": 1, "nodes": [
      {"name": "a", "kind": "convolution", "dtype": "f32", "shape": [3]}]})";
  ExpectBadInput(ParseGraphJson(text, "g.json"),
                 {"g.json: nodes[0].kind: unknown op kind 'convolution' (expected one of input, parameter,", "opaque)"});
}

TEST(GraphBadInput, StringWhereANumberIsExpected) {
  ExpectBadInput(ParseGraphJson(Checkmate(R"("id": 1, "name": "b", "cost_cpu": "2", "cost_ram": 16)"), "g.json"),
                 {"g.json: nodes[1].cost_cpu: must be a non-negative finite number (got a string \"2\")"});
}

TEST(GraphBadInput, LinkToAMissingNode) {
  ExpectBadInput(ParseGraphJson(Checkmate(R"("id": 1, "name": "b", "cost_cpu": 2, "cost_ram": 16)",
                                          R"({"source": 0, "target": 1}, {"source": 1, "target": 99})"),
                                "g.json"),
                 {"g.json: links[1].target: node 99 does not exist"});
}

TEST(GraphBadInput, KiwiInputOutOfRange) {
  const std::string text = R"({"kiwi_graph_version": 1, "nodes": [
      {"name": "a", "kind": "opaque", "dtype": "u8", "shape": [3], "inputs": [-1]}]})";
  ExpectBadInput(ParseGraphJson(text, "g.json"), {"g.json: nodes[0].inputs[0]: node -1 does not exist"});
}

TEST(GraphBadInput, DuplicateNodeIds) {
  ExpectBadInput(ParseGraphJson(Checkmate(R"("id": 0, "name": "b", "cost_cpu": 2, "cost_ram": 16)"), "g.json"),
                 {"g.json: nodes[1].id: duplicate node id 0 (also nodes[0])"});
}

TEST(GraphBadInput, NodeIsNotAnObject) {
  ExpectBadInput(ParseGraphJson(R"({"nodes": [{"id": 0, "cost_cpu": 1, "cost_ram": 8}, 7], "links": []})", "g.json"),
                 {"g.json: nodes[1]: must be a JSON object (got 7)"});
}

TEST(GraphBadInput, EmptyFile) {
  ScratchDir dir;
  const std::string path = dir.Write("empty.json", "");
  ExpectBadInput(ReadGraphFile(path), {path + ": empty file"});
}

TEST(GraphBadInput, OneMegabyteOfRandomBytes) {
  ScratchDir dir;
  std::mt19937 rng(12345);
  std::string bytes(size_t{1} << 20, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
  const std::string path = dir.Write("random.json", bytes);
  ExpectBadInput(ReadGraphFile(path), {path + ": invalid JSON at byte "});
}

TEST(GraphBadInput, DeeplyNestedJson) {
  const std::string text = std::string(200000, '[') + std::string(200000, ']');
  ExpectBadInput(ParseGraphJson(text, "g.json"), {"g.json: JSON nested deeper than 512 levels"});
}

TEST(GraphBadInput, NonexistentFile) {
  ScratchDir dir;
  ExpectBadInput(ReadGraphFile(dir.File("missing.json")), {dir.File("missing.json") + ": no such file"});
}

TEST(GraphBadInput, TruncatedGzip) {
  ScratchDir dir;
  const std::string gz = Gzip(Checkmate());
  const std::string path = dir.Write("g.json.gz", gz.substr(0, gz.size() / 2));
  ExpectBadInput(ReadGraphFile(path), {path + ": truncated gzip data"});
}

TEST(GraphBadInput, UnrecognisedFormat) {
  ExpectBadInput(ParseGraphJson(R"({"nodes": [{"id": 0, "size": 8}], "links": []})", "g.json"),
                 {"g.json: not a recognised graph: expected kiwi graph JSON"});
}

}  // namespace
}  // namespace kiwi::io
