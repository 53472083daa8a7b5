// kiwi graph JSON: reading, defaults, exact round trips and format detection.
#include "kiwi/io/graph_json.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "io_test_util.h"
#include "kiwi/ir/backward.h"
#include "kiwi/models/transformer.h"

namespace kiwi::io {
namespace {

using testing::ErrorOf;
using testing::ExpectBadInput;
using testing::FixturePath;

ir::NodeId Add(ir::Graph& g, const std::string& name, ir::OpKind kind, const std::string& op, ir::TensorType out,
               std::vector<ir::NodeId> inputs = {}) {
  ir::Node n;
  n.name = name;
  n.kind = kind;
  n.op = op;
  n.output = std::move(out);
  n.inputs = std::move(inputs);
  return g.Add(std::move(n));
}

// A verified graph in which every Node field and every attribute differs from its default somewhere.
ir::Graph EveryFieldGraph() {
  using ir::DType;
  using ir::OpKind;
  ir::Graph g("every-field");
  const auto x = Add(g, "x", OpKind::kInput, "input", {DType::kF32, {4, 6}});
  const auto w = Add(g, "w", OpKind::kParameter, "parameter", {DType::kF32, {8, 6}});
  const auto y = Add(g, "layer0.fc", OpKind::kMatmul, "matmul", {DType::kF32, {4, 8}}, {x, w});
  ir::Node& fc = g.mutable_node(y);
  fc.attrs.transpose_b = true;
  fc.flops = 384;
  fc.bytes_accessed = 416;
  fc.measured_cost = 0.1;  // not exactly representable: the writer must keep every digit
  fc.layer = 0;
  fc.scope = "layer0.mlp";
  const auto mask = Add(g, "mask", OpKind::kRandom, "dropout_mask", {DType::kU8, {4, 8}});
  g.mutable_node(mask).attrs.dropout_p = 0.1;
  const auto d = Add(g, "drop", OpKind::kElementwise, "mul", {DType::kF32, {4, 8}}, {y, mask});
  const auto t = Add(g, "t", OpKind::kTranspose, "transpose", {DType::kF32, {8, 4}}, {d});
  g.mutable_node(t).attrs.axes = {1, 0};
  const auto s = Add(g, "sum", OpKind::kReduce, "sum", {DType::kF32, {8}}, {t});
  g.mutable_node(s).attrs.axes = {1};
  const auto img = Add(g, "img", OpKind::kInput, "input", {DType::kBF16, {2, 3, 9, 9}});
  const auto pool = Add(g, "pool", OpKind::kPool, "max_pool", {DType::kBF16, {2, 3, 5, 5}}, {img});
  g.mutable_node(pool).attrs.window = 3;
  g.mutable_node(pool).attrs.stride = 2;
  g.mutable_node(pool).attrs.padding = 1;
  g.mutable_node(pool).attrs.transpose_a = true;  // meaningless for a pool, but must survive the round trip
  const auto grad = Add(g, "fc.grad \"q\" \u00e9", OpKind::kOpaque, "", {DType::kF64, {}}, {s, pool, s});
  g.mutable_node(grad).pass = ir::Pass::kBackward;
  g.mutable_node(grad).grad_of = y;
  g.mutable_node(grad).layer = 7;
  g.mutable_node(grad).measured_cost = 0.0;
  g.set_order({img, pool, x, w, y, mask, d, t, s, grad});
  return g;
}

void ExpectSameGraph(const ir::Graph& a, const ir::Graph& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a.name(), b.name());
  EXPECT_EQ(a.has_explicit_order(), b.has_explicit_order());
  EXPECT_EQ(a.order(), b.order());
  for (ir::NodeId i = 0; i < a.size(); ++i) {
    const ir::Node& x = a.node(i);
    const ir::Node& y = b.node(i);
    SCOPED_TRACE("node " + std::to_string(i) + " " + x.name);
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.op, y.op);
    EXPECT_EQ(x.pass, y.pass);
    EXPECT_EQ(x.output, y.output);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.flops, y.flops);  // exact, not approximate
    EXPECT_EQ(x.bytes_accessed, y.bytes_accessed);
    EXPECT_EQ(x.measured_cost, y.measured_cost);
    EXPECT_EQ(x.grad_of, y.grad_of);
    EXPECT_EQ(x.layer, y.layer);
    EXPECT_EQ(x.scope, y.scope);
    EXPECT_TRUE(x.attrs == y.attrs);
  }
}

