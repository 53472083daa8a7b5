// How the operator-level planners may shard a concat (MLA's keys: every head's own features joined with
// one rotary head all heads share) and its gradient: the leading dims split alike, a broadcast input's
// size-1 dims and the joined last dim never.
#include <gtest/gtest.h>

#include "kiwi/ir/graph.h"
#include "kiwi/solve/sharding/op_indexing.h"

namespace kiwi::solve::sharding::internal {
namespace {

ir::NodeId Add(ir::Graph& g, ir::OpKind kind, const std::string& op, ir::Shape shape, std::vector<ir::NodeId> inputs = {}) {
  ir::Node n;
  n.name = op + std::to_string(g.size());
  n.kind = kind;
  n.op = op;
  n.output = {ir::DType::kBF16, std::move(shape)};
  n.inputs = std::move(inputs);
  return g.Add(std::move(n));
}

TEST(ConcatIndexing, LeadingDimsSplitAlikeTheJoinedAndBroadcastDimsNever) {
  ir::Graph g("keys");
  const ir::NodeId own = Add(g, ir::OpKind::kInput, "input", {2, 8, 4, 6});
  const ir::NodeId shared = Add(g, ir::OpKind::kInput, "input", {2, 8, 1, 2});
  const ir::NodeId joined = Add(g, ir::OpKind::kReshape, "concat", {2, 8, 4, 8}, {own, shared});
  std::optional<OpIndexing> ix = DescribeOp(g, g.node(joined));
  ASSERT_TRUE(ix.has_value());
  ASSERT_EQ(ix->output.size(), 4u);
  for (size_t d = 0; d < 3; ++d) {
    EXPECT_NE(ix->output[d], kNoIndex) << d;
    EXPECT_EQ(ix->operands[0][d], ix->output[d]) << d;
  }
  EXPECT_EQ(ix->output[3], kNoIndex);
  EXPECT_EQ(ix->operands[0][3], kNoIndex);
  EXPECT_EQ(ix->operands[1][0], ix->output[0]);
  EXPECT_EQ(ix->operands[1][2], kNoIndex);  // the shared head: whole on every device
  EXPECT_EQ(ix->operands[1][3], kNoIndex);

  const ir::NodeId slice = Add(g, ir::OpKind::kReshape, "concat_grad", {2, 8, 4, 2}, {joined});
  std::optional<OpIndexing> grad = DescribeOp(g, g.node(slice));
  ASSERT_TRUE(grad.has_value());
  EXPECT_EQ(grad->operands[0], grad->output);
  EXPECT_EQ(grad->output[3], kNoIndex);
  EXPECT_NE(grad->output[2], kNoIndex);

  // Inputs that do not join (a leading dim neither equal nor 1) have no description.
  const ir::NodeId odd = Add(g, ir::OpKind::kInput, "input", {2, 8, 3, 2});
  const ir::NodeId bad = Add(g, ir::OpKind::kReshape, "concat", {2, 8, 4, 8}, {own, odd});
  EXPECT_FALSE(DescribeOp(g, g.node(bad)).has_value());
}

}  // namespace
}  // namespace kiwi::solve::sharding::internal
