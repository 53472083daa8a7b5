#pragma once
// The coarse category of an operator. The cost model keys efficiencies on it; verification and the
// backward builder dispatch on (kind, op) through tables of small handlers.
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiwi::ir {

enum class OpKind : uint8_t {
  kInput,           // training data; no inputs, never recomputed away (it is given)
  kParameter,       // a weight; always resident
  kOptimizerState,  // Adam moments, fp32 master weights; always resident
  kMatmul,          // A[..., M, K] x B[K, N] (+ optional bias[N]) -> [..., M, N]
  kBatchMatmul,     // A[..., M, K] x B[..., K, N] -> [..., M, N], batch dims equal
  kConv,            // x[N, C, H, W] x w[O, C, kh, kw] -> [N, O, H', W']
  kPool,            // spatial window reduction, x[N, C, H, W] -> [N, C, H', W']
  kElementwise,     // same-shape or broadcast inputs -> output (op: add, mul, gelu, relu, ...)
  kReduce,          // reduction over attrs.axes (op: sum, mean, max)
  kSoftmax,         // (scaled, masked) softmax over the last dim; shape-preserving
  kLayerNorm,       // x, [gamma, beta] -> normalized x (op: layernorm, rmsnorm)
  kEmbedding,       // table[V, H], ids[...] -> [..., H]
  kReshape,         // same number of elements, new shape
  kTranspose,       // permutation of dims (attrs.axes)
  kRandom,          // random mask generation (dropout masks); no inputs
  kLoss,            // scalar loss
  kCollective,      // explicit communication op
  kOptimizer,       // the optimizer update that consumes all parameter gradients
  kAttention,       // fused scaled-dot-product attention (FlashAttention): q, k, v -> output; no scores in memory
  kOpaque,          // unknown computation from a profiled graph file
};

std::string_view OpKindName(OpKind kind);                  // "matmul", "batch_matmul", ...
std::optional<OpKind> ParseOpKind(std::string_view name);  // inverse of OpKindName
inline constexpr int kNumOpKinds = static_cast<int>(OpKind::kOpaque) + 1;

}  // namespace kiwi::ir
