#include "kiwi/ir/backward.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "ir_test_util.h"
#include "kiwi/ir/verify.h"

namespace kiwi::ir {
namespace {

using testing::AddInput;
using testing::AddOp;
using testing::AddParam;
using testing::ExpectBadInput;

// Ids of the hand-built MLP: x -> matmul(W1) + b1 -> relu -> matmul(W2) -> cross_entropy.
enum : NodeId { kX, kW1, kB1, kH, kR, kW2, kLogits, kLabels, kLoss };

Graph Mlp() {
  Graph g("mlp");
  AddInput(g, "x", {8, 16});
  AddParam(g, "W1", {16, 32});
  AddParam(g, "b1", {32});
  AddOp(g, "h", OpKind::kMatmul, "matmul", {8, 32}, {kX, kW1, kB1});
  AddOp(g, "r", OpKind::kElementwise, "relu", {8, 32}, {kH});
  AddParam(g, "W2", {32, 10});
  AddOp(g, "logits", OpKind::kMatmul, "matmul", {8, 10}, {kR, kW2});
  AddInput(g, "labels", {8}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {kLogits, kLabels});
  for (NodeId id : {kW1, kB1, kH, kR}) {
    g.mutable_node(id).layer = 0;
    g.mutable_node(id).scope = "layer0.mlp";
  }
  return g;
}

Graph Train(const Graph& forward, TrainingOptions options = {}) {
  Result<Graph> r = BuildTrainingGraph(forward, options);
  EXPECT_TRUE(r.ok()) << testing::ErrorOf(r);
  return r.ok() ? std::move(r).value() : Graph();
}

NodeId Find(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes())
    if (n.name == name) return n.id;
  ADD_FAILURE() << "no node named " << name;
  return kNoNode;
}

bool AnyBackwardReads(const Graph& g, NodeId tensor) {
  return std::any_of(g.nodes().begin(), g.nodes().end(), [&](const Node& n) {
    return n.is_backward() && std::find(n.inputs.begin(), n.inputs.end(), tensor) != n.inputs.end();
  });
}

struct Expected {
  const char* name;
  OpKind kind;
  const char* op;
  std::vector<NodeId> inputs;
  NodeId grad_of;
};

TEST(BuildTrainingGraph, MlpBackwardOpByOp) {
  const Graph t = Train(Mlp(), {.optimizer = Optimizer::kNone});
  ASSERT_EQ(t.size(), 16);
  // Forward nodes keep their ids; backward nodes follow in reverse topological order.
  for (NodeId id = 0; id <= kLoss; ++id) {
    EXPECT_EQ(t.node(id).name, Mlp().node(id).name);
    EXPECT_FALSE(t.node(id).is_backward());
  }
  const std::vector<Expected> expected = {
      // 9: PyTorch's nll_loss_backward, a dense [8, 10] gradient of the labels
      {"logits.grad.nll", OpKind::kSoftmax, "nll_loss_grad", {kLabels}, kLoss},
      {"logits.grad", OpKind::kSoftmax, "cross_entropy_grad", {kLogits, 9}, kLoss},        // 10: log_softmax's
      {"r.grad", OpKind::kMatmul, "matmul_grad_a", {10, kW2}, kLogits},                   // 11: dY W2^T
      {"W2.grad", OpKind::kMatmul, "matmul_grad_b", {kR, 10}, kLogits},                   // 12: r^T dY
      {"h.grad", OpKind::kElementwise, "relu_grad", {11, kR}, kR},                        // 13: reads relu's output
      {"W1.grad", OpKind::kMatmul, "matmul_grad_b", {kX, 13}, kH},                        // 14: x^T dH
      {"b1.grad", OpKind::kReduce, "sum", {13}, kH},                                      // 15: broadcast bias
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    const Node& n = t.node(static_cast<NodeId>(9 + i));
    SCOPED_TRACE(expected[i].name);
    EXPECT_EQ(n.name, expected[i].name);
    EXPECT_EQ(n.kind, expected[i].kind);
    EXPECT_EQ(n.op, expected[i].op);
    EXPECT_EQ(n.inputs, expected[i].inputs);
    EXPECT_EQ(n.grad_of, expected[i].grad_of);
    EXPECT_TRUE(n.is_backward());
    EXPECT_EQ(n.output, t.node(Find(Mlp(), std::string(n.name).substr(0, n.name.find(".grad")))).output);
  }
  EXPECT_EQ(t.node(15).attrs.axes, std::vector<int>{0});
  // No gradient for the input x; h and logits are read by no backward op except what needs them.
  EXPECT_EQ(std::count_if(t.nodes().begin(), t.nodes().end(), [](const Node& n) { return n.name == "x.grad"; }), 0);
  EXPECT_FALSE(AnyBackwardReads(t, kH));
  EXPECT_EQ(std::count_if(t.nodes().begin(), t.nodes().end(),
                          [&](const Node& n) {
                            return n.is_backward() && std::count(n.inputs.begin(), n.inputs.end(), kLogits) > 0;
                          }),
            1);  // only the loss gradient reads the logits
  // Layer and scope are inherited from the forward op.
  EXPECT_EQ(t.node(14).layer, 0);
  EXPECT_EQ(t.node(14).scope, "layer0.mlp");
  EXPECT_EQ(t.node(12).layer, -1);
  EXPECT_TRUE(VerifyGraph(t).ok());
}

TEST(BuildTrainingGraph, GradientFlopsMatchForwardMatmul) {
  const Graph t = Train(Mlp(), {.optimizer = Optimizer::kNone});
  EXPECT_DOUBLE_EQ(t.node(kH).flops, 2.0 * 8 * 16 * 32);
  EXPECT_DOUBLE_EQ(t.node(Find(t, "W1.grad")).flops, 2.0 * 8 * 16 * 32);
  EXPECT_DOUBLE_EQ(t.node(Find(t, "r.grad")).flops, 2.0 * 8 * 32 * 10);
  EXPECT_DOUBLE_EQ(t.node(Find(t, "W2.grad")).flops, 2.0 * 8 * 32 * 10);
  // bytes = inputs + output: x (512) + dH (1024) + dW1 (2048).
  EXPECT_EQ(t.node(Find(t, "W1.grad")).bytes_accessed, 512 + 1024 + 2048);
}

TEST(SavedActivationBytes, MlpHandComputed) {
  const Graph t = Train(Mlp());
  // x [8,16] f32 (dW1) 512 + r [8,32] (dW2, relu grad) 1024 + logits [8,10] 320 + labels [8] i64 64.
  EXPECT_EQ(SavedActivationBytes(t), 512 + 1024 + 320 + 64);
  EXPECT_EQ(SavedActivationBytes(t, 0), 1024);  // only r is in layer 0 (h is never read)
  EXPECT_EQ(SavedActivationBytes(t, 3), 0);
  EXPECT_EQ(SavedActivationBytes(Mlp()), 0);  // no backward ops
  // All layers in one pass (BuildLayerView called the per-layer scan once per layer: 10,000 layers
  // took seconds) give the same bytes.
  const std::vector<int64_t> by_layer = SavedActivationBytesByLayer(t, 4);
  ASSERT_EQ(by_layer.size(), 4u);
  for (int32_t layer = 0; layer < 4; ++layer) EXPECT_EQ(by_layer[static_cast<size_t>(layer)], SavedActivationBytes(t, layer));
  EXPECT_TRUE(SavedActivationBytesByLayer(t, 0).empty());
}

TEST(BuildTrainingGraph, AdamAddsTwoFp32StatesPerParameter) {
  Graph f = Mlp();
  for (NodeId p : {kW1, kB1, kW2}) f.mutable_node(p).output.dtype = DType::kBF16;
  for (NodeId id : {kX, kH, kR, kLogits}) f.mutable_node(id).output.dtype = DType::kBF16;
  const Graph t = Train(f, {.optimizer = Optimizer::kAdam, .master_weights = true});
  const NodeId opt = t.size() - 1;
  EXPECT_EQ(t.node(opt).kind, OpKind::kOptimizer);
  EXPECT_EQ(t.node(opt).op, "adam");
  EXPECT_EQ(t.node(opt).output, (TensorType{DType::kF32, {}}));
  std::vector<NodeId> reads;
  for (NodeId p : {kW1, kB1, kW2}) {
    const std::string name = t.node(p).name;
    const NodeId m = Find(t, name + ".adam_m"), v = Find(t, name + ".adam_v"), w = Find(t, name + ".master");
    for (NodeId s : {m, v, w}) {
      EXPECT_EQ(t.node(s).kind, OpKind::kOptimizerState);
      EXPECT_EQ(t.node(s).output, (TensorType{DType::kF32, t.node(p).output.shape}));
      EXPECT_TRUE(t.node(s).inputs.empty());
      EXPECT_LT(s, opt);
    }
    for (NodeId r : {p, Find(t, name + ".grad"), m, v, w}) reads.push_back(r);
  }
  EXPECT_EQ(t.node(opt).inputs, reads);
  EXPECT_DOUBLE_EQ(t.node(opt).flops, 12.0 * (16 * 32 + 32 + 32 * 10));
}

// A fused Adam keeps Adam's states; only the update's op (how it is priced) differs.
TEST(BuildTrainingGraph, FusedAdamHasAdamsStatesAndItsOwnOp) {
  const Graph adam = Train(Mlp(), {.optimizer = Optimizer::kAdam});
  const Graph fused = Train(Mlp(), {.optimizer = Optimizer::kFusedAdam});
  ASSERT_EQ(fused.size(), adam.size());
  for (NodeId i = 0; i < static_cast<NodeId>(adam.size()); ++i) {
    EXPECT_EQ(fused.node(i).name, adam.node(i).name);
    EXPECT_EQ(fused.node(i).inputs, adam.node(i).inputs);
    EXPECT_EQ(fused.node(i).op, adam.node(i).kind == OpKind::kOptimizer ? "fused_adam" : adam.node(i).op);
  }
}

TEST(ParseOptimizer, NamesRoundTripAndUnknownNamesAreRefused) {
  for (Optimizer o : {Optimizer::kAdam, Optimizer::kFusedAdam, Optimizer::kSgd, Optimizer::kNone})
    EXPECT_EQ(ParseOptimizer(OptimizerName(o)), o);
  EXPECT_EQ(ParseOptimizer("Adam"), std::nullopt);
  EXPECT_EQ(ParseOptimizer("fused-adam"), std::nullopt);
}

TEST(BuildTrainingGraph, SgdAndNoneOptimizers) {
  const Graph sgd = Train(Mlp(), {.optimizer = Optimizer::kSgd});
  EXPECT_EQ(sgd.size(), 17);  // 9 forward + 7 backward + optimizer, no state
  EXPECT_EQ(sgd.node(16).op, "sgd");
  EXPECT_EQ(sgd.node(16).inputs, (std::vector<NodeId>{kW1, 14, kB1, 15, kW2, 12}));
  const Graph master = Train(Mlp(), {.optimizer = Optimizer::kSgd, .master_weights = true});
  EXPECT_EQ(master.size(), 20);
  EXPECT_EQ(master.node(Find(master, "b1.master")).kind, OpKind::kOptimizerState);
  const Graph none = Train(Mlp(), {.optimizer = Optimizer::kNone, .master_weights = true});
  EXPECT_EQ(none.size(), 16);
  EXPECT_TRUE(std::none_of(none.nodes().begin(), none.nodes().end(), [](const Node& n) {
    return n.kind == OpKind::kOptimizer || n.kind == OpKind::kOptimizerState;
  }));
}

// h feeds relu and gelu whose outputs are added: h gets two contributions summed by one add.
TEST(BuildTrainingGraph, AccumulatesSeveralContributionsWithOneAdd) {
  Graph g("acc");
  const NodeId x = AddInput(g, "x", {4, 8});
  const NodeId w = AddParam(g, "W", {8, 8});
  const NodeId h = AddOp(g, "h", OpKind::kMatmul, "matmul", {4, 8}, {x, w});
  const NodeId a = AddOp(g, "a", OpKind::kElementwise, "relu", {4, 8}, {h});
  const NodeId b = AddOp(g, "b", OpKind::kElementwise, "gelu", {4, 8}, {h});
  const NodeId s = AddOp(g, "s", OpKind::kElementwise, "add", {4, 8}, {a, b});
  const NodeId labels = AddInput(g, "labels", {4}, DType::kI32);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {s, labels});
  const Graph t = Train(g, {.optimizer = Optimizer::kNone});
  const NodeId ds = Find(t, "s.grad");
  EXPECT_EQ(t.node(ds).op, "cross_entropy_grad");
  // add passes dY through: a and b get ds itself, no new node.
  const NodeId gelu_grad = Find(t, "h.grad.0"), relu_grad = Find(t, "h.grad.1");
  EXPECT_EQ(t.node(gelu_grad).op, "gelu_grad");
  EXPECT_EQ(t.node(gelu_grad).inputs, (std::vector<NodeId>{ds, h}));  // gelu reads its input
  EXPECT_EQ(t.node(relu_grad).op, "relu_grad");
  EXPECT_EQ(t.node(relu_grad).inputs, (std::vector<NodeId>{ds, a}));  // relu reads its output
  const NodeId dh = Find(t, "h.grad");
  EXPECT_EQ(t.node(dh).op, "add");
  EXPECT_EQ(t.node(dh).inputs, (std::vector<NodeId>{gelu_grad, relu_grad}));
  EXPECT_EQ(t.node(dh).grad_of, h);
  EXPECT_EQ(t.node(Find(t, "W.grad")).inputs, (std::vector<NodeId>{x, dh}));
  const auto adds = std::count_if(t.nodes().begin(), t.nodes().end(),
                                  [](const Node& n) { return n.is_backward() && n.op == "add"; });
  EXPECT_EQ(adds, 1);
  EXPECT_EQ(t.NumNodes(Pass::kBackward), 6);  // s.grad.nll, s.grad, h.grad.0, h.grad.1, h.grad, W.grad
}

