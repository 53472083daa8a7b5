#include "kiwi/ir/verify.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ir_test_util.h"

namespace kiwi::ir {
namespace {

using testing::AddInput;
using testing::AddOp;
using testing::AddParam;
using testing::ExpectBadInput;

// x[8,16] -> matmul W[16,4] + b[4] -> relu -> cross_entropy with labels[8].
Graph TinyMlp() {
  Graph g("tiny");
  const NodeId x = AddInput(g, "x", {8, 16});
  const NodeId w = AddParam(g, "w", {16, 4});
  const NodeId b = AddParam(g, "b", {4});
  const NodeId y = AddOp(g, "y", OpKind::kMatmul, "matmul", {8, 4}, {x, w, b});
  const NodeId r = AddOp(g, "r", OpKind::kElementwise, "relu", {8, 4}, {y});
  const NodeId labels = AddInput(g, "labels", {8}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {r, labels});
  return g;
}

TEST(VerifyGraph, AcceptsAWellFormedGraph) {
  const Graph g = TinyMlp();
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
  EXPECT_TRUE(VerifyGraph(Graph("empty")).ok());
}

TEST(VerifyGraph, ErrorNamesSourceNodeAndField) {
  Graph g = TinyMlp();
  g.mutable_node(3).inputs[1] = 99;
  const Status s = VerifyGraph(g, "model.json");
  ExpectBadInput(s, {});
  EXPECT_EQ(s.error().message, "model.json: node 3 'y': inputs[1]: node 99 does not exist");
}

TEST(VerifyGraph, RejectsNegativeInputId) {
  Graph g = TinyMlp();
  g.mutable_node(4).inputs[0] = -1;
  ExpectBadInput(VerifyGraph(g), {"node 4 'r'", "inputs[0]", "-1"});
}

TEST(VerifyGraph, RejectsTensorsTooLargeToCountWithoutOverflow) {
  Graph g("huge");
  AddInput(g, "x", {int64_t{1} << 30, int64_t{1} << 30, int64_t{1} << 30});  // 2^90 elements
  ExpectBadInput(VerifyGraph(g), {"node 0 'x'", "output.shape", "larger than"});
}

TEST(VerifyGraph, RejectsIdsOutOfExecutionOrderWithoutAnExplicitOrder) {
  Graph g("late_input");
  const NodeId r = AddOp(g, "r", OpKind::kElementwise, "relu", {4}, {1});  // reads x, added next
  AddInput(g, "x", {4});
  ExpectBadInput(VerifyGraph(g), {"node 0 'r'", "order", "before its input 1 'x'"});
  g.set_order({1, r});  // the same graph with an explicit order is fine
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
}

TEST(VerifyGraph, RejectsCycleNamingANodeOnIt) {
  Graph g("cyc");
  const NodeId x = AddInput(g, "x", {4});
  const NodeId a = AddOp(g, "a", OpKind::kElementwise, "add", {4}, {x, 2});  // reads b, added next
  const NodeId b = AddOp(g, "b", OpKind::kElementwise, "relu", {4}, {a});
  const NodeId c = AddOp(g, "c", OpKind::kElementwise, "relu", {4}, {b});  // downstream of the cycle
  AddOp(g, "tail", OpKind::kElementwise, "relu", {4}, {c});
  const Status s = VerifyGraph(g);
  ExpectBadInput(s, {"inputs", "cycle"});
  // The node named is on the cycle {a, b}, never x, c or tail.
  const std::string& m = s.error().message;
  EXPECT_TRUE(m.rfind("graph: node 1 'a'", 0) == 0 || m.rfind("graph: node 2 'b'", 0) == 0) << m;
  EXPECT_EQ(m.find("'c'"), std::string::npos) << m;
  EXPECT_EQ(m.find("'tail'"), std::string::npos) << m;
}

TEST(VerifyGraph, RejectsSelfLoop) {
  Graph g;
  AddOp(g, "x", OpKind::kInput, "input", {4});
  AddOp(g, "self", OpKind::kElementwise, "relu", {4}, {1});
  ExpectBadInput(VerifyGraph(g), {"node 1 'self'", "inputs", "cycle"});
}

TEST(VerifyGraph, RejectsOrderMissingANode) {
  Graph g = TinyMlp();
  g.set_order({0, 1, 2, 3, 4, 6});
  ExpectBadInput(VerifyGraph(g), {"node 5 'labels'", "order", "missing"});
}

TEST(VerifyGraph, RejectsOrderWithDuplicate) {
  Graph g = TinyMlp();
  g.set_order({0, 1, 2, 3, 3, 4, 5, 6});
  ExpectBadInput(VerifyGraph(g), {"node 3 'y'", "order", "twice"});
}

TEST(VerifyGraph, RejectsOrderWithUnknownId) {
  Graph g = TinyMlp();
  g.set_order({0, 1, 2, 3, 4, 5, 6, 7});
  ExpectBadInput(VerifyGraph(g), {"order[7]", "node 7 does not exist"});
}

TEST(VerifyGraph, RejectsOrderRunningANodeBeforeItsInput) {
  Graph g = TinyMlp();
  g.set_order({0, 1, 2, 4, 3, 5, 6});
  ExpectBadInput(VerifyGraph(g), {"node 4 'r'", "order", "before its input 3 'y'"});
}

TEST(VerifyGraph, AcceptsAnotherTopologicalOrder) {
  Graph g = TinyMlp();
  g.set_order({5, 2, 1, 0, 3, 4, 6});
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
}

TEST(VerifyGraph, RejectsNonPositiveDim) {
  Graph g = TinyMlp();
  g.mutable_node(1).output.shape = {16, 0};
  ExpectBadInput(VerifyGraph(g), {"node 1 'w'", "output.shape[1]", "positive"});
  g.mutable_node(1).output.shape = {-3, 4};
  ExpectBadInput(VerifyGraph(g), {"node 1 'w'", "output.shape[0]"});
}

TEST(VerifyGraph, RejectsEmptyName) {
  Graph g = TinyMlp();
  g.mutable_node(2).name = "";
  ExpectBadInput(VerifyGraph(g), {"node 2 ''", "name"});
}

TEST(VerifyGraph, RejectsIdNotEqualToIndex) {
  Graph g = TinyMlp();
  g.mutable_node(2).id = 7;
  ExpectBadInput(VerifyGraph(g), {"'b'", "id", "index 2"});
}

TEST(VerifyGraph, RejectsNegativeOrNonFiniteCosts) {
  Graph g = TinyMlp();
  g.mutable_node(3).flops = -1.0;
  ExpectBadInput(VerifyGraph(g), {"node 3 'y'", "flops"});
  g.mutable_node(3).flops = std::numeric_limits<double>::quiet_NaN();
  ExpectBadInput(VerifyGraph(g), {"node 3 'y'", "flops"});
  g.mutable_node(3).flops = 1.0;
  g.mutable_node(4).bytes_accessed = -8;
  ExpectBadInput(VerifyGraph(g), {"node 4 'r'", "bytes_accessed"});
  g.mutable_node(4).bytes_accessed = 8;
  g.mutable_node(4).measured_cost = -0.5;
  ExpectBadInput(VerifyGraph(g), {"node 4 'r'", "measured_cost"});
  g.mutable_node(4).measured_cost = 0.5;
  EXPECT_TRUE(VerifyGraph(g).ok());
}

TEST(VerifyGraph, RejectsBadGradOf) {
  Graph g = TinyMlp();
  g.mutable_node(4).grad_of = 3;  // forward node with grad_of
  ExpectBadInput(VerifyGraph(g), {"node 4 'r'", "grad_of", "forward node"});
  g.mutable_node(4).grad_of = kNoNode;
  const NodeId d = AddOp(g, "r.grad", OpKind::kElementwise, "relu_grad", {8, 4}, {4, 4});
  g.mutable_node(d).pass = Pass::kBackward;
  g.mutable_node(d).grad_of = 42;
  ExpectBadInput(VerifyGraph(g), {"node 7 'r.grad'", "grad_of", "42"});
  const NodeId e = AddOp(g, "e", OpKind::kElementwise, "relu", {8, 4}, {d});
  g.mutable_node(e).pass = Pass::kBackward;
  g.mutable_node(d).grad_of = 4;
  g.mutable_node(e).grad_of = d;  // a backward node is not a forward node
  ExpectBadInput(VerifyGraph(g), {"node 8 'e'", "grad_of", "not a forward node"});
  g.mutable_node(e).grad_of = kNoNode;  // allowed (graph files without grad_of)
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
}

TEST(VerifyGraph, RejectsLayerBelowMinusOne) {
  Graph g = TinyMlp();
  g.mutable_node(3).layer = -2;
  ExpectBadInput(VerifyGraph(g), {"node 3 'y'", "layer"});
}

TEST(VerifyGraph, LeafKindsTakeNoInputs) {
  Graph g = TinyMlp();
  g.mutable_node(1).inputs = {0};
  ExpectBadInput(VerifyGraph(g), {"node 1 'w'", "inputs", "takes 0 inputs, got 1"});
}

TEST(VerifyTopologicalOrder, BreaksTiesBySmallestId) {
  Graph g;
  AddOp(g, "a", OpKind::kElementwise, "relu", {2}, {3});
  AddInput(g, "b", {2});
  AddOp(g, "c", OpKind::kElementwise, "add", {2}, {1, 0});
  AddInput(g, "d", {2});
  const auto order = TopologicalOrder(g);
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(*order, (std::vector<NodeId>{1, 3, 0, 2}));
}

TEST(VerifyTopologicalOrder, NulloptOnCycleOrDanglingInput) {
  Graph g;
  AddOp(g, "a", OpKind::kElementwise, "relu", {2}, {1});
  AddOp(g, "b", OpKind::kElementwise, "relu", {2}, {0});
  EXPECT_FALSE(TopologicalOrder(g).has_value());
  Graph h;
  AddOp(h, "a", OpKind::kElementwise, "relu", {2}, {5});
  EXPECT_FALSE(TopologicalOrder(h).has_value());
}

// ---- per-kind shape checks

TEST(VerifyMatmul, RejectsContractionMismatch) {
  Graph g = TinyMlp();
  g.mutable_node(1).output.shape = {15, 4};
  ExpectBadInput(VerifyGraph(g), {"node 3 'y'", "inputs[1]", "contraction dim 15", "16"});
}

TEST(VerifyMatmul, RejectsWrongOutputAndBias) {
  Graph g = TinyMlp();
  g.mutable_node(3).output.shape = {8, 5};
  g.mutable_node(4).output.shape = {8, 5};
  ExpectBadInput(VerifyGraph(g), {"node 3 'y'", "output.shape", "[8, 5]", "[8, 4]"});
  Graph h = TinyMlp();
  h.mutable_node(2).output.shape = {5};
  ExpectBadInput(VerifyGraph(h), {"node 3 'y'", "inputs[2]"});
}

TEST(VerifyMatmul, HonoursTransposeFlagsAndBatchDims) {
  Graph g;
  const NodeId a = AddInput(g, "a", {2, 3, 16, 8});  // A^T: [2, 3, 8, 16]
  const NodeId b = AddParam(g, "b", {4, 16});        // B^T: [16, 4]
  const NodeId y = AddOp(g, "y", OpKind::kMatmul, "matmul", {2, 3, 8, 4}, {a, b});
  g.mutable_node(y).attrs.transpose_a = true;
  g.mutable_node(y).attrs.transpose_b = true;
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
  g.mutable_node(y).attrs.transpose_b = false;
  ExpectBadInput(VerifyGraph(g), {"node 2 'y'", "inputs[1]", "contraction"});
}

TEST(VerifyMatmul, RejectsDTypeMismatchAndBatchedWeight) {
  Graph g;
  const NodeId a = AddInput(g, "a", {8, 16}, DType::kBF16);
  const NodeId b = AddParam(g, "b", {16, 4});
  AddOp(g, "y", OpKind::kMatmul, "matmul", {8, 4}, {a, b});
  ExpectBadInput(VerifyGraph(g), {"node 2 'y'", "inputs[0]", "dtype bf16"});
  Graph h;
  const NodeId c = AddInput(h, "a", {2, 8, 16});
  const NodeId d = AddParam(h, "b", {2, 16, 4});
  AddOp(h, "y", OpKind::kMatmul, "matmul", {2, 8, 4}, {c, d});
  ExpectBadInput(VerifyGraph(h), {"node 2 'y'", "inputs[1]", "rank 2"});
}

TEST(VerifyBatchMatmul, RequiresEqualBatchDims) {
  Graph g;
  const NodeId q = AddInput(g, "q", {2, 4, 8, 16});
  const NodeId k = AddInput(g, "k", {2, 4, 16, 8});
  const NodeId s = AddOp(g, "s", OpKind::kBatchMatmul, "batch_matmul", {2, 4, 8, 8}, {q, k});
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
  g.mutable_node(k).output.shape = {2, 3, 16, 8};
  ExpectBadInput(VerifyGraph(g), {"node 2 's'", "inputs[1]", "batch dims"});
  g.mutable_node(k).output.shape = {4, 16, 8};
  ExpectBadInput(VerifyGraph(g), {"node 2 's'", "inputs[1]", "rank"});
  (void)s;
}

TEST(VerifyElementwise, BroadcastsByNumpyRules) {
  Graph g;
  const NodeId a = AddInput(g, "a", {4, 1});
  const NodeId b = AddInput(g, "b", {3});
  AddOp(g, "s", OpKind::kElementwise, "add", {4, 3}, {a, b});
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
}

TEST(VerifyElementwise, RejectsNonBroadcastableOperand) {
  Graph g;
  const NodeId a = AddInput(g, "a", {4, 3});
  const NodeId b = AddInput(g, "b", {4});
  AddOp(g, "s", OpKind::kElementwise, "mul", {4, 3}, {a, b});
  ExpectBadInput(VerifyGraph(g), {"node 2 's'", "inputs[1]", "[4]", "does not broadcast"});
}

TEST(VerifyElementwise, RejectsOutputLargerThanTheBroadcast) {
  Graph g;
  const NodeId a = AddInput(g, "a", {3});
  AddOp(g, "r", OpKind::kElementwise, "relu", {2, 3}, {a});
  ExpectBadInput(VerifyGraph(g), {"node 1 'r'", "output.shape", "broadcast"});
}

TEST(VerifyElementwise, ChecksArityAndFloatDTypes) {
  Graph g;
  const NodeId a = AddInput(g, "a", {3});
  const NodeId r = AddOp(g, "r", OpKind::kElementwise, "relu", {3}, {a, a});
  ExpectBadInput(VerifyGraph(g), {"node 1 'r'", "inputs", "'relu' takes 1 inputs, got 2"});
  g.mutable_node(r).inputs = {a};
  g.mutable_node(r).output.dtype = DType::kF16;
  ExpectBadInput(VerifyGraph(g), {"node 1 'r'", "inputs[0]", "dtype f32"});
  // A u8 dropout mask may multiply an f32 tensor.
  Graph h;
  const NodeId x = AddInput(h, "x", {3});
  const NodeId m = AddOp(h, "m", OpKind::kRandom, "dropout_mask", {3}, {}, DType::kU8);
  AddOp(h, "d", OpKind::kElementwise, "mul", {3}, {x, m});
  EXPECT_TRUE(VerifyGraph(h).ok()) << testing::ErrorOf(VerifyGraph(h));
}

TEST(VerifySoftmax, RequiresSameShape) {
  Graph g;
  const NodeId a = AddInput(g, "a", {2, 8, 8});
  AddOp(g, "p", OpKind::kSoftmax, "softmax", {2, 8, 4}, {a});
  ExpectBadInput(VerifyGraph(g), {"node 1 'p'", "inputs[0]", "[2, 8, 8]"});
}

TEST(VerifyLayerNorm, GammaAndBetaMatchLastDim) {
  Graph g;
  const NodeId x = AddInput(g, "x", {4, 16});
  const NodeId gamma = AddParam(g, "gamma", {16});
  const NodeId beta = AddParam(g, "beta", {8});
  AddOp(g, "ln", OpKind::kLayerNorm, "layernorm", {4, 16}, {x, gamma, beta});
  ExpectBadInput(VerifyGraph(g), {"node 3 'ln'", "inputs[2]", "[8]", "[16]"});
  g.mutable_node(beta).output.shape = {16};
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
  g.mutable_node(3).op = "rmsnorm";  // rmsnorm takes no beta
  ExpectBadInput(VerifyGraph(g), {"node 3 'ln'", "inputs", "'rmsnorm' takes 1 to 2 inputs"});
}

TEST(VerifyReshape, RequiresEqualElementCount) {
  Graph g;
  const NodeId a = AddInput(g, "a", {4, 6});
  const NodeId r = AddOp(g, "r", OpKind::kReshape, "reshape", {2, 12}, {a});
  EXPECT_TRUE(VerifyGraph(g).ok());
  g.mutable_node(r).output.shape = {5, 5};
  ExpectBadInput(VerifyGraph(g), {"node 1 'r'", "output.shape", "25 elements", "24"});
}

TEST(VerifyTranspose, RequiresAValidPermutation) {
  Graph g;
  const NodeId a = AddInput(g, "a", {2, 3, 4});
  const NodeId t = AddOp(g, "t", OpKind::kTranspose, "transpose", {4, 2, 3}, {a});
  g.mutable_node(t).attrs.axes = {2, 0, 1};
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
  g.mutable_node(t).attrs.axes = {2, 0, 0};
  ExpectBadInput(VerifyGraph(g), {"node 1 't'", "attrs.axes", "permutation"});
  g.mutable_node(t).attrs.axes = {2, 0};
  ExpectBadInput(VerifyGraph(g), {"node 1 't'", "attrs.axes"});
  g.mutable_node(t).attrs.axes = {0, 2, 1};
  ExpectBadInput(VerifyGraph(g), {"node 1 't'", "output.shape", "[2, 4, 3]"});
}

TEST(VerifyEmbedding, ChecksIdsAndOutput) {
  Graph g;
  const NodeId table = AddParam(g, "wte", {100, 8});
  const NodeId ids = AddInput(g, "ids", {2, 5}, DType::kI32);
  const NodeId e = AddOp(g, "emb", OpKind::kEmbedding, "embedding", {2, 5, 8}, {table, ids});
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
  g.mutable_node(e).output.shape = {2, 5, 9};
  ExpectBadInput(VerifyGraph(g), {"node 2 'emb'", "output.shape", "[2, 5, 8]"});
  g.mutable_node(e).output.shape = {2, 5, 8};
  g.mutable_node(ids).output.dtype = DType::kF32;
  ExpectBadInput(VerifyGraph(g), {"node 2 'emb'", "inputs[1]", "integer"});
}

TEST(VerifyConv, ChecksChannelsAndOutputSize) {
  Graph g;
  const NodeId x = AddInput(g, "x", {2, 3, 32, 32});
  const NodeId w = AddParam(g, "w", {16, 3, 5, 5});
  const NodeId b = AddParam(g, "b", {16});
  const NodeId c = AddOp(g, "conv", OpKind::kConv, "conv2d", {2, 16, 16, 16}, {x, w, b});
  g.mutable_node(c).attrs.stride = 2;
  g.mutable_node(c).attrs.padding = 2;  // (32 + 4 - 5) / 2 + 1 = 16
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
  g.mutable_node(c).attrs.padding = 0;  // (32 - 5) / 2 + 1 = 14
  ExpectBadInput(VerifyGraph(g), {"node 3 'conv'", "output.shape", "[2, 16, 14, 14]"});
  g.mutable_node(c).attrs.padding = 2;
  g.mutable_node(w).output.shape = {16, 4, 5, 5};
  ExpectBadInput(VerifyGraph(g), {"node 3 'conv'", "inputs[1]", "4 input channels", "3"});
  g.mutable_node(w).output.shape = {16, 3, 5, 5};
  g.mutable_node(c).attrs.stride = 0;
  ExpectBadInput(VerifyGraph(g), {"node 3 'conv'", "attrs.stride"});
}

TEST(VerifyPool, ChecksOutputSize) {
  Graph g;
  const NodeId x = AddInput(g, "x", {2, 8, 9, 9});
  const NodeId p = AddOp(g, "pool", OpKind::kPool, "max_pool", {2, 8, 4, 4}, {x});
  g.mutable_node(p).attrs.window = 3;
  g.mutable_node(p).attrs.stride = 2;  // (9 - 3) / 2 + 1 = 4
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
  g.mutable_node(p).attrs.window = 2;  // (9 - 2) / 2 + 1 = 4 as well; stride 1 gives 8
  g.mutable_node(p).attrs.stride = 1;
  ExpectBadInput(VerifyGraph(g), {"node 1 'pool'", "output.shape", "[2, 8, 8, 8]"});
}

TEST(VerifyReduce, AcceptsRemovedOrKeptAxes) {
  Graph g;
  const NodeId x = AddInput(g, "x", {4, 5, 6});
  const NodeId r = AddOp(g, "r", OpKind::kReduce, "sum", {5}, {x});
  g.mutable_node(r).attrs.axes = {0, 2};
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
  g.mutable_node(r).output.shape = {1, 5, 1};
  EXPECT_TRUE(VerifyGraph(g).ok());
  g.mutable_node(r).output.shape = {4, 5};
  ExpectBadInput(VerifyGraph(g), {"node 1 'r'", "output.shape", "[5]"});
  g.mutable_node(r).attrs.axes = {3};
  ExpectBadInput(VerifyGraph(g), {"node 1 'r'", "attrs.axes", "axis 3"});
}

TEST(VerifyLoss, MustBeScalarWithMatchingLabels) {
  Graph g = TinyMlp();
  g.mutable_node(6).output.shape = {8};
  ExpectBadInput(VerifyGraph(g), {"node 6 'loss'", "output.shape", "scalar"});
  Graph h = TinyMlp();
  h.mutable_node(5).output.shape = {4};
  ExpectBadInput(VerifyGraph(h), {"node 6 'loss'", "inputs[1]", "[8]"});
  Graph k = TinyMlp();
  k.mutable_node(5).output.dtype = DType::kF32;
  ExpectBadInput(VerifyGraph(k), {"node 6 'loss'", "inputs[1]", "integer"});
}

TEST(VerifyRandom, DropoutProbabilityInRange) {
  Graph g;
  const NodeId m = AddOp(g, "mask", OpKind::kRandom, "dropout_mask", {4}, {}, DType::kU8);
  g.mutable_node(m).attrs.dropout_p = 1.0;
  ExpectBadInput(VerifyGraph(g), {"node 0 'mask'", "attrs.dropout_p"});
  g.mutable_node(m).attrs.dropout_p = 0.1;
  EXPECT_TRUE(VerifyGraph(g).ok());
}

TEST(VerifyOpaque, AcceptsAnyShapes) {
  Graph g;
  const NodeId a = AddOp(g, "a", OpKind::kOpaque, "", {100}, {}, DType::kU8);
  AddOp(g, "b", OpKind::kOpaque, "", {7}, {a, a}, DType::kU8);
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
}

}  // namespace
}  // namespace kiwi::ir
