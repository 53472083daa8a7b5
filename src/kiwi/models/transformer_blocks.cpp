// Transformer building blocks: linear layers, norms, multi-head attention, MLPs and the layer that
// composes them (Megatron-LM layout; dropout sites as in Korthikanti et al. 2022, Fig. 2/eq. 1).
#include <algorithm>
#include <cmath>
#include <string>

#include "kiwi/models/builder.h"

namespace kiwi::models::detail {

NodeId Linear(GraphBuilder& gb, const std::string& name, NodeId x, int64_t out, bool bias) {
  const int64_t in = gb.shape(x).back();
  NodeId w = gb.Parameter(name + ".weight", {in, out});
  NodeId b = bias ? gb.Parameter(name + ".bias", {out}) : ir::kNoNode;
  return Matmul(gb, name, x, w, b);
}

NodeId Norm(GraphBuilder& gb, const std::string& name, NodeId x, NormKind kind) {
  const int64_t h = gb.shape(x).back();
  NodeId gamma = gb.Parameter(name + ".gamma", {h});
  if (kind == NormKind::kRmsNorm) {
    return gb.Add(ir::OpKind::kLayerNorm, "rmsnorm", name, {x, gamma}, {gb.dtype(), gb.shape(x)});
  }
  if (kind == NormKind::kEagerRmsNorm) {
    NodeId normalized = gb.Add(ir::OpKind::kLayerNorm, "rmsnorm", name + "_normalized", {x}, {gb.dtype(), gb.shape(x)});
    return Binary(gb, "mul", name, normalized, gamma);
  }
  NodeId beta = gb.Parameter(name + ".beta", {h});
  return gb.Add(ir::OpKind::kLayerNorm, "layernorm", name, {x, gamma, beta}, {gb.dtype(), gb.shape(x)});
}

namespace {

// [B, s, n*g*d] -> [B, n, g*s, d]: n key/value heads, each shared by g query heads (g = 1: [B, a, s, d]).
NodeId SplitHeads(GraphBuilder& gb, const std::string& name, NodeId x, int64_t n, int64_t g, int64_t d) {
  const int64_t batch = gb.shape(x)[0];
  const int64_t s = gb.shape(x)[1];
  if (g == 1) {
    NodeId r = Reshape(gb, name + "_split", x, {batch, s, n, d});
    return Transpose(gb, name + "_heads", r, {0, 2, 1, 3});
  }
  // Grouped-query attention: each K/V head attends for its g query heads as one [g*s, d] block.
  NodeId r = Reshape(gb, name + "_split", x, {batch, s, n, g, d});
  NodeId t = Transpose(gb, name + "_heads", r, {0, 2, 3, 1, 4});
  return Reshape(gb, name + "_groups", t, {batch, n, g * s, d});
}

// Inverse of SplitHeads: [B, n, g*s, d] -> [B, s, n*g*d].
NodeId MergeHeads(GraphBuilder& gb, const std::string& name, NodeId x, int64_t g) {
  const Shape& in = gb.shape(x);
  const int64_t batch = in[0], n = in[1], s = in[2] / g, d = in[3];
  if (g == 1) {
    NodeId t = Transpose(gb, name + "_merge", x, {0, 2, 1, 3});
    return Reshape(gb, name, t, {batch, s, n * d});
  }
  NodeId r = Reshape(gb, name + "_groups", x, {batch, n, g, s, d});
  NodeId t = Transpose(gb, name + "_merge", r, {0, 3, 1, 2, 4});
  return Reshape(gb, name, t, {batch, s, n * g * d});
}

// Qwen3's QK norm: an RMSNorm over each head's d features of x [B, s, n*d].
NodeId HeadNorm(GraphBuilder& gb, const std::string& name, NodeId x, int64_t n, int64_t d) {
  const Shape shape = gb.shape(x);
  NodeId heads = Reshape(gb, name + "_heads", x, {shape[0], shape[1], n, d});
  return Reshape(gb, name + "_merged", Norm(gb, name, heads, NormKind::kRmsNorm), shape);
}

// Multi-head latent attention's projections of x [B, s, h] (DeepSeek-V2's q_a/q_b and kv_a_proj_with_mqa,
// kv_b_proj, each of the last two as two linears: the latent and the shared rotary key head; the keys'
// and the values' up-projections): queries [B, s, a (nope + rope)], keys (every head's own features and
// the shared rotary head, joined) likewise, values [B, s, a v].
struct Projections {
  NodeId q, k, v;
};
Projections LatentProjections(GraphBuilder& gb, NodeId x, const AttentionOptions& options) {
  const LatentAttention& m = options.mla;
  const int64_t a = options.heads, qk = m.nope + m.rope;
  const Shape in = gb.shape(x);
  NodeId q = m.q_rank > 0 ? Linear(gb, "q_b", Norm(gb, "q_a_norm", Linear(gb, "q_a", x, m.q_rank, false), NormKind::kRmsNorm),
                                   a * qk, false)
                          : Linear(gb, "q", x, a * qk, false);
  q = Unary(gb, "rotary", "q_rotary", q);  // on the rope features of each head (priced on all: elementwise)
  NodeId latent = Norm(gb, "kv_a_norm", Linear(gb, "kv_a", x, m.kv_rank, false), NormKind::kRmsNorm);
  NodeId k_rope = Unary(gb, "rotary", "k_rotary", Linear(gb, "k_rope", x, m.rope, false));
  NodeId k_nope = Linear(gb, "k_b", latent, a * m.nope, false);
  NodeId k = Concat(gb, "k_joined", {Reshape(gb, "k_nope_heads", k_nope, {in[0], in[1], a, m.nope}),
                                    Reshape(gb, "k_rope_head", k_rope, {in[0], in[1], 1, m.rope})});
  return {q, Reshape(gb, "k", k, {in[0], in[1], a * qk}), Linear(gb, "v_b", latent, a * m.v, false)};
}

}  // namespace

NodeId Attention(GraphBuilder& gb, NodeId x_q, NodeId x_kv, const AttentionOptions& options) {
  const int64_t h = gb.shape(x_q).back();
  const bool latent = options.mla.enabled();
  const int64_t d = latent ? options.mla.nope + options.mla.rope : options.head_dim > 0 ? options.head_dim : h / options.heads;
  const int64_t dv = latent ? options.mla.v : d;
  const int64_t groups = options.heads / options.kv_heads;
  NodeId q, k, v;
  if (latent) {
    const Projections p = LatentProjections(gb, x_q, options);
    q = p.q, k = p.k, v = p.v;
  } else {
    // Separate q/k/v projections (no fused qkv: the IR has no split op).
    const bool qkv_bias = options.bias || options.qkv_bias;
    q = Linear(gb, "q", x_q, options.heads * d, qkv_bias);
    k = Linear(gb, "k", x_kv, options.kv_heads * d, qkv_bias);
    v = Linear(gb, "v", x_kv, options.kv_heads * d, qkv_bias);
    if (options.qk_norm) {
      q = HeadNorm(gb, "q_norm", q, options.heads, d);
      k = HeadNorm(gb, "k_norm", k, options.kv_heads, d);
    }
    if (options.rotary) {
      q = Unary(gb, "rotary", "q_rotary", q);
      k = Unary(gb, "rotary", "k_rotary", k);
    }
  }
  NodeId qh = SplitHeads(gb, "q", q, options.kv_heads, groups, d);
  NodeId kh = SplitHeads(gb, "k", k, options.kv_heads, 1, d);
  NodeId vh = SplitHeads(gb, "v", v, options.kv_heads, 1, dv);
  NodeId context;
  if (options.fused) {  // FlashAttention regenerates its dropout mask in the backward pass: none is kept
    ir::OpAttrs attrs;
    attrs.causal = options.causal;
    attrs.dropout_p = options.dropout_p;  // drawn inside the kernel; its rate depends on it (cost/profile.h)
    Shape shape = gb.shape(qh);
    shape.back() = dv;
    context = gb.Add(ir::OpKind::kAttention, "attention", "attention", {qh, kh, vh}, {gb.dtype(), std::move(shape)}, attrs);
  } else {
    NodeId scores = BatchMatmul(gb, "scores", qh, kh, /*transpose_b=*/true);
    if (options.score_bias != ir::kNoNode) scores = Binary(gb, "add", "scores_bias", scores, options.score_bias);
    NodeId probs = Softmax(gb, "softmax", scores);  // fused scale + mask + softmax
    probs = Dropout(gb, "attn_dropout", probs, options.dropout_p);
    context = BatchMatmul(gb, "context", probs, vh, /*transpose_b=*/false);
  }
  NodeId merged = MergeHeads(gb, "context", context, groups);
  NodeId out = Linear(gb, "out", merged, h, options.bias);
  return Dropout(gb, "out_dropout", out, options.dropout_p);
}

NodeId MoeFeedForward(GraphBuilder& gb, NodeId x, const MlpOptions& options) {
  const Shape in = gb.shape(x);
  const int64_t h = in.back(), tokens = in[0] * in[1], e = options.experts, k = options.top_k;
  NodeId rows = Reshape(gb, "tokens", x, {tokens, h});
  NodeId probs = Softmax(gb, "router_probs", Linear(gb, "router", rows, e, false));
  ir::OpAttrs last;
  last.axes = {1};
  NodeId choice = gb.Add(ir::OpKind::kReduce, "topk", "topk", {probs}, {ir::DType::kI64, {tokens, k}}, last);
  // Each token's k probabilities: a gather from the flattened [T*E, 1] probabilities.
  NodeId gates = Embedding(gb, "gates", Reshape(gb, "probs_flat", probs, {tokens * e, 1}), choice);
  // The token in each of an expert's ceil(c T k / E) slots (c the capacity factor; at most every token
  // once), in expert order: the permutation Megatron's dispatcher sorts out of the routing (the last
  // slots padding where E does not divide c T k), as a top-k over each expert's column of the
  // probabilities.
  const int64_t capacity =
      options.capacity_factor == 1.0
          ? (tokens * k + e - 1) / e
          : std::min(tokens, static_cast<int64_t>(std::ceil(options.capacity_factor * static_cast<double>(tokens * k) /
                                                            static_cast<double>(e) - 1e-9)));
  NodeId slots = gb.Add(ir::OpKind::kReduce, "topk", "slots", {Transpose(gb, "by_expert", probs, {1, 0})},
                        {ir::DType::kI64, {e, capacity}}, last);
  NodeId grouped = Embedding(gb, "dispatch", rows, slots);
  const auto expert_linear = [&](const std::string& name, NodeId input, int64_t out) {
    return BatchMatmul(gb, name, input, gb.Parameter(name + ".weight", {e, gb.shape(input).back(), out}), false);
  };
  NodeId gate = expert_linear("experts.gate", grouped, options.ffn);
  NodeId up = expert_linear("experts.up", grouped, options.ffn);
  NodeId hidden = Binary(gb, "mul", "experts.gated", Unary(gb, "silu", "experts.act", gate), up);
  NodeId expert_rows = Reshape(gb, "expert_rows", expert_linear("experts.down", hidden, h), {e * capacity, h});
  NodeId weighted = Binary(gb, "mul", "weighted", Embedding(gb, "combine", expert_rows, choice), gates);
  NodeId combined = gb.Add(ir::OpKind::kReduce, "sum", "combined", {weighted}, {gb.dtype(), {tokens, h}}, last);
  if (options.shared_expert_ffn > 0) {
    MlpOptions dense{.ffn = options.shared_expert_ffn, .activation = Activation::kSwiGlu, .bias = false};
    NodeId shared = FeedForward(gb, rows, dense);
    if (options.shared_expert_gate) {
      NodeId gate = Unary(gb, "sigmoid", "shared_gate_act", Linear(gb, "shared_gate", rows, 1, false));
      shared = Binary(gb, "mul", "shared_gated", shared, gate);
    }
    combined = Binary(gb, "add", "with_shared", combined, shared);
  }
  return Dropout(gb, "dropout", Reshape(gb, "output", combined, in), options.dropout_p);
}

NodeId FeedForward(GraphBuilder& gb, NodeId x, const MlpOptions& options) {
  if (options.experts > 0) return MoeFeedForward(gb, x, options);
  const int64_t h = gb.shape(x).back();
  NodeId hidden;
  if (options.activation == Activation::kSwiGlu) {
    NodeId gate = Linear(gb, "gate", x, options.ffn, options.bias);
    NodeId up = Linear(gb, "up", x, options.ffn, options.bias);
    hidden = Binary(gb, "mul", "gated", Unary(gb, "silu", "act", gate), up);
  } else if (options.activation == Activation::kNewGelu) {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) as transformers' NewGELUActivation runs it: autograd
    // keeps x (pow's input), tanh's output, 0.5 x and 1 + tanh (the product's operands), three tensors of
    // the MLP's width more than a fused GELU (read op by op on HF GPT-2, docs/distributed.md). The
    // polynomial is one op whose backward reads x; kiwi's tanh keeps its input, the same size as torch's output.
    NodeId fc1 = Linear(gb, "fc1", x, options.ffn, options.bias);
    NodeId t = Unary(gb, "tanh", "act_tanh", Unary(gb, "tanh", "act_poly", fc1));
    hidden = Binary(gb, "mul", "act", Unary(gb, "scale", "act_half", fc1), Unary(gb, "scale", "act_one_plus", t));
  } else {
    NodeId fc1 = Linear(gb, "fc1", x, options.ffn, options.bias);
    hidden = Unary(gb, options.activation == Activation::kGelu ? "gelu" : "relu", "act", fc1);
  }
  NodeId fc2 = Linear(gb, options.activation == Activation::kSwiGlu ? "down" : "fc2", hidden, h, options.bias);
  return Dropout(gb, "dropout", fc2, options.dropout_p);
}

