// Gradient rules, one per forward (kind, op). Each reads exactly the forward tensors its formula needs
// (as PyTorch's autograd saves them): d(A B)/dA reads B, d(A B)/dB reads A, relu and softmax read
// their output, gelu/silu/tanh/sigmoid their input, a dropout multiply only its mask.
#include <array>

#include "kiwi/ir/gradient_rules.h"

namespace kiwi::ir::internal {
namespace {

Node GradOp(OpKind kind, std::string op, std::vector<NodeId> inputs, TensorType output, OpAttrs attrs = {}) {
  Node n = MakeOp("", kind, std::move(op), std::move(output), std::move(inputs));
  n.attrs = std::move(attrs);
  return n;
}
OpAttrs Transposes(const OpAttrs& a) {
  OpAttrs t;
  t.transpose_a = a.transpose_a;
  t.transpose_b = a.transpose_b;
  return t;
}
OpAttrs Window(const OpAttrs& a) {
  OpAttrs w;
  w.stride = a.stride;
  w.padding = a.padding;
  w.window = a.window;
  return w;
}
OpAttrs Axes(std::vector<int> axes) {
  OpAttrs r;
  r.axes = std::move(axes);
  return r;
}
// A gradient with the op's (broadcast) output shape and the operand's dtype; Give reduces it.
TensorType OutShaped(const GradContext& c, size_t slot) { return {c.type(slot).dtype, c.op().output.shape}; }

// (matmul|batch_matmul)_grad_a (dY, B) -> dA = dY B^T; _grad_b (A, dY) -> dB = A^T dY; bias: sum of dY.
void MatmulFamily(GradContext& c, const std::string& op) {
  const OpAttrs attrs = Transposes(c.op().attrs);
  if (c.needs(0)) c.Give(0, GradOp(c.op().kind, op + "_grad_a", {c.dy(), c.in(1)}, c.type(0), attrs));
  if (c.needs(1)) c.Give(1, GradOp(c.op().kind, op + "_grad_b", {c.in(0), c.dy()}, c.type(1), attrs));
  if (c.arity() > 2 && c.needs(2)) c.PassThrough(2);
}
void Matmul(GradContext& c) { MatmulFamily(c, "matmul"); }
void BatchMatmul(GradContext& c) { MatmulFamily(c, "batch_matmul"); }

// conv2d_grad_x (dY, w) -> dx; conv2d_grad_w (x, dY) -> dw; bias: dY summed over N, H', W'.
void Conv(GradContext& c) {
  const OpAttrs attrs = Window(c.op().attrs);
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kConv, "conv2d_grad_x", {c.dy(), c.in(1)}, c.type(0), attrs));
  if (c.needs(1)) c.Give(1, GradOp(OpKind::kConv, "conv2d_grad_w", {c.in(0), c.dy()}, c.type(1), attrs));
  if (c.arity() > 2 && c.needs(2)) c.GiveSum(2, {0, 2, 3});
}
void MaxPool(GradContext& c) {  // routes dY to the argmax: reads x
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kPool, "max_pool_grad", {c.dy(), c.in(0)}, c.type(0), Window(c.op().attrs)));
}
void AvgPool(GradContext& c) {  // spreads dY evenly: reads nothing
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kPool, "avg_pool_grad", {c.dy()}, c.type(0), Window(c.op().attrs)));
}

