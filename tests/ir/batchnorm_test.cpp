// The "batchnorm" op (kLayerNorm kind): x [N, C, ...] normalised per channel with gamma/beta [C]; the
// PyTorch front end maps nn.BatchNorm2d onto it. Its gradients read what PyTorch's native_batch_norm
// saves: the x-gradient reads x and gamma, the gamma/beta gradients read x.
#include <gtest/gtest.h>

#include <algorithm>

#include "ir_test_util.h"
#include "kiwi/ir/annotate.h"
#include "kiwi/ir/backward.h"
#include "kiwi/ir/verify.h"

namespace kiwi::ir {
namespace {

using testing::AddInput;
using testing::AddOp;
using testing::AddParam;
using testing::ExpectBadInput;

NodeId Find(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes())
    if (n.name == name) return n.id;
  ADD_FAILURE() << "no node " << name;
  return kNoNode;
}

// x -> batchnorm -> relu -> mean over all dims -> ... a conv net's block with a scalar head.
Graph BnGraph(Shape gamma_shape = {4}) {
  Graph g("bn");
  const NodeId x = AddInput(g, "x", {2, 4, 3, 3});
  const NodeId w = AddParam(g, "w", {4, 4, 1, 1});
  const NodeId conv = AddOp(g, "conv", OpKind::kConv, "conv2d", {2, 4, 3, 3}, {x, w});
  const NodeId gamma = AddParam(g, "gamma", std::move(gamma_shape));
  const NodeId beta = AddParam(g, "beta", {4});
  const NodeId bn = AddOp(g, "bn", OpKind::kLayerNorm, "batchnorm", {2, 4, 3, 3}, {conv, gamma, beta});
  const NodeId relu = AddOp(g, "relu", OpKind::kElementwise, "relu", {2, 4, 3, 3}, {bn});
  const NodeId flat = AddOp(g, "flat", OpKind::kReshape, "reshape", {2, 36}, {relu});
  const NodeId labels = AddInput(g, "labels", {2}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {flat, labels});
  return g;
}

TEST(BatchNorm, VerifiesChannelParameters) {
  Graph good = BnGraph();
  EXPECT_TRUE(VerifyGraph(good).ok()) << testing::ErrorOf(VerifyGraph(good));
  // gamma must be [C] = [4] (dim 1), not the last dim [3].
  ExpectBadInput(VerifyGraph(BnGraph({3})), {"'bn'", "inputs[1]", "[3]", "[4]"});
}

TEST(BatchNorm, RejectsRankOneInput) {
  Graph g;
  const NodeId x = AddInput(g, "x", {8});
  AddOp(g, "bn", OpKind::kLayerNorm, "batchnorm", {8}, {x});
  ExpectBadInput(VerifyGraph(g), {"'bn'", "output.shape", "rank >= 2"});
}

TEST(BatchNorm, GradientsReadInputAndGamma) {
  Result<Graph> t = BuildTrainingGraph(BnGraph(), {.optimizer = Optimizer::kNone});
  ASSERT_TRUE(t.ok()) << testing::ErrorOf(t);
  const NodeId conv = Find(*t, "conv"), gamma = Find(*t, "gamma"), dbn = Find(*t, "bn.grad");
  const Node& dx = t->node(Find(*t, "conv.grad"));
  EXPECT_EQ(dx.op, "batchnorm_grad_x");
  EXPECT_EQ(dx.inputs, (std::vector<NodeId>{dbn, conv, gamma}));
  EXPECT_EQ(t->node(Find(*t, "gamma.grad")).op, "batchnorm_grad_gamma");
  EXPECT_EQ(t->node(Find(*t, "gamma.grad")).inputs, (std::vector<NodeId>{dbn, conv}));
  EXPECT_EQ(t->node(Find(*t, "beta.grad")).output.shape, (Shape{4}));
  // The batchnorm's output is read by no backward op (relu's gradient reads relu's output).
  const NodeId bn = Find(*t, "bn");
  EXPECT_TRUE(std::none_of(t->nodes().begin(), t->nodes().end(), [&](const Node& n) {
    return n.is_backward() && std::find(n.inputs.begin(), n.inputs.end(), bn) != n.inputs.end();
  }));
  EXPECT_TRUE(VerifyGraph(*t).ok()) << testing::ErrorOf(VerifyGraph(*t));
}

TEST(BatchNorm, FlopsPerElementAsLayerNorm) {
  Result<Graph> t = BuildTrainingGraph(BnGraph(), {.optimizer = Optimizer::kNone});
  ASSERT_TRUE(t.ok()) << testing::ErrorOf(t);
  AnnotateFlopsAndBytes(*t);
  const double elements = 2 * 4 * 3 * 3;
  EXPECT_DOUBLE_EQ(t->node(Find(*t, "bn")).flops, 7 * elements);
  EXPECT_DOUBLE_EQ(t->node(Find(*t, "conv.grad")).flops, 10 * elements);
  EXPECT_DOUBLE_EQ(t->node(Find(*t, "gamma.grad")).flops, 4 * elements);
  EXPECT_DOUBLE_EQ(t->node(Find(*t, "beta.grad")).flops, elements);
}

}  // namespace
}  // namespace kiwi::ir