TEST(KiwiGraphJson, ReadsTheFixture) {
  Result<ir::Graph> g = ReadGraphFile(FixturePath("tiny_graph.json"));
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->name(), "tiny-mlp");
  ASSERT_EQ(g->size(), 6);
  const ir::Node& fc = g->node(2);
  EXPECT_EQ(fc.name, "fc");
  EXPECT_EQ(fc.kind, ir::OpKind::kMatmul);
  EXPECT_EQ(fc.output, (ir::TensorType{ir::DType::kF32, {8, 4}}));
  EXPECT_EQ(fc.inputs, (std::vector<ir::NodeId>{0, 1}));
  EXPECT_EQ(fc.flops, 1024.0);
  EXPECT_EQ(fc.bytes_accessed, 896);
  EXPECT_FALSE(fc.measured_cost.has_value());
  EXPECT_EQ(fc.layer, 0);
  EXPECT_EQ(fc.scope, "layer0.mlp");
  EXPECT_EQ(g->node(3).measured_cost, 0.5);
  EXPECT_EQ(g->node(4).output.dtype, ir::DType::kI64);
  EXPECT_TRUE(g->node(5).output.shape.empty());
  EXPECT_EQ(g->order(), (std::vector<ir::NodeId>{0, 4, 1, 2, 3, 5}));
}

TEST(KiwiGraphJson, OptionalFieldsTakeTheirDefaults) {
  const std::string text = R"({"kiwi_graph_version": 1, "nodes": [
      {"name": "a", "kind": "opaque", "dtype": "fp32", "shape": [3]}]})";
  Result<ir::Graph> g = ParseGraphJson(text, "min.json");
  ASSERT_TRUE(g.ok()) << g.error().message;
  const ir::Node& n = g->node(0);
  EXPECT_EQ(g->name(), "");
  EXPECT_EQ(n.id, 0);
  EXPECT_EQ(n.op, "");
  EXPECT_EQ(n.pass, ir::Pass::kForward);
  EXPECT_EQ(n.output.dtype, ir::DType::kF32);  // dtype aliases are accepted
  EXPECT_TRUE(n.inputs.empty());
  EXPECT_EQ(n.flops, 0.0);
  EXPECT_EQ(n.bytes_accessed, 0);
  EXPECT_FALSE(n.measured_cost.has_value());
  EXPECT_EQ(n.grad_of, ir::kNoNode);
  EXPECT_EQ(n.layer, -1);
  EXPECT_EQ(n.scope, "");
  EXPECT_TRUE(n.attrs == ir::OpAttrs{});
  EXPECT_FALSE(g->has_explicit_order());
}

