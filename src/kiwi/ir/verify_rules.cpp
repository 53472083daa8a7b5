// Per-(kind, op) shape and dtype checks for VerifyGraph: one small function per operator family,
// dispatched through kRules (DESIGN.md: a table of small handlers, not a giant switch). The op
// vocabulary, forward and gradient ops alike, is the one in ir/backward.h.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>

#include "kiwi/ir/verify_rules.h"

namespace kiwi::ir::internal {
namespace {

using Check = std::optional<Problem>;
constexpr size_t kAny = SIZE_MAX;

// Returns the first failing check of a sequence.
#define KIWI_CHECK(expr)            \
  do {                              \
    if (Check kiwi_c_ = (expr)) return kiwi_c_; \
  } while (0)

Problem Bad(std::string field, std::string what) { return {std::move(field), std::move(what)}; }
std::string InField(size_t i) { return fmt::format("inputs[{}]", i); }
const TensorType& In(const Graph& g, const Node& n, size_t i) { return g.node(n.inputs[i]).output; }
std::string_view OpOf(const Node& n) { return n.op.empty() ? OpKindName(n.kind) : std::string_view(n.op); }

Check Arity(const Node& n, size_t lo, size_t hi) {
  const size_t k = n.inputs.size();
  if (k >= lo && k <= hi) return std::nullopt;
  const std::string want = lo == hi    ? fmt::format("{}", lo)
                           : hi == kAny ? fmt::format("at least {}", lo)
                                        : fmt::format("{} to {}", lo, hi);
  return Bad("inputs", fmt::format("'{}' takes {} inputs, got {}", OpOf(n), want, k));
}

Check ShapeIs(const Shape& actual, const Shape& expected, const std::string& field) {
  if (actual == expected) return std::nullopt;
  return Bad(field, fmt::format("shape {} should be {}", ShapeString(actual), ShapeString(expected)));
}

Check MinRank(const Shape& s, size_t rank, const std::string& field) {
  if (s.size() >= rank) return std::nullopt;
  return Bad(field, fmt::format("needs rank >= {}, got shape {}", rank, ShapeString(s)));
}

// Every input of a matmul/conv has the output's dtype (no implicit casts).
Check AllDTypesMatch(const Graph& g, const Node& n) {
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (In(g, n, i).dtype != n.output.dtype)
      return Bad(InField(i), fmt::format("dtype {} differs from the output's {}", DTypeName(In(g, n, i).dtype),
                                         DTypeName(n.output.dtype)));
  return std::nullopt;
}

Check NoInputs(const Graph&, const Node& n) { return Arity(n, 0, 0); }
Check Anything(const Graph&, const Node&) { return std::nullopt; }

// ---- matmul / batch_matmul: forward (A, B) -> Y; grad_a (dY, B) -> A; grad_b (A, dY) -> B.
struct MatView {
  Shape batch;
  int64_t rows = 0, cols = 0;
};
MatView View(const Shape& s, bool transposed) {
  MatView v{Shape(s.begin(), s.end() - 2), s[s.size() - 2], s.back()};
  if (transposed) std::swap(v.rows, v.cols);
  return v;
}
struct Triple {  // the three tensors of one (forward or gradient) op and the fields holding them
  const Shape& a;
  const Shape& b;
  const Shape& y;
  std::string fa, fb, fy;
};

Check MatmulTriple(const Triple& t, const OpAttrs& attrs, bool batched) {
  KIWI_CHECK(MinRank(t.a, 2, t.fa));
  if (!batched && t.b.size() != 2) return Bad(t.fb, fmt::format("needs rank 2 ([K, N]), got {}", ShapeString(t.b)));
  if (batched && t.b.size() != t.a.size())
    return Bad(t.fb, fmt::format("rank of {} differs from {}'s {}", ShapeString(t.b), t.fa, ShapeString(t.a)));
  const MatView a = View(t.a, attrs.transpose_a), b = View(t.b, attrs.transpose_b);
  if (batched && a.batch != b.batch)
    return Bad(t.fb,
               fmt::format("batch dims {} differ from {}'s {}", ShapeString(b.batch), t.fa, ShapeString(a.batch)));
  if (a.cols != b.rows)
    return Bad(t.fb, fmt::format("contraction dim {} does not match {}'s {}", b.rows, t.fa, a.cols));
  Shape y = a.batch;
  y.push_back(a.rows);
  y.push_back(b.cols);
  return ShapeIs(t.y, y, t.fy);
}

Check MatmulForwardImpl(const Graph& g, const Node& n, bool batched) {
  KIWI_CHECK(Arity(n, 2, batched ? 2 : 3));
  KIWI_CHECK(AllDTypesMatch(g, n));
  const Triple t{In(g, n, 0).shape, In(g, n, 1).shape, n.output.shape, "inputs[0]", "inputs[1]", "output.shape"};
  KIWI_CHECK(MatmulTriple(t, n.attrs, batched));
  if (n.inputs.size() == 3) KIWI_CHECK(ShapeIs(In(g, n, 2).shape, {n.output.shape.back()}, "inputs[2]"));
  return std::nullopt;
}
Check MatmulGradImpl(const Graph& g, const Node& n, bool batched, bool grad_a) {
  KIWI_CHECK(Arity(n, 2, 2));
  KIWI_CHECK(AllDTypesMatch(g, n));
  const Shape& in0 = In(g, n, 0).shape;
  const Shape& in1 = In(g, n, 1).shape;
  if (grad_a)
    return MatmulTriple({n.output.shape, in1, in0, "output.shape", "inputs[1]", "inputs[0]"}, n.attrs, batched);
  return MatmulTriple({in0, n.output.shape, in1, "inputs[0]", "output.shape", "inputs[1]"}, n.attrs, batched);
}
Check Matmul(const Graph& g, const Node& n) { return MatmulForwardImpl(g, n, false); }
Check BatchMatmul(const Graph& g, const Node& n) { return MatmulForwardImpl(g, n, true); }
Check MatmulGradA(const Graph& g, const Node& n) { return MatmulGradImpl(g, n, false, true); }
Check MatmulGradB(const Graph& g, const Node& n) { return MatmulGradImpl(g, n, false, false); }
Check BatchMatmulGradA(const Graph& g, const Node& n) { return MatmulGradImpl(g, n, true, true); }
Check BatchMatmulGradB(const Graph& g, const Node& n) { return MatmulGradImpl(g, n, true, false); }

// ---- attention (q[..., sq, d], k[..., sk, d], v[..., sk, dv]) -> o[..., sq, dv], fused (FlashAttention);
// its gradients attention_grad_{q,k,v} (dO, q, k, v, o) -> dq, dk, dv, shaped like the operand.
Check AttentionOperands(const Shape& q, const Shape& k, const Shape& v, const std::string& fq, const std::string& fk,
                        const std::string& fv) {
  KIWI_CHECK(MinRank(q, 2, fq));
  for (const auto& [shape, field] : {std::pair{&k, &fk}, std::pair{&v, &fv}}) {
    if (shape->size() != q.size())
      return Bad(*field, fmt::format("rank of {} differs from {}'s {}", ShapeString(*shape), fq, ShapeString(q)));
    if (!std::equal(q.begin(), q.end() - 2, shape->begin()))
      return Bad(*field, fmt::format("batch dims of {} differ from {}'s {}", ShapeString(*shape), fq, ShapeString(q)));
  }
  const size_t r = q.size();
  if (k[r - 1] != q[r - 1]) return Bad(fk, fmt::format("head dim {} does not match {}'s {}", k[r - 1], fq, q[r - 1]));
  if (v[r - 2] != k[r - 2]) return Bad(fv, fmt::format("has {} keys' values, {} has {} keys", v[r - 2], fk, k[r - 2]));
  return std::nullopt;
}
Shape AttentionOutput(const Shape& q, const Shape& v) {
  Shape o = q;
  o.back() = v.back();
  return o;
}
Check Attention(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 3, 3));
  KIWI_CHECK(AllDTypesMatch(g, n));
  const Shape& q = In(g, n, 0).shape;
  const Shape& v = In(g, n, 2).shape;
  KIWI_CHECK(AttentionOperands(q, In(g, n, 1).shape, v, "inputs[0]", "inputs[1]", "inputs[2]"));
  return ShapeIs(n.output.shape, AttentionOutput(q, v), "output.shape");
}
Check AttentionGrad(const Graph& g, const Node& n, size_t operand) {
  KIWI_CHECK(Arity(n, 5, 5));
  KIWI_CHECK(AllDTypesMatch(g, n));
  const Shape& q = In(g, n, 1).shape;
  const Shape& v = In(g, n, 3).shape;
  KIWI_CHECK(AttentionOperands(q, In(g, n, 2).shape, v, "inputs[1]", "inputs[2]", "inputs[3]"));
  KIWI_CHECK(ShapeIs(In(g, n, 4).shape, AttentionOutput(q, v), "inputs[4]"));
  KIWI_CHECK(ShapeIs(In(g, n, 0).shape, AttentionOutput(q, v), "inputs[0]"));
  return ShapeIs(n.output.shape, In(g, n, 1 + operand).shape, "output.shape");
}
Check AttentionGradQ(const Graph& g, const Node& n) { return AttentionGrad(g, n, 0); }
Check AttentionGradK(const Graph& g, const Node& n) { return AttentionGrad(g, n, 1); }
Check AttentionGradV(const Graph& g, const Node& n) { return AttentionGrad(g, n, 2); }