TEST(BuildTrainingGraph, SquareOfATensorAccumulatesBothOperands) {
  Graph g("sq");
  const NodeId w = AddParam(g, "w", {3, 5});
  const NodeId sq = AddOp(g, "sq", OpKind::kElementwise, "mul", {3, 5}, {w, w});
  const NodeId labels = AddInput(g, "labels", {3}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {sq, labels});
  const Graph t = Train(g, {.optimizer = Optimizer::kSgd});
  const NodeId d0 = Find(t, "w.grad.0"), d1 = Find(t, "w.grad.1"), dw = Find(t, "w.grad");
  const NodeId dsq = Find(t, "sq.grad");
  EXPECT_EQ(t.node(d0).inputs, (std::vector<NodeId>{dsq, w}));
  EXPECT_EQ(t.node(d1).inputs, (std::vector<NodeId>{dsq, w}));
  EXPECT_EQ(t.node(dw).inputs, (std::vector<NodeId>{d0, d1}));
  EXPECT_EQ(t.node(t.size() - 1).inputs, (std::vector<NodeId>{w, dw}));
}

// y = h + bias[8] (broadcast over rows), z = y - c[1, 8] on a [2, 4, 8] tensor.
TEST(BuildTrainingGraph, BroadcastOperandsGetReduceSum) {
  Graph g("bcast");
  const NodeId x = AddInput(g, "x", {2, 4, 8});
  const NodeId w = AddParam(g, "W", {8, 8});
  const NodeId h = AddOp(g, "h", OpKind::kMatmul, "matmul", {2, 4, 8}, {x, w});
  const NodeId bias = AddParam(g, "bias", {8});
  const NodeId y = AddOp(g, "y", OpKind::kElementwise, "add", {2, 4, 8}, {h, bias});
  const NodeId c = AddParam(g, "c", {1, 8});
  const NodeId z = AddOp(g, "z", OpKind::kElementwise, "sub", {2, 4, 8}, {y, c});
  const NodeId labels = AddInput(g, "labels", {2, 4}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {z, labels});
  const Graph t = Train(g, {.optimizer = Optimizer::kNone});
  const NodeId dz = Find(t, "z.grad");
  // c: reduce over dims 0 and 1 ([8]), reshape to [1, 8], negate.
  const NodeId c_sum = Find(t, "c.grad.sum.sum");
  EXPECT_EQ(t.node(c_sum).op, "sum");
  EXPECT_EQ(t.node(c_sum).inputs, std::vector<NodeId>{dz});
  EXPECT_EQ(t.node(c_sum).attrs.axes, (std::vector<int>{0, 1}));
  EXPECT_EQ(t.node(c_sum).output.shape, Shape{8});
  const NodeId c_reshaped = Find(t, "c.grad.sum");
  EXPECT_EQ(t.node(c_reshaped).kind, OpKind::kReshape);
  EXPECT_EQ(t.node(c_reshaped).inputs, std::vector<NodeId>{c_sum});
  EXPECT_EQ(t.node(c_reshaped).output.shape, (Shape{1, 8}));
  const NodeId dc = Find(t, "c.grad");
  EXPECT_EQ(t.node(dc).op, "scale");
  EXPECT_EQ(t.node(dc).inputs, std::vector<NodeId>{c_reshaped});
  EXPECT_EQ(t.node(dc).output.shape, (Shape{1, 8}));
  // bias: one reduce over dims 0 and 1 of the pass-through gradient dz.
  const NodeId db = Find(t, "bias.grad");
  EXPECT_EQ(t.node(db).kind, OpKind::kReduce);
  EXPECT_EQ(t.node(db).inputs, std::vector<NodeId>{dz});
  EXPECT_EQ(t.node(db).attrs.axes, (std::vector<int>{0, 1}));
  EXPECT_EQ(t.node(db).output.shape, Shape{8});
  // h and y get dz itself (pass-through): W's gradient reads x and dz.
  EXPECT_EQ(t.node(Find(t, "W.grad")).inputs, (std::vector<NodeId>{x, dz}));
  EXPECT_FALSE(AnyBackwardReads(t, y));
  EXPECT_FALSE(AnyBackwardReads(t, h));
}

