// The fused attention op (OpKind::kAttention): its shape checks, its gradient rule and its FLOPs
// (FlashAttention-2's count: 4 sq sk d forward, 2.5x that backward, half of each under a causal mask).
#include <gtest/gtest.h>

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

constexpr int64_t kB = 2, kA = 4, kS = 8, kD = 16;

// q = x * wq, k = xk * wk, v = x * wv as [B, a, s, d] tensors (k as given), fused attention, a sum as the loss.
Graph AttentionGraph(bool causal, Shape k_shape = {kB, kA, kS, kD}) {
  Graph g("attention");
  const NodeId x = AddInput(g, "x", {kB, kA, kS, kD});
  const NodeId xk = AddInput(g, "xk", k_shape);
  const NodeId q = AddOp(g, "q", OpKind::kElementwise, "mul", {kB, kA, kS, kD}, {x, AddParam(g, "wq", {kD})});
  const NodeId k = AddOp(g, "k", OpKind::kElementwise, "mul", k_shape, {xk, AddParam(g, "wk", {k_shape.back()})});
  const NodeId v = AddOp(g, "v", OpKind::kElementwise, "mul", {kB, kA, kS, kD}, {x, AddParam(g, "wv", {kD})});
  const NodeId o = AddOp(g, "o", OpKind::kAttention, "attention", {kB, kA, kS, kD}, {q, k, v});
  g.mutable_node(o).attrs.causal = causal;
  g.mutable_node(o).attrs.dropout_p = 0.1;
  const NodeId flat = AddOp(g, "flat", OpKind::kReshape, "reshape", {kB * kA * kS, kD}, {o});
  const NodeId labels = AddInput(g, "labels", {kB * kA * kS}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {flat, labels});
  return g;
}

const Node* Find(const Graph& g, const std::string& op) {
  for (const Node& n : g.nodes())
    if (n.op == op) return &n;
  return nullptr;
}

TEST(Attention, VerifiesAndRejectsMismatchedHeadDims) {
  const Graph g = AttentionGraph(false);
  EXPECT_TRUE(VerifyGraph(g).ok()) << testing::ErrorOf(VerifyGraph(g));
  ExpectBadInput(VerifyGraph(AttentionGraph(false, {kB, kA, kS, kD / 2})), {"'o'", "inputs[1]", "head dim"});
  ExpectBadInput(VerifyGraph(AttentionGraph(false, {kB, kA + 1, kS, kD})), {"'o'", "inputs[1]", "batch dims"});
}

TEST(Attention, GradientsReadTheOperandsAndTheOutputNotTheScores) {
  Result<Graph> t = BuildTrainingGraph(AttentionGraph(true), {});
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_TRUE(VerifyGraph(*t).ok()) << testing::ErrorOf(VerifyGraph(*t));
  const Node* forward = Find(*t, "attention");
  ASSERT_NE(forward, nullptr);
  for (const char* op : {"attention_grad_q", "attention_grad_k", "attention_grad_v"}) {
    const Node* grad = Find(*t, op);
    ASSERT_NE(grad, nullptr) << op;
    ASSERT_EQ(grad->inputs.size(), 5u) << op;
    EXPECT_EQ(grad->inputs[1], forward->inputs[0]) << op;  // q, k, v, then the output
    EXPECT_EQ(grad->inputs[2], forward->inputs[1]) << op;
    EXPECT_EQ(grad->inputs[3], forward->inputs[2]) << op;
    EXPECT_EQ(grad->inputs[4], forward->id) << op;
    EXPECT_TRUE(grad->attrs.causal) << op;
    EXPECT_DOUBLE_EQ(grad->attrs.dropout_p, 0.1) << op;  // the kernel's rate depends on it (cost/profile.h)
  }
  // Nothing of [s, s] per head exists anywhere in the graph.
  for (const Node& n : t->nodes()) {
    if (n.output.Rank() == 4) {
      EXPECT_NE(n.output.shape[2] * n.output.shape[3], kS * kS) << n.name;
    }
  }
}

TEST(Attention, FlopsAreFlashAttentionsCount) {
  for (bool causal : {false, true}) {
    Result<Graph> t = BuildTrainingGraph(AttentionGraph(causal), {});
    ASSERT_TRUE(t.ok()) << t.error().message;
    AnnotateFlopsAndBytes(*t);
    const double share = causal ? 0.5 : 1.0;
    const double forward = share * 4.0 * kB * kA * kS * kS * kD;  // q k^T and P v
    EXPECT_DOUBLE_EQ(Find(*t, "attention")->flops, forward);
    EXPECT_DOUBLE_EQ(Find(*t, "attention_grad_q")->flops + Find(*t, "attention_grad_k")->flops +
                         Find(*t, "attention_grad_v")->flops,
                     2.5 * forward);
    EXPECT_DOUBLE_EQ(Find(*t, "attention_grad_k")->flops, share * 2.0 * kB * kA * kS * kS * kD);
  }
}

}  // namespace
}  // namespace kiwi::ir
