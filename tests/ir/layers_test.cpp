#include "kiwi/ir/layers.h"

#include <gtest/gtest.h>

#include "ir_test_util.h"
#include "kiwi/ir/backward.h"

namespace kiwi::ir {
namespace {

using testing::AddInput;
using testing::AddOp;
using testing::AddParam;
using testing::ExpectBadInput;

void SetLayer(Graph& g, NodeId id, int32_t layer, const std::string& scope) {
  g.mutable_node(id).layer = layer;
  g.mutable_node(id).scope = scope;
}

// x -> [layer0: matmul W0, relu] -> [layer1: matmul W1, relu] -> head matmul W2 -> loss.
// Ids: x 0, W0 1, h0 2, a0 3, W1 4, h1 5, a1 6, W2 7, logits 8, labels 9, loss 10.
Graph TwoLayers() {
  Graph g("two");
  const NodeId x = AddInput(g, "x", {4, 8});
  for (int l = 0; l < 2; ++l) {
    const NodeId in = l == 0 ? x : 3;
    const std::string p = "layer" + std::to_string(l);
    const NodeId w = AddParam(g, "W" + std::to_string(l), {8, 8});
    const NodeId h = AddOp(g, "h" + std::to_string(l), OpKind::kMatmul, "matmul", {4, 8}, {in, w});
    const NodeId a = AddOp(g, "a" + std::to_string(l), OpKind::kElementwise, "relu", {4, 8}, {h});
    SetLayer(g, w, l, p + ".fc");
    SetLayer(g, h, l, p + ".fc");
    SetLayer(g, a, l, p + ".act");
  }
  const NodeId w2 = AddParam(g, "W2", {8, 5});
  const NodeId logits = AddOp(g, "logits", OpKind::kMatmul, "matmul", {4, 5}, {6, w2});
  const NodeId labels = AddInput(g, "labels", {4}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {logits, labels});
  return g;
}

TEST(BuildLayerView, TwoLayerGraph) {
  Result<Graph> t = BuildTrainingGraph(TwoLayers(), {.optimizer = Optimizer::kSgd});
  ASSERT_TRUE(t.ok()) << testing::ErrorOf(t);
  ASSERT_EQ(t->size(), 21);
  ASSERT_EQ(t->node(18).name, "h0.grad");  // layout assumed below (see backward_test.cpp)
  Result<LayerView> view = BuildLayerView(*t);
  ASSERT_TRUE(view.ok()) << testing::ErrorOf(view);
  ASSERT_EQ(view->layers.size(), 2u);
  const Layer& l0 = view->layers[0];
  const Layer& l1 = view->layers[1];
  EXPECT_EQ(l0.index, 0);
  EXPECT_EQ(l0.name, "layer0");
  EXPECT_EQ(l1.name, "layer1");
  EXPECT_EQ(l0.forward, (std::vector<NodeId>{1, 2, 3}));
  EXPECT_EQ(l1.forward, (std::vector<NodeId>{4, 5, 6}));
  EXPECT_EQ(l0.backward, (std::vector<NodeId>{18, 19}));      // h0.grad (relu), W0.grad
  EXPECT_EQ(l1.backward, (std::vector<NodeId>{15, 16, 17}));  // h1.grad, a0.grad, W1.grad
  // The head's backward: the loss's nll and logits gradients, a1's and W2's.
  EXPECT_EQ(view->other, (std::vector<NodeId>{0, 7, 8, 9, 10, 11, 12, 13, 14, 20}));
  EXPECT_EQ(l0.parameter_bytes, 8 * 8 * 4);
  EXPECT_EQ(l1.parameter_bytes, 8 * 8 * 4);
  // Saved: a0 (read by relu's gradient and dW1) but not h0; a1 likewise.
  EXPECT_EQ(l0.saved_activation_bytes, 4 * 8 * 4);
  EXPECT_EQ(l1.saved_activation_bytes, 4 * 8 * 4);
  // Boundary: a0 feeds layer 1, a1 feeds the head; h0/h1 stay inside their layer.
  EXPECT_EQ(l0.boundary_activation_bytes, 4 * 8 * 4);
  EXPECT_EQ(l1.boundary_activation_bytes, 4 * 8 * 4);
  const double matmul = 2.0 * 4 * 8 * 8, relu = 32.0;
  EXPECT_DOUBLE_EQ(l0.forward_flops, matmul + relu);
  EXPECT_DOUBLE_EQ(l0.backward_flops, relu + matmul);       // no input gradient for x
  EXPECT_DOUBLE_EQ(l1.backward_flops, relu + 2 * matmul);  // dA0 and dW1
}

TEST(BuildLayerView, BoundaryCountsEachTensorOnceAcrossReaders) {
  Graph g = TwoLayers();
  // a0 is also read by a head op: still counted once.
  const NodeId extra = AddOp(g, "extra", OpKind::kElementwise, "add", {4, 8}, {3, 6});
  Result<LayerView> view = BuildLayerView(g);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->layers[0].boundary_activation_bytes, 4 * 8 * 4);
  EXPECT_EQ(view->other.back(), extra);
}

TEST(BuildLayerView, NamesFallBackWithoutScopes) {
  Graph g;
  const NodeId x = AddInput(g, "x", {2});
  const NodeId a = AddOp(g, "a", OpKind::kElementwise, "relu", {2}, {x});
  const NodeId b = AddOp(g, "b", OpKind::kElementwise, "relu", {2}, {a});
  SetLayer(g, a, 0, "");
  SetLayer(g, b, 1, "enc.block1.attn");
  Result<LayerView> view = BuildLayerView(g);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->layers[0].name, "layer0");
  EXPECT_EQ(view->layers[1].name, "enc.block1.attn");
}

TEST(BuildLayerView, RejectsGapsAndBadIndices) {
  Graph g = TwoLayers();
  for (NodeId id : {4, 5, 6}) g.mutable_node(id).layer = 2;
  ExpectBadInput(BuildLayerView(g), {"two: layer 1", "gaps"});
  g.mutable_node(5).layer = -3;
  ExpectBadInput(BuildLayerView(g), {"node 5 'h1'", "layer"});
}

TEST(BuildLayerView, GraphWithoutLayers) {
  Graph g;
  AddInput(g, "x", {2});
  Result<LayerView> view = BuildLayerView(g);
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE(view->layers.empty());
  EXPECT_EQ(view->other, std::vector<NodeId>{0});
}

}  // namespace
}  // namespace kiwi::ir