TEST(BuildTrainingGraph, KeepDimsReduceForSameRankBroadcast) {
  Graph g("keep");
  const NodeId x = AddParam(g, "x", {4, 8});
  const NodeId s = AddParam(g, "s", {4, 1});
  const NodeId p = AddOp(g, "p", OpKind::kElementwise, "mul", {4, 8}, {x, s});
  const NodeId labels = AddInput(g, "labels", {4}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {p, labels});
  const Graph t = Train(g, {.optimizer = Optimizer::kNone});
  const NodeId full = Find(t, "s.grad.full");
  EXPECT_EQ(t.node(full).op, "mul");
  EXPECT_EQ(t.node(full).inputs, (std::vector<NodeId>{Find(t, "p.grad"), x}));
  const NodeId ds = Find(t, "s.grad");
  EXPECT_EQ(t.node(ds).inputs, std::vector<NodeId>{full});
  EXPECT_EQ(t.node(ds).output.shape, (Shape{4, 1}));
  EXPECT_EQ(t.node(ds).attrs.axes, std::vector<int>{1});
  EXPECT_EQ(t.node(Find(t, "x.grad")).inputs, (std::vector<NodeId>{Find(t, "p.grad"), s}));
}

TEST(BuildTrainingGraph, DropoutGradientReadsOnlyTheMask) {
  Graph g("drop");
  const NodeId x = AddInput(g, "x", {4, 8});
  const NodeId w = AddParam(g, "W", {8, 8});
  const NodeId h = AddOp(g, "h", OpKind::kMatmul, "matmul", {4, 8}, {x, w});
  const NodeId mask = AddOp(g, "mask", OpKind::kRandom, "dropout_mask", {4, 8}, {}, DType::kU8);
  g.mutable_node(mask).attrs.dropout_p = 0.1;
  const NodeId d = AddOp(g, "d", OpKind::kElementwise, "mul", {4, 8}, {h, mask});
  const NodeId labels = AddInput(g, "labels", {4}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {d, labels});
  const Graph t = Train(g);
  EXPECT_EQ(t.node(Find(t, "h.grad")).inputs, (std::vector<NodeId>{Find(t, "d.grad"), mask}));
  EXPECT_FALSE(AnyBackwardReads(t, h));
  // Saved: x (128 B), mask (32 B), d (logits, 128 B), labels (32 B).
  EXPECT_EQ(SavedActivationBytes(t), 128 + 32 + 128 + 32);
}