// ---- conv2d / pools: output size (H + 2p - k) / stride + 1 per spatial dim.
Check WindowAttrs(const OpAttrs& a) {
  if (a.stride < 1) return Bad("attrs.stride", fmt::format("must be >= 1, got {}", a.stride));
  if (a.padding < 0) return Bad("attrs.padding", fmt::format("must be >= 0, got {}", a.padding));
  return std::nullopt;
}
int64_t OutSize(int64_t in, int64_t k, const OpAttrs& a) { return (in + 2 * a.padding - k) / a.stride + 1; }

// x = [N, C, H, W], w = [O, C, kh, kw], y = [N, O, H', W'].
Check ConvTriple(const Triple& t, const OpAttrs& attrs) {
  KIWI_CHECK(WindowAttrs(attrs));
  if (t.a.size() != 4) return Bad(t.fa, fmt::format("needs rank 4 ([N, C, H, W]), got {}", ShapeString(t.a)));
  if (t.b.size() != 4) return Bad(t.fb, fmt::format("needs rank 4 ([O, C, kh, kw]), got {}", ShapeString(t.b)));
  if (t.b[1] != t.a[1]) return Bad(t.fb, fmt::format("has {} input channels, {} has {}", t.b[1], t.fa, t.a[1]));
  if (t.a[2] + 2 * attrs.padding < t.b[2] || t.a[3] + 2 * attrs.padding < t.b[3])
    return Bad(t.fb, fmt::format("kernel {}x{} exceeds the padded input {}", t.b[2], t.b[3], ShapeString(t.a)));
  return ShapeIs(t.y, {t.a[0], t.b[0], OutSize(t.a[2], t.b[2], attrs), OutSize(t.a[3], t.b[3], attrs)}, t.fy);
}
Check Conv(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 2, 3));
  KIWI_CHECK(AllDTypesMatch(g, n));
  const Triple t{In(g, n, 0).shape, In(g, n, 1).shape, n.output.shape, "inputs[0]", "inputs[1]", "output.shape"};
  KIWI_CHECK(ConvTriple(t, n.attrs));
  if (n.inputs.size() == 3) KIWI_CHECK(ShapeIs(In(g, n, 2).shape, {n.output.shape[1]}, "inputs[2]"));
  return std::nullopt;
}
Check ConvGradX(const Graph& g, const Node& n) {  // (dY, w) -> x
  KIWI_CHECK(Arity(n, 2, 2));
  KIWI_CHECK(AllDTypesMatch(g, n));
  return ConvTriple({n.output.shape, In(g, n, 1).shape, In(g, n, 0).shape, "output.shape", "inputs[1]", "inputs[0]"},
                    n.attrs);
}
Check ConvGradW(const Graph& g, const Node& n) {  // (x, dY) -> w
  KIWI_CHECK(Arity(n, 2, 2));
  KIWI_CHECK(AllDTypesMatch(g, n));
  return ConvTriple({In(g, n, 0).shape, n.output.shape, In(g, n, 1).shape, "inputs[0]", "output.shape", "inputs[1]"},
                    n.attrs);
}

