#include "kiwi/ir/graph.h"

#include <gtest/gtest.h>

#include "ir_test_util.h"
#include "kiwi/ir/tensor.h"

namespace kiwi::ir {
namespace {

using testing::AddInput;
using testing::AddOp;
using testing::AddParam;

TEST(Graph, AddAssignsIndicesAsIds) {
  Graph g("g");
  EXPECT_TRUE(g.empty());
  Node n;
  n.id = 42;  // overwritten
  n.name = "x";
  EXPECT_EQ(g.Add(n), 0);
  EXPECT_EQ(AddParam(g, "w", {2}), 1);
  EXPECT_EQ(g.size(), 2);
  EXPECT_EQ(g.node(0).id, 0);
  EXPECT_EQ(g.node(1).name, "w");
  EXPECT_EQ(g.name(), "g");
  g.set_name("h");
  EXPECT_EQ(g.name(), "h");
  EXPECT_THROW((void)g.node(2), std::out_of_range);
}

TEST(Graph, OrderIsIdsUnlessSet) {
  Graph g;
  AddInput(g, "a", {1});
  AddInput(g, "b", {1});
  AddInput(g, "c", {1});
  EXPECT_FALSE(g.has_explicit_order());
  EXPECT_EQ(g.order(), (std::vector<NodeId>{0, 1, 2}));
  g.set_order({2, 0, 1});
  EXPECT_TRUE(g.has_explicit_order());
  EXPECT_EQ(g.order(), (std::vector<NodeId>{2, 0, 1}));
}

TEST(Graph, EdgesConsumersAndPasses) {
  Graph g;
  const NodeId x = AddInput(g, "x", {4});
  const NodeId w = AddParam(g, "w", {4});
  const NodeId s = AddOp(g, "s", OpKind::kElementwise, "add", {4}, {x, x, w});
  const NodeId r = AddOp(g, "r", OpKind::kElementwise, "relu", {4}, {s, 99});  // dangling 99 ignored
  const NodeId d = AddOp(g, "d", OpKind::kElementwise, "relu_grad", {4}, {r, x});
  g.mutable_node(d).pass = Pass::kBackward;
  EXPECT_EQ(g.NumEdges(), 7);
  const auto consumers = g.Consumers();
  ASSERT_EQ(consumers.size(), 5u);
  EXPECT_EQ(consumers[static_cast<size_t>(x)], (std::vector<NodeId>{s, d}));  // unique, ascending
  EXPECT_EQ(consumers[static_cast<size_t>(w)], std::vector<NodeId>{s});
  EXPECT_EQ(consumers[static_cast<size_t>(r)], std::vector<NodeId>{d});
  EXPECT_TRUE(consumers[static_cast<size_t>(d)].empty());
  EXPECT_EQ(g.NumNodes(Pass::kForward), 4);
  EXPECT_EQ(g.NumNodes(Pass::kBackward), 1);
  EXPECT_TRUE(g.node(d).is_backward());
}

TEST(Node, PersistentKinds) {
  Node n;
  for (OpKind k : {OpKind::kParameter, OpKind::kOptimizerState}) {
    n.kind = k;
    EXPECT_TRUE(n.is_persistent());
  }
  for (OpKind k : {OpKind::kInput, OpKind::kMatmul, OpKind::kRandom, OpKind::kOpaque}) {
    n.kind = k;
    EXPECT_FALSE(n.is_persistent());
  }
}

TEST(Tensor, ElementsBytesAndShapeString) {
  const TensorType scalar{DType::kF32, {}};
  EXPECT_EQ(scalar.NumElements(), 1);
  EXPECT_EQ(scalar.Bytes(), 4);
  EXPECT_EQ(scalar.Rank(), 0);
  const TensorType t{DType::kBF16, {16, 1024, 5120}};
  EXPECT_EQ(t.NumElements(), int64_t{16} * 1024 * 5120);
  EXPECT_EQ(t.Bytes(), int64_t{2} * 16 * 1024 * 5120);
  EXPECT_EQ(ShapeString(t.shape), "[16, 1024, 5120]");
  EXPECT_EQ(ShapeString({}), "[]");
  EXPECT_NE(t, (TensorType{DType::kF16, {16, 1024, 5120}}));
}

}  // namespace
}  // namespace kiwi::ir