// A small attention block: layernorm, q/k matmuls, transposes, batched matmul, softmax.
TEST(BuildTrainingGraph, AttentionGradientsReadWhatTheirFormulasNeed) {
  Graph g("attn");
  const NodeId x = AddInput(g, "x", {2, 4, 8});
  const NodeId gamma = AddParam(g, "gamma", {8});
  const NodeId beta = AddParam(g, "beta", {8});
  const NodeId ln = AddOp(g, "ln", OpKind::kLayerNorm, "layernorm", {2, 4, 8}, {x, gamma, beta});
  const NodeId wq = AddParam(g, "Wq", {8, 8});
  const NodeId wk = AddParam(g, "Wk", {8, 8});
  const NodeId q = AddOp(g, "q", OpKind::kMatmul, "matmul", {2, 4, 8}, {ln, wq});
  const NodeId k = AddOp(g, "k", OpKind::kMatmul, "matmul", {2, 4, 8}, {ln, wk});
  const NodeId kt = AddOp(g, "kt", OpKind::kTranspose, "transpose", {2, 8, 4}, {k});
  g.mutable_node(kt).attrs.axes = {0, 2, 1};
  const NodeId s = AddOp(g, "s", OpKind::kBatchMatmul, "batch_matmul", {2, 4, 4}, {q, kt});
  const NodeId p = AddOp(g, "p", OpKind::kSoftmax, "softmax", {2, 4, 4}, {s});
  const NodeId labels = AddInput(g, "labels", {2, 4}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {p, labels});
  const Graph t = Train(g);
  const NodeId dp = Find(t, "p.grad");
  const NodeId ds = Find(t, "s.grad");
  EXPECT_EQ(t.node(ds).op, "softmax_grad");
  EXPECT_EQ(t.node(ds).inputs, (std::vector<NodeId>{dp, p}));  // reads the output
  EXPECT_EQ(t.node(Find(t, "q.grad")).op, "batch_matmul_grad_a");
  EXPECT_EQ(t.node(Find(t, "q.grad")).inputs, (std::vector<NodeId>{ds, kt}));
  EXPECT_EQ(t.node(Find(t, "kt.grad")).inputs, (std::vector<NodeId>{q, ds}));
  const NodeId dk = Find(t, "k.grad");
  EXPECT_EQ(t.node(dk).kind, OpKind::kTranspose);
  EXPECT_EQ(t.node(dk).attrs.axes, (std::vector<int>{0, 2, 1}));
  EXPECT_EQ(t.node(dk).output.shape, (Shape{2, 4, 8}));
  // ln feeds q and k: two contributions, each reading the weight only.
  EXPECT_EQ(t.node(Find(t, "ln.grad")).inputs, (std::vector<NodeId>{Find(t, "ln.grad.0"), Find(t, "ln.grad.1")}));
  EXPECT_EQ(t.node(Find(t, "Wq.grad")).inputs, (std::vector<NodeId>{ln, Find(t, "q.grad")}));
  // layernorm: grad x reads x and gamma; grad gamma and beta read x.
  const NodeId dln = Find(t, "ln.grad");
  EXPECT_EQ(t.node(Find(t, "gamma.grad")).inputs, (std::vector<NodeId>{dln, x}));
  EXPECT_EQ(t.node(Find(t, "beta.grad")).inputs, (std::vector<NodeId>{dln, x}));
  EXPECT_EQ(t.node(Find(t, "gamma.grad")).op, "layernorm_grad_gamma");
  EXPECT_TRUE(std::none_of(t.nodes().begin(), t.nodes().end(), [](const Node& n) { return n.name == "x.grad"; }));
  EXPECT_FALSE(AnyBackwardReads(t, s));
  EXPECT_FALSE(AnyBackwardReads(t, k));
  EXPECT_DOUBLE_EQ(t.node(Find(t, "q.grad")).flops, t.node(s).flops);
}