// x = [N, C, H, W] -> y = [N, C, H', W'] with a window x window kernel.
Check PoolPair(const Shape& x, const std::string& fx, const Shape& y, const std::string& fy, const OpAttrs& a) {
  KIWI_CHECK(WindowAttrs(a));
  if (a.window < 1) return Bad("attrs.window", fmt::format("must be >= 1, got {}", a.window));
  if (x.size() != 4) return Bad(fx, fmt::format("needs rank 4 ([N, C, H, W]), got {}", ShapeString(x)));
  if (x[2] + 2 * a.padding < a.window || x[3] + 2 * a.padding < a.window)
    return Bad("attrs.window", fmt::format("window {} exceeds the padded input {}", a.window, ShapeString(x)));
  return ShapeIs(y, {x[0], x[1], OutSize(x[2], a.window, a), OutSize(x[3], a.window, a)}, fy);
}
Check Pool(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 1, 1));
  return PoolPair(In(g, n, 0).shape, "inputs[0]", n.output.shape, "output.shape", n.attrs);
}
Check MaxPoolGrad(const Graph& g, const Node& n) {  // (dY, x) -> dx
  KIWI_CHECK(Arity(n, 2, 2));
  KIWI_CHECK(ShapeIs(In(g, n, 1).shape, n.output.shape, "inputs[1]"));
  return PoolPair(n.output.shape, "output.shape", In(g, n, 0).shape, "inputs[0]", n.attrs);
}
Check AvgPoolGrad(const Graph& g, const Node& n) {  // (dY) -> dx
  KIWI_CHECK(Arity(n, 1, 1));
  return PoolPair(n.output.shape, "output.shape", In(g, n, 0).shape, "inputs[0]", n.attrs);
}