// ---- elementwise
void Add(GradContext& c) {
  for (size_t s = 0; s < c.arity(); ++s)
    if (c.needs(s)) c.PassThrough(s);
}
void Sub(GradContext& c) {
  if (c.needs(0)) c.PassThrough(0);
  if (c.needs(1)) c.GiveNegated(1);
}
void Mul(GradContext& c) {  // d(a*b)/da = dY*b: a dropout multiply reads only its mask
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kElementwise, "mul", {c.dy(), c.in(1)}, OutShaped(c, 0)));
  if (c.needs(1)) c.Give(1, GradOp(OpKind::kElementwise, "mul", {c.dy(), c.in(0)}, OutShaped(c, 1)));
}
void Div(GradContext& c) {  // d(a/b)/da = dY/b; d(a/b)/db = -dY*a/b^2 (div_grad_b reads a and b)
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kElementwise, "div", {c.dy(), c.in(1)}, OutShaped(c, 0)));
  if (c.needs(1)) c.Give(1, GradOp(OpKind::kElementwise, "div_grad_b", {c.dy(), c.in(0), c.in(1)}, OutShaped(c, 1)));
}
void Relu(GradContext& c) {  // reads the output, as PyTorch's threshold_backward
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kElementwise, "relu_grad", {c.dy(), c.op().id}, c.type(0)));
}
void UnaryReadingInput(GradContext& c) {  // gelu, silu, tanh, sigmoid: "<op>_grad"(dY, x)
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kElementwise, c.op().op + "_grad", {c.dy(), c.in(0)}, c.type(0)));
}
void Scale(GradContext& c) {  // linear: the same scaling of dY
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kElementwise, "scale", {c.dy()}, c.type(0)));
}
void Cast(GradContext& c) {  // dY cast back to the input's dtype; reads nothing forward
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kElementwise, "cast", {c.dy()}, c.type(0)));
}
void Rotary(GradContext& c) {  // linear: the inverse rotation of dY
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kElementwise, "rotary_grad", {c.dy()}, c.type(0)));
}

// Fused attention (FlashAttention's backward, one kernel in practice): each gradient reads dO, q, k, v
// and the output (the per-row log-sum-exp it also saves is [..., sq], left out); the scores are
// recomputed inside, never read.
void Attention(GradContext& c) {
  OpAttrs attrs;
  attrs.causal = c.op().attrs.causal;
  attrs.dropout_p = c.op().attrs.dropout_p;  // the backward regenerates the forward's mask
  const std::vector<NodeId> reads = {c.dy(), c.in(0), c.in(1), c.in(2), c.op().id};
  static constexpr std::array<std::string_view, 3> kOps = {"attention_grad_q", "attention_grad_k", "attention_grad_v"};
  for (size_t s = 0; s < 3; ++s)
    if (c.needs(s)) c.Give(s, GradOp(OpKind::kAttention, std::string(kOps[s]), reads, c.type(s), attrs));
}

// ---- normalisation, softmax, loss
void Softmax(GradContext& c) {  // y * (dY - sum(dY * y)): reads the output
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kSoftmax, "softmax_grad", {c.dy(), c.op().id}, c.type(0)));
}
// x-grad reads x and gamma; gamma- and beta-grads read x (one fused kernel in PyTorch reads x for all).
void Norm(GradContext& c) {
  const std::string op = c.op().op.empty() ? "layernorm" : c.op().op;
  if (c.needs(0)) {
    std::vector<NodeId> inputs = {c.dy(), c.in(0)};
    if (c.arity() > 1) inputs.push_back(c.in(1));
    c.Give(0, GradOp(OpKind::kLayerNorm, op + "_grad_x", std::move(inputs), c.type(0)));
  }
  if (c.arity() > 1 && c.needs(1))
    c.Give(1, GradOp(OpKind::kLayerNorm, op + "_grad_gamma", {c.dy(), c.in(0)}, c.type(1)));
  if (c.arity() > 2 && c.needs(2))
    c.Give(2, GradOp(OpKind::kLayerNorm, op + "_grad_beta", {c.dy(), c.in(0)}, c.type(2)));
}
// softmax(logits) - onehot(labels), as PyTorch's F.cross_entropy (log_softmax + nll_loss) runs it:
// nll_loss_backward writes a dense [..., V] gradient of the labels, which log_softmax_backward reads with
// the logits while writing theirs, so two logits-sized tensors live at once (measured on an H200:
// docs/fidelity.md, "One GPU"). The loss's own gradient is 1.
void CrossEntropy(GradContext& c) {
  if (!c.needs(0)) return;
  const NodeId nll = c.Helper(0, "nll", GradOp(OpKind::kSoftmax, "nll_loss_grad", {c.in(1)}, c.type(0)));
  c.Give(0, GradOp(OpKind::kSoftmax, "cross_entropy_grad", {c.in(0), nll}, c.type(0)));
}
void Embedding(GradContext& c) {  // scatter-add of dY rows at ids: reads ids
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kEmbedding, "embedding_grad", {c.dy(), c.in(1)}, c.type(0)));
}