TEST(BuildTrainingGraph, EmbeddingConvPoolAndReduceRules) {
  Graph g("cnn");
  const NodeId img = AddInput(g, "img", {2, 3, 8, 8});
  const NodeId w = AddParam(g, "w", {4, 3, 3, 3});
  const NodeId b = AddParam(g, "b", {4});
  const NodeId conv = AddOp(g, "conv", OpKind::kConv, "conv2d", {2, 4, 8, 8}, {img, w, b});
  g.mutable_node(conv).attrs.padding = 1;
  const NodeId mp = AddOp(g, "mp", OpKind::kPool, "max_pool", {2, 4, 4, 4}, {conv});
  g.mutable_node(mp).attrs.window = 2;
  g.mutable_node(mp).attrs.stride = 2;
  const NodeId ap = AddOp(g, "ap", OpKind::kPool, "avg_pool", {2, 4, 2, 2}, {mp});
  g.mutable_node(ap).attrs.window = 2;
  g.mutable_node(ap).attrs.stride = 2;
  const NodeId mean = AddOp(g, "mean", OpKind::kReduce, "mean", {2, 4}, {ap});
  g.mutable_node(mean).attrs.axes = {2, 3};
  const NodeId table = AddParam(g, "table", {10, 4});
  const NodeId ids = AddInput(g, "ids", {2}, DType::kI64);
  const NodeId emb = AddOp(g, "emb", OpKind::kEmbedding, "embedding", {2, 4}, {table, ids});
  const NodeId sum = AddOp(g, "sum", OpKind::kElementwise, "add", {2, 4}, {mean, emb});
  const NodeId labels = AddInput(g, "labels", {2}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {sum, labels});
  const Graph t = Train(g);
  const NodeId dsum = Find(t, "sum.grad");
  EXPECT_EQ(t.node(Find(t, "table.grad")).inputs, (std::vector<NodeId>{dsum, ids}));
  EXPECT_EQ(t.node(Find(t, "ap.grad")).op, "mean_grad");
  EXPECT_EQ(t.node(Find(t, "mp.grad")).op, "avg_pool_grad");
  EXPECT_EQ(t.node(Find(t, "mp.grad")).inputs, std::vector<NodeId>{Find(t, "ap.grad")});
  EXPECT_EQ(t.node(Find(t, "conv.grad")).inputs, (std::vector<NodeId>{Find(t, "mp.grad"), conv}));
  const NodeId dconv = Find(t, "conv.grad");
  EXPECT_EQ(t.node(Find(t, "w.grad")).op, "conv2d_grad_w");
  EXPECT_EQ(t.node(Find(t, "w.grad")).inputs, (std::vector<NodeId>{img, dconv}));
  EXPECT_EQ(t.node(Find(t, "b.grad")).attrs.axes, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(t.node(Find(t, "w.grad")).attrs.padding, 1);
  EXPECT_DOUBLE_EQ(t.node(Find(t, "w.grad")).flops, t.node(conv).flops);
  EXPECT_FALSE(AnyBackwardReads(t, mp));
  EXPECT_FALSE(AnyBackwardReads(t, ap));
}

TEST(BuildTrainingGraph, KeepsAnExplicitForwardOrder) {
  Graph f = Mlp();
  f.set_order({kX, kLabels, kW1, kB1, kH, kR, kW2, kLogits, kLoss});
  const Graph t = Train(f, {.optimizer = Optimizer::kSgd});
  const std::vector<NodeId> order = t.order();
  ASSERT_EQ(order.size(), 17u);
  EXPECT_EQ(std::vector<NodeId>(order.begin(), order.begin() + 9), f.order());
  EXPECT_EQ(order.back(), 16);
}

// ---- errors

TEST(BuildTrainingGraphErrors, NoLossOrTwoLosses) {
  Graph g("g");
  const NodeId w = AddParam(g, "w", {4});
  AddOp(g, "r", OpKind::kElementwise, "relu", {4}, {w});
  ExpectBadInput(BuildTrainingGraph(g, {}), {"g:", "no loss"});
  Graph two = Mlp();
  AddOp(two, "loss2", OpKind::kLoss, "cross_entropy", {}, {kLogits, kLabels});
  ExpectBadInput(BuildTrainingGraph(two, {}), {"mlp: node 9 'loss2'", "second loss", "node 8 'loss'"});
}

TEST(BuildTrainingGraphErrors, BackwardNodeInForwardGraph) {
  Graph g = Mlp();
  g.mutable_node(kR).pass = Pass::kBackward;
  ExpectBadInput(BuildTrainingGraph(g, {}), {"node 4 'r'", "pass", "backward"});
}

TEST(BuildTrainingGraphErrors, OpWithoutGradientRuleIsNamed) {
  Graph g = Mlp();
  g.mutable_node(kR).op = "softplus";
  ExpectBadInput(BuildTrainingGraph(g, {}), {"node 4 'r'", "op", "no gradient rule", "elementwise 'softplus'"});
  Graph c = Mlp();
  c.mutable_node(kR).kind = OpKind::kCollective;
  c.mutable_node(kR).op = "all_reduce";
  ExpectBadInput(BuildTrainingGraph(c, {}), {"node 4 'r'", "collective 'all_reduce'"});
}

TEST(BuildTrainingGraphErrors, IntegerParameterIsNamed) {
  Graph g("ids");
  const NodeId table = AddParam(g, "table", {10, 4});
  const NodeId idw = AddParam(g, "idw", {2}, DType::kI64);  // ids computed from a parameter
  const NodeId ids = AddOp(g, "ids", OpKind::kReshape, "reshape", {2}, {idw}, DType::kI64);
  const NodeId emb = AddOp(g, "emb", OpKind::kEmbedding, "embedding", {2, 4}, {table, ids});
  const NodeId labels = AddInput(g, "labels", {2}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {emb, labels});
  ExpectBadInput(BuildTrainingGraph(g, {}), {"node 1 'idw'", "output.dtype", "no gradient"});
}

// Indices computed from parameters (a router's top-k) carry no gradient: the probabilities they
// gather do, and only the gathered operand gets one.
TEST(BuildTrainingGraph, IntegerIndicesFromParametersGetNoGradient) {
  Graph g("router");
  const NodeId x = AddInput(g, "x", {4, 3});
  const NodeId w = AddParam(g, "w", {3, 4});
  const NodeId logits = AddOp(g, "logits", OpKind::kMatmul, "matmul", {4, 4}, {x, w});
  const NodeId probs = AddOp(g, "probs", OpKind::kSoftmax, "softmax", {4, 4}, {logits});
  const NodeId choice = AddOp(g, "choice", OpKind::kReduce, "topk", {4, 2}, {probs}, DType::kI64);
  g.mutable_node(choice).attrs.axes = {1};
  const NodeId flat = AddOp(g, "flat", OpKind::kReshape, "reshape", {16, 1}, {probs});
  const NodeId gates = AddOp(g, "gates", OpKind::kEmbedding, "embedding", {4, 2, 1}, {flat, choice});
  // A floating tensor read only by an integer op (each expert's slots over the transposed
  // probabilities) gets no gradient either.
  const NodeId by_expert = AddOp(g, "by_expert", OpKind::kTranspose, "transpose", {4, 4}, {probs});
  g.mutable_node(by_expert).attrs.axes = {1, 0};
  const NodeId slots = AddOp(g, "slots", OpKind::kReduce, "topk", {4, 2}, {by_expert}, DType::kI64);
  g.mutable_node(slots).attrs.axes = {1};
  const NodeId picked = AddOp(g, "picked", OpKind::kEmbedding, "embedding", {4, 2, 1}, {flat, slots});
  const NodeId picked_rows = AddOp(g, "picked_rows", OpKind::kReshape, "reshape", {4, 2, 1}, {picked});
  const NodeId both = AddOp(g, "both", OpKind::kElementwise, "add", {4, 2, 1}, {gates, picked_rows});
  const NodeId rows = AddOp(g, "rows", OpKind::kReshape, "reshape", {4, 2}, {both});
  const NodeId labels = AddInput(g, "labels", {4}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "cross_entropy", {}, {rows, labels});
  Result<Graph> t = BuildTrainingGraph(g, {});
  ASSERT_TRUE(t.ok()) << t.error().message;
  // The router's weight gets its gradient from the logits' matmul, through the gathered probabilities.
  int from_choice = 0, from_logits = 0, from_gates = 0;
  for (const Node& n : t->nodes()) {
    from_choice += n.grad_of == choice || n.grad_of == slots || n.grad_of == by_expert;
    from_logits += n.grad_of == logits && n.output.shape == t->node(w).output.shape;
    from_gates += n.grad_of == gates;
  }
  EXPECT_EQ(from_choice, 0);
  EXPECT_EQ(from_logits, 1);
  EXPECT_EQ(from_gates, 1);  // embedding_grad into the flattened probabilities only
  EXPECT_TRUE(VerifyGraph(*t).ok());
}

TEST(BuildTrainingGraphErrors, UnusedParameterAndParameterFreeLoss) {
  Graph g = Mlp();
  AddParam(g, "stray", {3});
  ExpectBadInput(BuildTrainingGraph(g, {}), {"node 9 'stray'", "does not affect the loss"});
  Graph h("h");
  const NodeId x = AddInput(h, "x", {2, 3});
  const NodeId labels = AddInput(h, "labels", {2}, DType::kI64);
  AddOp(h, "loss", OpKind::kLoss, "cross_entropy", {}, {x, labels});
  ExpectBadInput(BuildTrainingGraph(h, {}), {"node 2 'loss'", "depends on no parameter"});
}

TEST(BuildTrainingGraphErrors, InvalidForwardGraphIsRejected) {
  Graph g = Mlp();
  g.mutable_node(kW2).output.shape = {31, 10};
  ExpectBadInput(BuildTrainingGraph(g, {}), {"mlp: node 6 'logits'", "inputs[1]", "contraction"});
}

}  // namespace
}  // namespace kiwi::ir