// ---- elementwise: numpy broadcasting (dims aligned from the right, each equal or 1).
struct ArityRange {
  std::string_view op;
  size_t lo, hi;
};
constexpr auto kElementwiseArity = std::to_array<ArityRange>({
    {"add", 2, kAny},       {"sub", 2, 2},          {"mul", 2, 2},        {"div", 2, 2},
    {"div_grad_b", 3, 3},   {"relu", 1, 1},         {"gelu", 1, 1},       {"silu", 1, 1},
    {"tanh", 1, 1},         {"sigmoid", 1, 1},      {"scale", 1, 1},      {"rotary", 1, 1},
    {"rotary_grad", 1, 1},  {"relu_grad", 2, 2},    {"gelu_grad", 2, 2},  {"silu_grad", 2, 2},
    {"tanh_grad", 2, 2},    {"sigmoid_grad", 2, 2}, {"cast", 1, 1},
});

bool BroadcastsTo(const Shape& in, const Shape& out) {
  if (in.size() > out.size()) return false;
  const size_t lead = out.size() - in.size();
  for (size_t j = 0; j < in.size(); ++j)
    if (in[j] != out[lead + j] && in[j] != 1) return false;
  return true;
}
Shape Broadcast(const Shape& a, const Shape& b) {  // both known to broadcast to a common shape
  const Shape& big = a.size() >= b.size() ? a : b;
  const Shape& small = a.size() >= b.size() ? b : a;
  Shape out = big;
  const size_t lead = big.size() - small.size();
  for (size_t j = 0; j < small.size(); ++j)
    if (out[lead + j] == 1) out[lead + j] = small[j];
  return out;
}

Check Elementwise(const Graph& g, const Node& n) {
  const auto it = std::find_if(kElementwiseArity.begin(), kElementwiseArity.end(),
                               [&](const ArityRange& a) { return a.op == n.op; });
  KIWI_CHECK(it == kElementwiseArity.end() ? Arity(n, 1, kAny) : Arity(n, it->lo, it->hi));
  Shape all;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const TensorType& t = In(g, n, i);
    // integer/u8 operands are masks; a cast changes the dtype
    if (IsFloating(t.dtype) && t.dtype != n.output.dtype && n.op != "cast")
      return Bad(InField(i), fmt::format("dtype {} differs from the output's {}", DTypeName(t.dtype),
                                         DTypeName(n.output.dtype)));
    if (!BroadcastsTo(t.shape, n.output.shape))
      return Bad(InField(i), fmt::format("shape {} does not broadcast to the output's {}", ShapeString(t.shape),
                                         ShapeString(n.output.shape)));
    all = Broadcast(all, t.shape);
  }
  if (all != n.output.shape)
    return Bad("output.shape", fmt::format("{} is not the broadcast {} of the inputs", ShapeString(n.output.shape),
                                           ShapeString(all)));
  return std::nullopt;
}

