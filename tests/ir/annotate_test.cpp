#include "kiwi/ir/annotate.h"

#include <gtest/gtest.h>

#include "ir_test_util.h"

namespace kiwi::ir {
namespace {

using testing::AddInput;
using testing::AddOp;
using testing::AddParam;

TEST(Annotate, MatmulIsTwoMnkPerBatchElementAndBytesAreInPlusOut) {
  Graph g;
  const NodeId a = AddInput(g, "a", {3, 8, 16});
  const NodeId w = AddParam(g, "w", {16, 4});
  const NodeId b = AddParam(g, "b", {4});
  const NodeId y = AddOp(g, "y", OpKind::kMatmul, "matmul", {3, 8, 4}, {a, w, b});
  AnnotateFlopsAndBytes(g);
  EXPECT_DOUBLE_EQ(g.node(y).flops, 2.0 * 3 * 8 * 4 * 16);
  EXPECT_EQ(g.node(y).bytes_accessed, (3 * 8 * 16 + 16 * 4 + 4 + 3 * 8 * 4) * 4);
  // Inputs and parameters are not computed.
  EXPECT_EQ(g.node(a).flops, 0.0);
  EXPECT_EQ(g.node(a).bytes_accessed, 0);
  EXPECT_EQ(g.node(w).bytes_accessed, 0);
}

TEST(Annotate, TransposedAndBatchedMatmul) {
  Graph g;
  const NodeId a = AddInput(g, "a", {2, 5, 16, 8}, DType::kBF16);  // A^T
  const NodeId b = AddInput(g, "b", {2, 5, 16, 4}, DType::kBF16);
  const NodeId y = AddOp(g, "y", OpKind::kBatchMatmul, "batch_matmul", {2, 5, 8, 4}, {a, b}, DType::kBF16);
  g.mutable_node(y).attrs.transpose_a = true;
  EXPECT_DOUBLE_EQ(OpFlops(g, g.node(y)), 2.0 * 10 * 8 * 4 * 16);
  AnnotateFlopsAndBytes(g);
  EXPECT_EQ(g.node(y).bytes_accessed, (2 * 5 * 16 * 8 + 2 * 5 * 16 * 4 + 2 * 5 * 8 * 4) * 2);
}

TEST(Annotate, ConvIsTwoNOHWCkk) {
  Graph g;
  const NodeId x = AddInput(g, "x", {2, 3, 32, 32});
  const NodeId w = AddParam(g, "w", {16, 3, 5, 5});
  const NodeId c = AddOp(g, "c", OpKind::kConv, "conv2d", {2, 16, 16, 16}, {x, w});
  g.mutable_node(c).attrs.stride = 2;
  g.mutable_node(c).attrs.padding = 2;
  EXPECT_DOUBLE_EQ(OpFlops(g, g.node(c)), 2.0 * 2 * 16 * 16 * 16 * 3 * 5 * 5);
}

TEST(Annotate, ElementwiseConstantsPerElement) {
  Graph g;
  const NodeId a = AddInput(g, "a", {4, 10});
  const NodeId b = AddInput(g, "b", {10});
  const NodeId relu = AddOp(g, "relu", OpKind::kElementwise, "relu", {4, 10}, {a});
  const NodeId gelu = AddOp(g, "gelu", OpKind::kElementwise, "gelu", {4, 10}, {a});
  const NodeId add3 = AddOp(g, "add3", OpKind::kElementwise, "add", {4, 10}, {a, a, b});
  const NodeId sm = AddOp(g, "sm", OpKind::kSoftmax, "softmax", {4, 10}, {a});
  const NodeId ln = AddOp(g, "ln", OpKind::kLayerNorm, "layernorm", {4, 10}, {a, b, b});
  const NodeId rms = AddOp(g, "rms", OpKind::kLayerNorm, "rmsnorm", {4, 10}, {a, b});
  AnnotateFlopsAndBytes(g);
  EXPECT_DOUBLE_EQ(g.node(relu).flops, 40.0);
  EXPECT_DOUBLE_EQ(g.node(gelu).flops, 9 * 40.0);
  EXPECT_DOUBLE_EQ(g.node(add3).flops, 2 * 40.0);  // two adds per element for three operands
  EXPECT_EQ(g.node(add3).bytes_accessed, (40 + 40 + 10 + 40) * 4);
  EXPECT_DOUBLE_EQ(g.node(sm).flops, 7 * 40.0);
  EXPECT_DOUBLE_EQ(g.node(ln).flops, 7 * 40.0);
  EXPECT_DOUBLE_EQ(g.node(rms).flops, 4 * 40.0);
}

TEST(Annotate, LayoutOpsAreFreeButMoveBytes) {
  Graph g;
  const NodeId a = AddInput(g, "a", {4, 6});
  const NodeId r = AddOp(g, "r", OpKind::kReshape, "reshape", {24}, {a});
  const NodeId t = AddOp(g, "t", OpKind::kTranspose, "transpose", {6, 4}, {a});
  g.mutable_node(t).attrs.axes = {1, 0};
  AnnotateFlopsAndBytes(g);
  EXPECT_EQ(g.node(r).flops, 0.0);
  EXPECT_EQ(g.node(t).flops, 0.0);
  EXPECT_EQ(g.node(r).bytes_accessed, 2 * 24 * 4);
}

TEST(Annotate, LossAndReduce) {
  Graph g;
  const NodeId logits = AddInput(g, "logits", {8, 100});
  const NodeId labels = AddInput(g, "labels", {8}, DType::kI64);
  const NodeId loss = AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {logits, labels});
  const NodeId sum = AddOp(g, "sum", OpKind::kReduce, "sum", {100}, {logits});
  g.mutable_node(sum).attrs.axes = {0};
  AnnotateFlopsAndBytes(g);
  EXPECT_DOUBLE_EQ(g.node(loss).flops, 5.0 * 800);
  EXPECT_EQ(g.node(loss).bytes_accessed, 800 * 4 + 8 * 8 + 4);
  EXPECT_DOUBLE_EQ(g.node(sum).flops, 800.0);
}

TEST(Annotate, OpaqueNodesAreLeftAlone) {
  Graph g;
  const NodeId a = AddOp(g, "a", OpKind::kOpaque, "", {100}, {}, DType::kU8);
  g.mutable_node(a).flops = 123.0;
  g.mutable_node(a).bytes_accessed = 77;
  AnnotateFlopsAndBytes(g);
  EXPECT_EQ(g.node(a).flops, 123.0);
  EXPECT_EQ(g.node(a).bytes_accessed, 77);
}

TEST(Annotate, SafeOnMalformedNodes) {
  Graph g;
  const NodeId y = AddOp(g, "y", OpKind::kMatmul, "matmul", {8, 4}, {5});  // dangling, one input
  const NodeId c = AddOp(g, "c", OpKind::kConv, "conv2d", {1, 2, 3, 3}, {});
  AnnotateFlopsAndBytes(g);
  EXPECT_EQ(g.node(y).flops, 0.0);
  EXPECT_EQ(g.node(y).bytes_accessed, 8 * 4 * 4);
  EXPECT_EQ(g.node(c).flops, 0.0);
}

}  // namespace
}  // namespace kiwi::ir
