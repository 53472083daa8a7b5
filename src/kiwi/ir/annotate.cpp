// FLOPs and bytes of every operator: one formula per (kind, op) in kFlopRules. A multiply-add counts
// as 2 FLOPs; a transcendental (exp, log, tanh, sqrt) counts as 1, like an add, so elementwise
// constants below are simply the number of arithmetic steps per element. Safe on unverified graphs
// (builders annotate before verifying): missing inputs count as empty tensors.
#include "kiwi/ir/annotate.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace kiwi::ir {
namespace {

const Shape kMissing = {0};  // a missing input has no elements, so it contributes no work

const Shape& InShape(const Graph& g, const Node& n, size_t i) {
  if (i >= n.inputs.size() || n.inputs[i] < 0 || n.inputs[i] >= g.size()) return kMissing;
  return g.node(n.inputs[i]).output.shape;
}
double Numel(const Shape& s) {
  double n = 1.0;
  for (int64_t d : s) n *= static_cast<double>(d);
  return n;
}
double Last(const Shape& s) { return s.empty() ? 1.0 : static_cast<double>(s.back()); }
double Out(const Node& n) { return Numel(n.output.shape); }

double Zero(const Graph&, const Node&) { return 0.0; }
double Keep(const Graph&, const Node& n) { return n.flops; }  // kOpaque: profiled, not modelled

// Matmul: 2*M*N*K per batch element = 2 * numel(A) * N, whether A and N are read from the forward
// op's operands or from a gradient op's (grad_a produces A from dY[..., M, N]; grad_b reads A and dY).
double MatmulFwd(const Graph& g, const Node& n) { return 2.0 * Numel(InShape(g, n, 0)) * Last(n.output.shape); }
double MatmulGradA(const Graph& g, const Node& n) { return 2.0 * Out(n) * Last(InShape(g, n, 0)); }
double MatmulGradB(const Graph& g, const Node& n) { return 2.0 * Numel(InShape(g, n, 0)) * Last(InShape(g, n, 1)); }

// Conv: 2*N*O*H'*W'*C*kh*kw = 2 * numel(Y) * numel(w) / O, for the forward op and both gradients.
double ConvFlops(const Shape& y, const Shape& w) {
  return w.empty() || w[0] <= 0 ? 0.0 : 2.0 * Numel(y) * Numel(w) / static_cast<double>(w[0]);
}
double ConvFwd(const Graph& g, const Node& n) { return ConvFlops(n.output.shape, InShape(g, n, 1)); }
double ConvGradX(const Graph& g, const Node& n) { return ConvFlops(InShape(g, n, 0), InShape(g, n, 1)); }
double ConvGradW(const Graph& g, const Node& n) { return ConvFlops(InShape(g, n, 1), n.output.shape); }

// Fused attention (FlashAttention-2, Dao 2023): forward S = q k^T (2 sq sk d) and o = P v (2 sq sk dv)
// per batch element; the backward recomputes S, then dV = P^T dO (2 sq sk dv), dP = dO v^T (2 sq sk dv),
// dq = dS k (2 sq sk d), dk = dS^T q (2 sq sk d): 2.5x the forward, split here as the kernel's three
// outputs need them (dq: S, dP and dS k; dk: dS^T q; dv: P^T dO). A causal mask skips half the blocks.
struct AttentionDims {
  double batch_rows_keys = 0.0;  // batch elements x sq x sk
  double d = 0.0, dv = 0.0;
};
AttentionDims AttentionDimsOf(const Graph& g, const Node& n, size_t q_slot) {
  const Shape& q = InShape(g, n, q_slot);
  const Shape& k = InShape(g, n, q_slot + 1);
  const Shape& v = InShape(g, n, q_slot + 2);
  if (q.size() < 2 || k.size() < 2 || v.empty()) return {};
  const double keys = static_cast<double>(k[k.size() - 2]);
  return {Numel(q) / Last(q) * keys, Last(q), Last(v)};
}
double CausalShare(const Node& n) { return n.attrs.causal ? 0.5 : 1.0; }
double AttentionFwd(const Graph& g, const Node& n) {
  const AttentionDims a = AttentionDimsOf(g, n, 0);
  return CausalShare(n) * 2.0 * a.batch_rows_keys * (a.d + a.dv);
}
double AttentionGradQ(const Graph& g, const Node& n) {
  const AttentionDims a = AttentionDimsOf(g, n, 1);
  return CausalShare(n) * 2.0 * a.batch_rows_keys * (2.0 * a.d + a.dv);
}
double AttentionGradK(const Graph& g, const Node& n) {
  const AttentionDims a = AttentionDimsOf(g, n, 1);
  return CausalShare(n) * 2.0 * a.batch_rows_keys * a.d;
}
double AttentionGradV(const Graph& g, const Node& n) {
  const AttentionDims a = AttentionDimsOf(g, n, 1);
  return CausalShare(n) * 2.0 * a.batch_rows_keys * a.dv;
}

// Pool: window^2 reads (compares or adds) per pooled element; the gradients route the same.
double PoolFwd(const Graph&, const Node& n) {
  return Out(n) * static_cast<double>(n.attrs.window * n.attrs.window);
}
double PoolGrad(const Graph& g, const Node& n) {
  return Numel(InShape(g, n, 0)) * static_cast<double>(n.attrs.window * n.attrs.window);
}

// Elementwise ops: FLOPs per output element.
struct PerElement {
  std::string_view op;
  double flops;
};
constexpr auto kElementwiseFlops = std::to_array<PerElement>({
    {"sub", 1}, {"mul", 1}, {"div", 1}, {"scale", 1}, {"relu", 1},
    {"tanh", 1},          // one transcendental
    {"sigmoid", 3},       // exp, add 1, divide
    {"silu", 4},          // sigmoid (3) times x
    {"gelu", 9},          // 0.5x(1 + tanh(k(x + 0.044715x^3))): cube 2, scale 1, add 1, scale 1, tanh 1, +1, *x, *0.5
    {"rotary", 3},        // x*cos + rotate_half(x)*sin
    {"rotary_grad", 3},   // the inverse rotation, same count
    {"relu_grad", 1},     // select dY where y > 0
    {"tanh_grad", 4},     // t = tanh(x), dY*(1 - t^2)
    {"sigmoid_grad", 6},  // s (3), dY*s*(1 - s)
    {"silu_grad", 8},     // s (3), s*(1 + x*(1 - s)) (4), times dY
    {"gelu_grad", 16},    // tanh argument (6), 0.5(1+t) + 0.5x(1-t^2)k(1+3*0.044715x^2) (9), times dY
    {"div_grad_b", 4},    // -dY * a / b / b
    {"neg", 1}, {"exp", 1},
    {"cast", 0},          // a copy (PyTorch's FLOP counter counts none): priced by its bytes
});
double Elementwise(const Graph&, const Node& n) {
  // n-ary add: inputs-1 adds per element (gradient accumulation sums several contributions).
  if (n.op == "add") return Out(n) * static_cast<double>(std::max<size_t>(n.inputs.size(), 2) - 1);
  for (const PerElement& e : kElementwiseFlops)
    if (e.op == n.op) return Out(n) * e.flops;
  return Out(n) * static_cast<double>(std::max<size_t>(n.inputs.size(), 1));  // unknown op: 1 per operand
}

// Reductions: one add/compare per input element; their gradients one write (or select) per element.
double ReduceFwd(const Graph& g, const Node& n) { return Numel(InShape(g, n, 0)); }
double PerOutput(double k, const Node& n) { return k * Out(n); }

// Softmax with fused scale and causal mask: scale 1, mask 1, max 1, subtract 1, exp 1, sum 1,
// divide 1 = 7. Its gradient y*(dY - sum(dY*y)) times the scale: multiply, sum, subtract, multiply, scale = 5.
double Softmax(const Graph&, const Node& n) { return PerOutput(7, n); }
double SoftmaxGrad(const Graph&, const Node& n) { return PerOutput(5, n); }
// Cross-entropy gradient softmax(logits) - onehot: softmax without scale/mask (5) plus the subtraction.
double CrossEntropyGrad(const Graph&, const Node& n) { return PerOutput(6, n); }
// Cross-entropy: log-softmax per logit (max, subtract, exp, sum, log = 5); picking the label is negligible.
double CrossEntropy(const Graph& g, const Node& n) { return 5.0 * Numel(InShape(g, n, 0)); }

// LayerNorm: mean 1, center 1, square+sum 2, times rstd 1, gamma 1, beta 1 = 7 per element; RMSNorm
// drops mean, center and beta = 4. Gradients: x-grad recomputes xhat (2), dY*gamma (1), two row
// sums (3), combines (4) = 10 (RMSNorm 7); gamma-grad xhat (2), times dY, row sum = 4; beta-grad a row sum.
double LayerNorm(const Graph&, const Node& n) { return PerOutput(n.op == "rmsnorm" ? 4 : 7, n); }
double LayerNormGradX(const Graph&, const Node& n) { return PerOutput(10, n); }
double RmsNormGradX(const Graph&, const Node& n) { return PerOutput(7, n); }
double NormGradGamma(const Graph& g, const Node& n) { return 4.0 * Numel(InShape(g, n, 1)); }
double NormGradBeta(const Graph& g, const Node& n) { return Numel(InShape(g, n, 1)); }

double ReduceGrad(const Graph&, const Node& n) { return PerOutput(1, n); }
double EmbeddingGrad(const Graph& g, const Node& n) { return Numel(InShape(g, n, 0)); }  // scatter-add per dY element
double Random(const Graph&, const Node& n) { return PerOutput(1, n); }  // draw and compare per element

// Optimizer per parameter element: Adam m (3), v (4), bias-corrected update (5) = 12; SGD p -= lr*g = 2.
double Optimizer(const Graph& g, const Node& n) {
  double elements = 0.0;
  for (NodeId in : n.inputs)
    if (in >= 0 && in < g.size() && g.node(in).kind == OpKind::kParameter) elements += Numel(g.node(in).output.shape);
  return elements * (n.op == "sgd" ? 2.0 : 12.0);
}

using FlopFn = double (*)(const Graph&, const Node&);
struct FlopRule {
  OpKind kind;
  std::string_view op;  // "" = the kind's default
  FlopFn flops;
};

constexpr auto kFlopRules = std::to_array<FlopRule>({
    {OpKind::kInput, "", Zero},
    {OpKind::kParameter, "", Zero},
    {OpKind::kOptimizerState, "", Zero},
    {OpKind::kRandom, "", Random},
    {OpKind::kMatmul, "", MatmulFwd},
    {OpKind::kMatmul, "matmul_grad_a", MatmulGradA},
    {OpKind::kMatmul, "matmul_grad_b", MatmulGradB},
    {OpKind::kBatchMatmul, "", MatmulFwd},
    {OpKind::kBatchMatmul, "batch_matmul_grad_a", MatmulGradA},
    {OpKind::kBatchMatmul, "batch_matmul_grad_b", MatmulGradB},
    {OpKind::kConv, "", ConvFwd},
    {OpKind::kConv, "conv2d_grad_x", ConvGradX},
    {OpKind::kConv, "conv2d_grad_w", ConvGradW},
    {OpKind::kPool, "", PoolFwd},
    {OpKind::kPool, "max_pool_grad", PoolGrad},
    {OpKind::kPool, "avg_pool_grad", PoolGrad},
    {OpKind::kElementwise, "", Elementwise},
    {OpKind::kReduce, "", ReduceFwd},
    {OpKind::kReduce, "sum_grad", ReduceGrad},
    {OpKind::kReduce, "mean_grad", ReduceGrad},
    {OpKind::kReduce, "max_grad", ReduceGrad},
    {OpKind::kAttention, "", AttentionFwd},
    {OpKind::kAttention, "attention_grad_q", AttentionGradQ},
    {OpKind::kAttention, "attention_grad_k", AttentionGradK},
    {OpKind::kAttention, "attention_grad_v", AttentionGradV},
    {OpKind::kSoftmax, "", Softmax},
    {OpKind::kSoftmax, "softmax_grad", SoftmaxGrad},
    {OpKind::kSoftmax, "cross_entropy_grad", CrossEntropyGrad},
    {OpKind::kSoftmax, "nll_loss_grad", Zero},  // a zero fill and one write per label: no arithmetic
    {OpKind::kLayerNorm, "", LayerNorm},
    {OpKind::kLayerNorm, "layernorm_grad_x", LayerNormGradX},
    {OpKind::kLayerNorm, "rmsnorm_grad_x", RmsNormGradX},
    {OpKind::kLayerNorm, "layernorm_grad_gamma", NormGradGamma},
    {OpKind::kLayerNorm, "rmsnorm_grad_gamma", NormGradGamma},
    {OpKind::kLayerNorm, "layernorm_grad_beta", NormGradBeta},
    {OpKind::kLayerNorm, "batchnorm_grad_x", LayerNormGradX},  // batchnorm: layernorm's work per element
    {OpKind::kLayerNorm, "batchnorm_grad_gamma", NormGradGamma},
    {OpKind::kLayerNorm, "batchnorm_grad_beta", NormGradBeta},
    {OpKind::kEmbedding, "", Zero},  // a gather moves bytes, computes nothing
    {OpKind::kEmbedding, "embedding_grad", EmbeddingGrad},
    {OpKind::kReshape, "", Zero},
    {OpKind::kTranspose, "", Zero},
    {OpKind::kLoss, "", CrossEntropy},
    {OpKind::kCollective, "", Zero},  // communication; the reduction adds are the cost model's business
    {OpKind::kOptimizer, "", Optimizer},
    {OpKind::kOpaque, "", Keep},
});

const FlopRule* FindRule(const Node& node) {
  const FlopRule* fallback = nullptr;
  for (const FlopRule& rule : kFlopRules) {
    if (rule.kind != node.kind) continue;
    if (!rule.op.empty() && rule.op == node.op) return &rule;
    if (rule.op.empty()) fallback = &rule;
  }
  return fallback;
}

}  // namespace

double OpFlops(const Graph& graph, const Node& node) {
  const FlopRule* rule = FindRule(node);
  return rule ? rule->flops(graph, node) : 0.0;
}

void AnnotateFlopsAndBytes(Graph& graph) {
  if (graph.operands() == Operands::kStorages) return;  // the capture measured them with torch's FLOP counter
  for (NodeId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (node.kind == OpKind::kOpaque) continue;
    const bool resident = node.kind == OpKind::kInput || node.is_persistent();
    int64_t bytes = 0;
    if (!resident) {
      bytes = node.output.Bytes();
      for (NodeId in : node.inputs)
        if (in >= 0 && in < graph.size()) bytes += graph.node(in).output.Bytes();
    }
    const double flops = OpFlops(graph, node);
    Node& mutable_node = graph.mutable_node(id);
    mutable_node.flops = flops;
    mutable_node.bytes_accessed = bytes;
  }
}

}  // namespace kiwi::ir