TEST(KiwiGraphJson, RoundTripsEveryFieldExactly) {
  const ir::Graph g = EveryFieldGraph();
  const std::string text = WriteGraphJson(g);
  Result<ir::Graph> back = ParseGraphJson(text, "rt.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  ExpectSameGraph(g, *back);
  EXPECT_EQ(WriteGraphJson(*back), text);
}

TEST(KiwiGraphJson, OperandsStoragesRoundTripsAndOtherValuesAreRefused) {
  // A captured program: mm reads x [2, 8, 8] through a folded view, which kiwi's matmul rule refuses.
  const std::string text = R"({"kiwi_graph_version": 1, "name": "cap", "operands": "storages", "nodes": [
    {"id": 0, "name": "x", "kind": "input", "dtype": "f32", "shape": [2, 8, 8]},
    {"id": 1, "name": "w", "kind": "parameter", "dtype": "f32", "shape": [4, 8]},
    {"id": 2, "name": "mm", "kind": "matmul", "op": "aten.mm.default", "dtype": "f32", "shape": [16, 4],
     "inputs": [0, 1], "flops": 1024}]})";
  Result<ir::Graph> g = ParseGraphJson(text, "cap.json");
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->operands(), ir::Operands::kStorages);
  const std::string written = WriteGraphJson(*g);
  EXPECT_NE(written.find(R"("operands": "storages")"), std::string::npos) << written;
  Result<ir::Graph> back = ParseGraphJson(written, "rt.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->operands(), ir::Operands::kStorages);
  EXPECT_EQ(WriteGraphJson(*back), written);
  // Without the field the same nodes are kiwi's operators, and the matmul rule applies.
  const std::string field = R"("operands": "storages", )";
  std::string tensors = text;
  tensors.replace(tensors.find(field), field.size(), "");
  ExpectBadInput(ParseGraphJson(tensors, "cap.json"), {"cap.json", "mm"});
  std::string bad = text;
  bad.replace(bad.find("storages"), 8, "views");
  ExpectBadInput(ParseGraphJson(bad, "cap.json"), {"cap.json", "operands", "views"});
  // A kiwi graph does not write the field at all: files written before it stay byte-identical.
  EXPECT_EQ(WriteGraphJson(EveryFieldGraph()).find("operands"), std::string::npos);
}

TEST(KiwiGraphJson, RoundTripsAModelZooTrainingGraph) {
  models::TransformerConfig config;
  config.layers = 2;
  config.hidden = 64;
  config.heads = 4;
  config.seq = 16;
  config.batch = 2;
  config.vocab = 100;
  Result<ir::Graph> forward = models::BuildTransformerForward(config);
  ASSERT_TRUE(forward.ok()) << forward.error().message;
  Result<ir::Graph> training = ir::BuildTrainingGraph(*forward, {});
  ASSERT_TRUE(training.ok()) << training.error().message;
  Result<ir::Graph> back = ParseGraphJson(WriteGraphJson(*training), "gpt.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  ExpectSameGraph(*training, *back);
}

TEST(KiwiGraphJson, WriterPutsOneNodePerLine) {
  const ir::Graph g = EveryFieldGraph();
  const std::string text = WriteGraphJson(g);
  EXPECT_EQ(text.rfind("{\n  \"kiwi_graph_version\": 1,\n  \"name\": \"every-field\",\n  \"nodes\": [\n", 0), 0u)
      << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4 + g.size() + 3);  // header, nodes, "]," order "}"
  EXPECT_NE(text.find("{\"id\":0,\"name\":\"x\",\"kind\":\"input\",\"op\":\"input\",\"pass\":\"forward\",\"dtype\":\"f32\","
                      "\"shape\":[4,6],\"inputs\":[],\"flops\":0.0,\"bytes_accessed\":0}"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\"attrs\":{\"transpose_a\":true,\"stride\":2,\"padding\":1,\"window\":3}"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  \"order\": [7,8,0,1,2,3,4,5,6,9]\n}\n"), std::string::npos) << text;
}

TEST(KiwiGraphJson, NodeIdsMustBeDense) {
  const std::string text = R"({"kiwi_graph_version": 1, "nodes": [
      {"id": 0, "name": "a", "kind": "opaque", "dtype": "u8", "shape": [3]},
      {"id": 5, "name": "b", "kind": "opaque", "dtype": "u8", "shape": [3]}]})";
  ExpectBadInput(ParseGraphJson(text, "g.json"), {"g.json: nodes[1].id: is 5, must equal the node's position 1"});
}

TEST(KiwiGraphJson, UnknownFieldsAreRejected) {
  const std::string text = R"({"kiwi_graph_version": 1, "nodes": [
      {"name": "a", "kind": "opaque", "dtype": "u8", "shape": [3], "layre": 2}]})";
  ExpectBadInput(ParseGraphJson(text, "g.json"), {"g.json: nodes[0].layre: unknown field"});
}