// ---- reduce: attrs.axes (empty = all dims) removed, or kept as size-1 dims.
Check ReducePair(const Shape& x, const std::string& fx, const Shape& y, const std::string& fy,
                 const std::vector<int>& axes) {
  std::vector<bool> reduced(x.size(), axes.empty());
  for (int a : axes) {
    if (a < 0 || static_cast<size_t>(a) >= x.size() || reduced[static_cast<size_t>(a)])
      return Bad("attrs.axes",
                 fmt::format("axis {} is out of range or repeated for {} of shape {}", a, fx, ShapeString(x)));
    reduced[static_cast<size_t>(a)] = true;
  }
  Shape removed, kept;
  for (size_t j = 0; j < x.size(); ++j) {
    if (!reduced[j]) removed.push_back(x[j]);
    kept.push_back(reduced[j] ? 1 : x[j]);
  }
  if (y == removed || y == kept) return std::nullopt;
  return Bad(fy, fmt::format("shape {} should be {} (or {} keeping reduced dims)", ShapeString(y), ShapeString(removed),
                             ShapeString(kept)));
}
Check Reduce(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 1, 1));
  return ReducePair(In(g, n, 0).shape, "inputs[0]", n.output.shape, "output.shape", n.attrs.axes);
}
// topk: the indices of the k largest entries along the last dim (a router's expert choice): [..., n]
// -> integer [..., k], k <= n.
Check TopK(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 1, 1));
  const Shape& x = In(g, n, 0).shape;
  if (IsFloating(n.output.dtype))
    return Bad("output.dtype", fmt::format("top-k indices need an integer dtype, got {}", DTypeName(n.output.dtype)));
  if (x.empty() || n.output.Rank() != static_cast<int>(x.size()) || n.attrs.axes != std::vector<int>{n.output.Rank() - 1})
    return Bad("output.shape", fmt::format("top-k over the last dim of {} needs the same rank and attrs.axes [{}]",
                                           ShapeString(x), static_cast<int>(x.size()) - 1));
  const int64_t k = n.output.shape.back();
  if (!std::equal(x.begin(), x.end() - 1, n.output.shape.begin()) || k < 1 || k > x.back())
    return Bad("output.shape", fmt::format("shape {} should be {} with the last dim k in [1, {}]",
                                           ShapeString(n.output.shape), ShapeString(x), x.back()));
  return std::nullopt;
}
Check ReduceLinearGrad(const Graph& g, const Node& n) {  // sum_grad/mean_grad: (dY) -> dx
  KIWI_CHECK(Arity(n, 1, 1));
  return ReducePair(n.output.shape, "output.shape", In(g, n, 0).shape, "inputs[0]", n.attrs.axes);
}
Check ReduceMaxGrad(const Graph& g, const Node& n) {  // (dY, x) -> dx
  KIWI_CHECK(Arity(n, 2, 2));
  KIWI_CHECK(ShapeIs(In(g, n, 1).shape, n.output.shape, "inputs[1]"));
  return ReducePair(n.output.shape, "output.shape", In(g, n, 0).shape, "inputs[0]", n.attrs.axes);
}

// ---- softmax family and the loss: shape-preserving over the last dim.
Check Labels(const TensorType& labels, const Shape& logits, const std::string& field) {
  if (IsFloating(labels.dtype))
    return Bad(field, fmt::format("labels need an integer dtype, got {}", DTypeName(labels.dtype)));
  return ShapeIs(labels.shape, Shape(logits.begin(), logits.end() - 1), field);
}
Check SameShapeInputs(const Graph& g, const Node& n, size_t count) {
  KIWI_CHECK(Arity(n, count, count));
  KIWI_CHECK(MinRank(n.output.shape, 1, "output.shape"));
  for (size_t i = 0; i < count; ++i) KIWI_CHECK(ShapeIs(In(g, n, i).shape, n.output.shape, InField(i)));
  return std::nullopt;
}
Check Softmax(const Graph& g, const Node& n) { return SameShapeInputs(g, n, 1); }
Check SoftmaxGrad(const Graph& g, const Node& n) { return SameShapeInputs(g, n, 2); }  // (dY, Y)
Check NllLossGrad(const Graph& g, const Node& n) {  // (labels) -> [..., V], dense
  KIWI_CHECK(Arity(n, 1, 1));
  KIWI_CHECK(MinRank(n.output.shape, 1, "output.shape"));
  return Labels(In(g, n, 0), n.output.shape, "inputs[0]");
}
Check CrossEntropyGrad(const Graph& g, const Node& n) {  // (logits, nll_loss_grad)
  KIWI_CHECK(Arity(n, 2, 2));
  KIWI_CHECK(MinRank(n.output.shape, 1, "output.shape"));
  KIWI_CHECK(ShapeIs(In(g, n, 0).shape, n.output.shape, "inputs[0]"));
  return ShapeIs(In(g, n, 1).shape, n.output.shape, "inputs[1]");
}
Check ScalarOutput(const Graph&, const Node& n) {
  if (n.output.shape.empty()) return std::nullopt;
  return Bad("output.shape", fmt::format("a loss must be a scalar ([]), got {}", ShapeString(n.output.shape)));
}
Check CrossEntropy(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 2, 2));
  KIWI_CHECK(MinRank(In(g, n, 0).shape, 1, "inputs[0]"));
  KIWI_CHECK(Labels(In(g, n, 1), In(g, n, 0).shape, "inputs[1]"));
  return ScalarOutput(g, n);
}