namespace {

// Residual sublayer: pre-LN x + f(norm(x)), or post-LN norm(x + f(x)).
template <typename F>
NodeId Sublayer(GraphBuilder& gb, NodeId x, NormKind norm, bool pre_norm, F&& body) {
  if (pre_norm) return Binary(gb, "add", "residual", x, body(Norm(gb, "norm", x, norm)));
  return Norm(gb, "norm", Binary(gb, "add", "residual", x, body(x)), norm);
}

}  // namespace

NodeId TransformerLayer(GraphBuilder& gb, int32_t layer, NodeId x, const LayerOptions& options, NodeId memory) {
  const std::string prefix = "layer" + std::to_string(layer);
  gb.Enter(layer, prefix + ".attn");
  x = Sublayer(gb, x, options.norm, options.pre_norm,
               [&](NodeId h) { return Attention(gb, h, h, options.self_attn); });
  if (options.cross_attention) {
    gb.Enter(layer, prefix + ".cross_attn");
    x = Sublayer(gb, x, options.norm, options.pre_norm,
                 [&](NodeId h) { return Attention(gb, h, memory, options.cross_attn); });
  }
  gb.Enter(layer, prefix + ".mlp");
  return Sublayer(gb, x, options.norm, options.pre_norm, [&](NodeId h) { return FeedForward(gb, h, options.mlp); });
}

}  // namespace kiwi::models::detail