TEST(KiwiGraphJson, UnsupportedVersion) {
  ExpectBadInput(ParseGraphJson(R"({"kiwi_graph_version": 2, "nodes": []})", "g.json"),
                 {"g.json: kiwi_graph_version: unsupported version 2"});
}

TEST(KiwiGraphJson, BadPassDtypeAndGradOf) {
  const auto node = [](const std::string& extra) {
    return R"({"kiwi_graph_version": 1, "nodes": [{"name": "a", "kind": "opaque", "shape": [3], )" + extra + "}]}";
  };
  ExpectBadInput(ParseGraphJson(node(R"("dtype": "u8", "pass": "sideways")"), "g.json"),
                 {"g.json: nodes[0].pass: must be \"forward\" or \"backward\""});
  ExpectBadInput(ParseGraphJson(node(R"("dtype": "f33")"), "g.json"), {"g.json: nodes[0].dtype: unknown dtype 'f33'"});
  ExpectBadInput(ParseGraphJson(node(R"("dtype": "u8", "pass": "backward", "grad_of": 4)"), "g.json"),
                 {"g.json: nodes[0].grad_of: node 4 does not exist"});
  ExpectBadInput(ParseGraphJson(node(R"("dtype": "u8", "attrs": {"dropout_p": 1.0})"), "g.json"),
                 {"g.json: nodes[0].attrs.dropout_p: must be in [0, 1)"});
}

TEST(KiwiGraphJson, TensorSizeBeyondInt64) {
  const std::string text = R"({"kiwi_graph_version": 1, "nodes": [
      {"name": "a", "kind": "opaque", "dtype": "f32", "shape": [4294967296, 4294967296]}]})";
  ExpectBadInput(ParseGraphJson(text, "g.json"), {"g.json: nodes[0].shape: the tensor's size in bytes"});
}

TEST(KiwiGraphJson, IdsMustBeTopologicalWithoutAnOrder) {
  const std::string nodes = R"("nodes": [
      {"name": "a", "kind": "opaque", "dtype": "u8", "shape": [3], "inputs": [1]},
      {"name": "b", "kind": "opaque", "dtype": "u8", "shape": [3]}])";
  ExpectBadInput(ParseGraphJson("{\"kiwi_graph_version\": 1, " + nodes + "}", "g.json"),
                 {"g.json: nodes[0].inputs[0]: node 1 does not come before node 0"});
  Result<ir::Graph> ok = ParseGraphJson("{\"kiwi_graph_version\": 1, \"order\": [1, 0], " + nodes + "}", "g.json");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->order(), (std::vector<ir::NodeId>{1, 0}));
}

TEST(DetectGraphFormat, RecognisesTheThreeFormats) {
  EXPECT_EQ(*DetectGraphFormat(testing::ReadAll(FixturePath("tiny_graph.json")), "a"), GraphFormat::kKiwi);
  EXPECT_EQ(*DetectGraphFormat(testing::ReadAll(FixturePath("checkmate_sparse_ids.json")), "b"),
            GraphFormat::kCheckmateNodeLink);
  EXPECT_EQ(*DetectGraphFormat(testing::ReadAll(FixturePath("random_layered_string_order.json")), "c"),
            GraphFormat::kRandomLayeredNodeLink);
  EXPECT_EQ(*DetectGraphFormat(R"({"nodes": [{"id": 0}], "links": [{"0": 0, "1": 0}]})", "d"),
            GraphFormat::kRandomLayeredNodeLink);
}

TEST(DetectGraphFormat, OtherDocumentsListTheAcceptedFormats) {
  ExpectBadInput(DetectGraphFormat(R"({"nodes": [{"id": 0}], "links": []})", "x.json"),
                 {"x.json: not a recognised graph", "kiwi graph JSON", "Checkmate node-link", "random-layered"});
  ExpectBadInput(DetectGraphFormat("[1, 2]", "x.json"), {"x.json: the top level must be a JSON object"});
  ExpectBadInput(ParseGraphJson("{}", "x.json"), {"x.json: not a recognised graph"});
}

}  // namespace
}  // namespace kiwi::io