// ---- layernorm (x, gamma, beta) / rmsnorm (x, gamma): gamma and beta are [H], H = last dim of x.
Check NormParams(const Graph& g, const Node& n, size_t first) {
  for (size_t i = first; i < n.inputs.size(); ++i)
    KIWI_CHECK(ShapeIs(In(g, n, i).shape, {n.output.shape.back()}, InField(i)));
  return std::nullopt;
}
Check LayerNorm(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 1, n.op == "rmsnorm" ? 2 : 3));
  KIWI_CHECK(MinRank(n.output.shape, 1, "output.shape"));
  KIWI_CHECK(ShapeIs(In(g, n, 0).shape, n.output.shape, "inputs[0]"));
  return NormParams(g, n, 1);
}
Check NormGradX(const Graph& g, const Node& n) {  // (dY, x[, gamma]) -> dx
  KIWI_CHECK(Arity(n, 2, 3));
  KIWI_CHECK(MinRank(n.output.shape, 1, "output.shape"));
  KIWI_CHECK(ShapeIs(In(g, n, 0).shape, n.output.shape, "inputs[0]"));
  KIWI_CHECK(ShapeIs(In(g, n, 1).shape, n.output.shape, "inputs[1]"));
  return NormParams(g, n, 2);
}
Check NormGradParam(const Graph& g, const Node& n) {  // (dY, x) -> dgamma / dbeta
  KIWI_CHECK(Arity(n, 2, 2));
  const Shape& x = In(g, n, 1).shape;
  KIWI_CHECK(MinRank(x, 1, "inputs[1]"));
  KIWI_CHECK(ShapeIs(In(g, n, 0).shape, x, "inputs[0]"));
  return ShapeIs(n.output.shape, {x.back()}, "output.shape");
}

// ---- batchnorm (x [N, C, ...], gamma [C], beta [C]): statistics per channel (dim 1) over the other dims.
Check ChannelParams(const Graph& g, const Node& n, size_t first, const Shape& x) {
  for (size_t i = first; i < n.inputs.size(); ++i) KIWI_CHECK(ShapeIs(In(g, n, i).shape, {x[1]}, InField(i)));
  return std::nullopt;
}
Check BatchNorm(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 1, 3));
  KIWI_CHECK(MinRank(n.output.shape, 2, "output.shape"));
  KIWI_CHECK(ShapeIs(In(g, n, 0).shape, n.output.shape, "inputs[0]"));
  return ChannelParams(g, n, 1, n.output.shape);
}
Check BatchNormGradX(const Graph& g, const Node& n) {  // (dY, x[, gamma]) -> dx
  KIWI_CHECK(Arity(n, 2, 3));
  KIWI_CHECK(MinRank(n.output.shape, 2, "output.shape"));
  KIWI_CHECK(ShapeIs(In(g, n, 0).shape, n.output.shape, "inputs[0]"));
  KIWI_CHECK(ShapeIs(In(g, n, 1).shape, n.output.shape, "inputs[1]"));
  return ChannelParams(g, n, 2, n.output.shape);
}
Check BatchNormGradParam(const Graph& g, const Node& n) {  // (dY, x) -> dgamma / dbeta [C]
  KIWI_CHECK(Arity(n, 2, 2));
  const Shape& x = In(g, n, 1).shape;
  KIWI_CHECK(MinRank(x, 2, "inputs[1]"));
  KIWI_CHECK(ShapeIs(In(g, n, 0).shape, x, "inputs[0]"));
  return ShapeIs(n.output.shape, {x[1]}, "output.shape");
}