// ---- layout and reductions: gradients read nothing forward (max reads its input)
void Reshape(GradContext& c) {
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kReshape, "reshape", {c.dy()}, c.type(0)));
}
// concat: each input's gradient is its slice of dY (reads nothing forward); a broadcast input's is
// then summed over the dims it was expanded along.
void Concat(GradContext& c) {
  for (size_t s = 0; s < c.arity(); ++s) {
    if (!c.needs(s)) continue;
    Shape slice = c.op().output.shape;
    slice.back() = c.type(s).shape.back();
    c.Give(s, GradOp(OpKind::kReshape, "concat_grad", {c.dy()}, {c.type(s).dtype, std::move(slice)}));
  }
}
void Transpose(GradContext& c) {  // the inverse permutation
  const std::vector<int>& perm = c.op().attrs.axes;
  std::vector<int> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int>(i);
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kTranspose, "transpose", {c.dy()}, c.type(0), Axes(std::move(inverse))));
}
void ReduceLinear(GradContext& c) {  // sum/mean: broadcast dY back ("sum_grad"/"mean_grad")
  if (c.needs(0)) c.Give(0, GradOp(OpKind::kReduce, c.op().op + "_grad", {c.dy()}, c.type(0), Axes(c.op().attrs.axes)));
}
void ReduceMax(GradContext& c) {
  if (c.needs(0))
    c.Give(0, GradOp(OpKind::kReduce, "max_grad", {c.dy(), c.in(0)}, c.type(0), Axes(c.op().attrs.axes)));
}

struct GradRule {
  OpKind kind;
  std::string_view op;  // "" = the kind's canonical op, when a forward node leaves op empty
  GradFn rule;
};

constexpr auto kGradRules = std::to_array<GradRule>({
    {OpKind::kMatmul, "matmul", Matmul},
    {OpKind::kMatmul, "", Matmul},
    {OpKind::kBatchMatmul, "batch_matmul", BatchMatmul},
    {OpKind::kBatchMatmul, "", BatchMatmul},
    {OpKind::kConv, "conv2d", Conv},
    {OpKind::kConv, "", Conv},
    {OpKind::kPool, "max_pool", MaxPool},
    {OpKind::kPool, "avg_pool", AvgPool},
    {OpKind::kElementwise, "add", Add},
    {OpKind::kElementwise, "sub", Sub},
    {OpKind::kElementwise, "mul", Mul},
    {OpKind::kElementwise, "div", Div},
    {OpKind::kElementwise, "relu", Relu},
    {OpKind::kElementwise, "gelu", UnaryReadingInput},
    {OpKind::kElementwise, "silu", UnaryReadingInput},
    {OpKind::kElementwise, "tanh", UnaryReadingInput},
    {OpKind::kElementwise, "sigmoid", UnaryReadingInput},
    {OpKind::kElementwise, "scale", Scale},
    {OpKind::kElementwise, "rotary", Rotary},
    {OpKind::kElementwise, "cast", Cast},
    {OpKind::kAttention, "attention", Attention},
    {OpKind::kAttention, "", Attention},
    {OpKind::kSoftmax, "softmax", Softmax},
    {OpKind::kSoftmax, "", Softmax},
    {OpKind::kLayerNorm, "layernorm", Norm},
    {OpKind::kLayerNorm, "rmsnorm", Norm},
    {OpKind::kLayerNorm, "batchnorm", Norm},  // per-channel statistics; reads as layernorm (x, gamma)
    {OpKind::kLayerNorm, "", Norm},
    {OpKind::kLoss, "cross_entropy", CrossEntropy},
    {OpKind::kLoss, "", CrossEntropy},
    {OpKind::kEmbedding, "embedding", Embedding},
    {OpKind::kEmbedding, "", Embedding},
    {OpKind::kReshape, "reshape", Reshape},
    {OpKind::kReshape, "", Reshape},
    {OpKind::kReshape, "concat", Concat},
    {OpKind::kTranspose, "transpose", Transpose},
    {OpKind::kTranspose, "", Transpose},
    {OpKind::kReduce, "sum", ReduceLinear},
    {OpKind::kReduce, "mean", ReduceLinear},
    {OpKind::kReduce, "max", ReduceMax},
});

}  // namespace

GradFn FindGradRule(OpKind kind, std::string_view op) {
  for (const GradRule& r : kGradRules)
    if (r.kind == kind && r.op == op) return r.rule;
  return nullptr;
}

}  // namespace kiwi::ir::internal
