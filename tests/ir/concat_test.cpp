// The concat op (kReshape "concat": inputs joined along the last dim, size-1 leading dims broadcast, as
// MLA's shared rotary key head beside every head's own key features): its shape checks, its gradient
// rule (each input's slice of dY, summed over the dims it was broadcast along). Its sharding
// description: tests/solve/concat_indexing_test.cpp.
#include <gtest/gtest.h>

#include "ir_test_util.h"
#include "kiwi/ir/backward.h"
#include "kiwi/ir/verify.h"

namespace kiwi::ir {
namespace {

using testing::AddInput;
using testing::AddOp;
using testing::AddParam;
using testing::ExpectBadInput;

constexpr int64_t kB = 2, kS = 8, kA = 4, kOwn = 6, kShared = 2;

// own = x * w [B, s, a, 6], shared = y * u [B, s, 1, 2] joined into [B, s, a, 8]; a loss over it.
Graph ConcatGraph(Shape shared_shape = {kB, kS, 1, kShared}, Shape out = {kB, kS, kA, kOwn + kShared}) {
  Graph g("concat");
  const NodeId x = AddInput(g, "x", {kB, kS, kA, kOwn});
  const NodeId y = AddInput(g, "y", shared_shape);
  const NodeId own = AddOp(g, "own", OpKind::kElementwise, "mul", {kB, kS, kA, kOwn}, {x, AddParam(g, "w", {kOwn})});
  const NodeId shared = AddOp(g, "shared", OpKind::kElementwise, "mul", shared_shape, {y, AddParam(g, "u", {shared_shape.back()})});
  const NodeId joined = AddOp(g, "joined", OpKind::kReshape, "concat", out, {own, shared});
  const int64_t rows = kB * kS * kA;
  const NodeId flat = AddOp(g, "flat", OpKind::kReshape, "reshape", {rows, out.back()}, {joined});
  const NodeId labels = AddInput(g, "labels", {rows}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {flat, labels});
  return g;
}

TEST(Concat, VerifiesAndRejectsShapesThatDoNotJoin) {
  const Graph g = ConcatGraph();
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
  ExpectBadInput(VerifyGraph(ConcatGraph({kB, kS, 3, kShared})), {"'joined'", "inputs[1]", "does not broadcast"});
  ExpectBadInput(VerifyGraph(ConcatGraph({kB, kS, 1, kShared}, {kB, kS, kA, kOwn + kShared + 1})),
                 {"'joined'", "output.shape", "last dim 9 is not the inputs' 8 together"});
}

TEST(Concat, EachInputsGradientIsItsSliceSummedOverItsBroadcastDims) {
  Result<Graph> t = BuildTrainingGraph(ConcatGraph(), {});
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_TRUE(VerifyGraph(*t).ok()) << testing::ErrorOf(VerifyGraph(*t));
  std::vector<Shape> slices;
  bool summed = false;
  for (const Node& n : t->nodes()) {
    if (n.op == "concat_grad") slices.push_back(n.output.shape);
    // The shared input's slice [B, s, a, 2] is reduced to its [B, s, 1, 2].
    if (n.is_backward() && n.kind == OpKind::kReduce && n.output.shape == Shape{kB, kS, 1, kShared}) summed = true;
  }
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0], (Shape{kB, kS, kA, kOwn}));
  EXPECT_EQ(slices[1], (Shape{kB, kS, kA, kShared}));
  EXPECT_TRUE(summed);
}

}  // namespace
}  // namespace kiwi::ir