// ---- embedding: (table [V, H], ids [...]) -> [..., H]; its gradient (dY, ids) -> [V, H].
Check Ids(const TensorType& ids, const std::string& field) {
  if (!IsFloating(ids.dtype)) return std::nullopt;
  return Bad(field, fmt::format("ids need an integer dtype, got {}", DTypeName(ids.dtype)));
}
Shape Append(Shape s, int64_t d) {
  s.push_back(d);
  return s;
}
Check Embedding(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 2, 2));
  const TensorType& table = In(g, n, 0);
  if (table.Rank() != 2)
    return Bad("inputs[0]", fmt::format("table needs rank 2 ([V, H]), got {}", ShapeString(table.shape)));
  if (table.dtype != n.output.dtype)
    return Bad("inputs[0]", fmt::format("dtype {} differs from the output's {}", DTypeName(table.dtype),
                                        DTypeName(n.output.dtype)));
  KIWI_CHECK(Ids(In(g, n, 1), "inputs[1]"));
  return ShapeIs(n.output.shape, Append(In(g, n, 1).shape, table.shape[1]), "output.shape");
}
Check EmbeddingGrad(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 2, 2));
  if (n.output.Rank() != 2)
    return Bad("output.shape", fmt::format("needs rank 2 ([V, H]), got {}", ShapeString(n.output.shape)));
  KIWI_CHECK(Ids(In(g, n, 1), "inputs[1]"));
  return ShapeIs(In(g, n, 0).shape, Append(In(g, n, 1).shape, n.output.shape[1]), "inputs[0]");
}

// ---- layout ops.
Check Reshape(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 1, 1));
  const TensorType& x = In(g, n, 0);
  if (x.NumElements() != n.output.NumElements())
    return Bad("output.shape", fmt::format("{} has {} elements, inputs[0] {} has {}", ShapeString(n.output.shape),
                                           n.output.NumElements(), ShapeString(x.shape), x.NumElements()));
  return AllDTypesMatch(g, n);
}
// concat: the inputs joined along the last dim, each broadcast over the leading dims (a size-1 dim
// expands: MLA's one rotary key head beside every head's own key features); concat_grad (dY) -> one
// input's slice of dY's last dim, with dY's leading dims (the backward sums broadcast ones away).
Check Concat(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 2, kAny));
  KIWI_CHECK(AllDTypesMatch(g, n));
  const Shape& out = n.output.shape;
  KIWI_CHECK(MinRank(out, 1, "output.shape"));
  int64_t last = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Shape& x = In(g, n, i).shape;
    bool fits = x.size() == out.size();
    for (size_t d = 0; fits && d + 1 < x.size(); ++d) fits = x[d] == out[d] || x[d] == 1;
    if (!fits)
      return Bad(InField(i), fmt::format("shape {} does not broadcast to the output's {} but for the last dim",
                                         ShapeString(x), ShapeString(out)));
    last += x.back();
  }
  if (last != out.back())
    return Bad("output.shape", fmt::format("last dim {} is not the inputs' {} together", out.back(), last));
  return std::nullopt;
}
Check ConcatGrad(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 1, 1));
  KIWI_CHECK(AllDTypesMatch(g, n));
  const Shape& dy = In(g, n, 0).shape;
  const Shape& out = n.output.shape;
  KIWI_CHECK(MinRank(dy, 1, "inputs[0]"));
  if (out.size() != dy.size() || !std::equal(out.begin(), out.end() - 1, dy.begin()) || out.back() > dy.back())
    return Bad("output.shape", fmt::format("{} is not a slice of the last dim of inputs[0] {}", ShapeString(out),
                                           ShapeString(dy)));
  return std::nullopt;
}
Check Transpose(const Graph& g, const Node& n) {
  KIWI_CHECK(Arity(n, 1, 1));
  const Shape& x = In(g, n, 0).shape;
  std::vector<int> sorted = n.attrs.axes;
  std::sort(sorted.begin(), sorted.end());
  for (size_t j = 0; j < sorted.size(); ++j)
    if (sorted[j] != static_cast<int>(j)) sorted.clear();
  if (sorted.size() != x.size() || n.attrs.axes.size() != x.size())
    return Bad("attrs.axes", fmt::format("[{}] is not a permutation of the {} dims of inputs[0]",
                                         fmt::join(n.attrs.axes, ", "), x.size()));
  Shape y;
  for (int a : n.attrs.axes) y.push_back(x[static_cast<size_t>(a)]);
  KIWI_CHECK(ShapeIs(n.output.shape, y, "output.shape"));
  return AllDTypesMatch(g, n);
}
Check Random(const Graph&, const Node& n) {
  KIWI_CHECK(Arity(n, 0, 0));
  if (n.attrs.dropout_p >= 0.0 && n.attrs.dropout_p < 1.0) return std::nullopt;
  return Bad("attrs.dropout_p", fmt::format("must be in [0, 1), got {}", n.attrs.dropout_p));
}

using CheckFn = Check (*)(const Graph&, const Node&);
struct Rule {
  OpKind kind;
  std::string_view op;  // "" = the kind's default rule
  CheckFn check;
};

constexpr auto kRules = std::to_array<Rule>({
    {OpKind::kInput, "", NoInputs},
    {OpKind::kParameter, "", NoInputs},
    {OpKind::kOptimizerState, "", NoInputs},
    {OpKind::kRandom, "", Random},
    {OpKind::kMatmul, "", Matmul},
    {OpKind::kMatmul, "matmul_grad_a", MatmulGradA},
    {OpKind::kMatmul, "matmul_grad_b", MatmulGradB},
    {OpKind::kBatchMatmul, "", BatchMatmul},
    {OpKind::kBatchMatmul, "batch_matmul_grad_a", BatchMatmulGradA},
    {OpKind::kBatchMatmul, "batch_matmul_grad_b", BatchMatmulGradB},
    {OpKind::kConv, "", Conv},
    {OpKind::kConv, "conv2d_grad_x", ConvGradX},
    {OpKind::kConv, "conv2d_grad_w", ConvGradW},
    {OpKind::kPool, "", Pool},
    {OpKind::kPool, "max_pool_grad", MaxPoolGrad},
    {OpKind::kPool, "avg_pool_grad", AvgPoolGrad},
    {OpKind::kElementwise, "", Elementwise},
    {OpKind::kReduce, "", Reduce},
    {OpKind::kReduce, "topk", TopK},
    {OpKind::kReduce, "sum_grad", ReduceLinearGrad},
    {OpKind::kReduce, "mean_grad", ReduceLinearGrad},
    {OpKind::kReduce, "max_grad", ReduceMaxGrad},
    {OpKind::kAttention, "", Attention},
    {OpKind::kAttention, "attention_grad_q", AttentionGradQ},
    {OpKind::kAttention, "attention_grad_k", AttentionGradK},
    {OpKind::kAttention, "attention_grad_v", AttentionGradV},
    {OpKind::kSoftmax, "", Softmax},
    {OpKind::kSoftmax, "softmax_grad", SoftmaxGrad},
    {OpKind::kSoftmax, "cross_entropy_grad", CrossEntropyGrad},
    {OpKind::kSoftmax, "nll_loss_grad", NllLossGrad},
    {OpKind::kLayerNorm, "", LayerNorm},
    {OpKind::kLayerNorm, "layernorm_grad_x", NormGradX},
    {OpKind::kLayerNorm, "rmsnorm_grad_x", NormGradX},
    {OpKind::kLayerNorm, "layernorm_grad_gamma", NormGradParam},
    {OpKind::kLayerNorm, "layernorm_grad_beta", NormGradParam},
    {OpKind::kLayerNorm, "rmsnorm_grad_gamma", NormGradParam},
    {OpKind::kLayerNorm, "batchnorm", BatchNorm},
    {OpKind::kLayerNorm, "batchnorm_grad_x", BatchNormGradX},
    {OpKind::kLayerNorm, "batchnorm_grad_gamma", BatchNormGradParam},
    {OpKind::kLayerNorm, "batchnorm_grad_beta", BatchNormGradParam},
    {OpKind::kEmbedding, "", Embedding},
    {OpKind::kEmbedding, "embedding_grad", EmbeddingGrad},
    {OpKind::kReshape, "", Reshape},
    {OpKind::kReshape, "concat", Concat},
    {OpKind::kReshape, "concat_grad", ConcatGrad},
    {OpKind::kTranspose, "", Transpose},
    {OpKind::kLoss, "", ScalarOutput},
    {OpKind::kLoss, "cross_entropy", CrossEntropy},
    {OpKind::kCollective, "", Anything},
    {OpKind::kOptimizer, "", Anything},
    {OpKind::kOpaque, "", Anything},
});

#undef KIWI_CHECK

}  // namespace

std::optional<Problem> CheckNodeShapes(const Graph& graph, const Node& node) {
  const Rule* fallback = nullptr;
  for (const Rule& rule : kRules) {
    if (rule.kind != node.kind) continue;
    if (rule.op == node.op && !rule.op.empty()) return rule.check(graph, node);
    if (rule.op.empty()) fallback = &rule;
  }
  return fallback ? fallback->check(graph, node) : std::nullopt;
}

}  // namespace kiwi::ir::internal
