#pragma once
// Internal to the model zoo: a small forward-graph builder that stamps every node with the current
// layer and scope, the primitive ops of the IR vocabulary (BRIEFING / ir/backward.h), and the
// transformer building blocks (attention, MLP, norms) the family builders compose.
//
//   GraphBuilder gb("gpt", DType::kBF16);
//   gb.Enter(3, "layer3.attn");
//   NodeId y = Linear(gb, "q", x, 1024, true);   // "layer3.attn.q", layer 3
//   Result<Graph> g = gb.Finish();               // annotates flops/bytes and verifies
#include <cstdint>
#include <string>
#include <vector>

#include "kiwi/ir/graph.h"
#include "kiwi/models/transformer.h"
#include "kiwi/util/result.h"

namespace kiwi::models::detail {

using ir::NodeId;
using ir::Shape;

inline constexpr int64_t kImageChannels = 3;  // ViT/Swin RGB input
inline constexpr int64_t kT5Buckets = 32;     // T5's relative_attention_num_buckets

class GraphBuilder {
 public:
  GraphBuilder(std::string graph_name, ir::DType dtype);

  // Nodes added from now on belong to `layer` (-1: none) and get names "<scope>.<local name>".
  void Enter(int32_t layer, std::string scope);
  int32_t layer() const { return layer_; }
  ir::DType dtype() const { return dtype_; }
  const Shape& shape(NodeId id) const { return graph_.node(id).output.shape; }
  ir::DType dtype_of(NodeId id) const { return graph_.node(id).output.dtype; }  // a node's output dtype

  NodeId Add(ir::OpKind kind, std::string op, const std::string& name, std::vector<NodeId> inputs,
             ir::TensorType output, ir::OpAttrs attrs = {});
  NodeId Input(const std::string& name, ir::DType dtype, Shape shape);
  NodeId Parameter(const std::string& name, Shape shape);  // in the model's dtype

  // Annotates flops/bytes (ir::AnnotateFlopsAndBytes) and verifies (ir::VerifyGraph).
  Result<ir::Graph> Finish() &&;

 private:
  ir::Graph graph_;
  ir::DType dtype_;
  int32_t layer_ = -1;
  std::string scope_;
};

// ---- Primitive ops (graph_builder.cpp). Shapes are inferred; inputs are assumed consistent. ----
NodeId Matmul(GraphBuilder& gb, const std::string& name, NodeId a, NodeId b, NodeId bias = ir::kNoNode,
              bool transpose_b = false);
NodeId BatchMatmul(GraphBuilder& gb, const std::string& name, NodeId a, NodeId b, bool transpose_b);
NodeId Binary(GraphBuilder& gb, const std::string& op, const std::string& name, NodeId a, NodeId b);
NodeId Unary(GraphBuilder& gb, const std::string& op, const std::string& name, NodeId x);
NodeId Reshape(GraphBuilder& gb, const std::string& name, NodeId x, Shape shape);
NodeId Transpose(GraphBuilder& gb, const std::string& name, NodeId x, std::vector<int> axes);
// Joined along the last dim, size-1 leading dims broadcast to the others' (kReshape "concat").
NodeId Concat(GraphBuilder& gb, const std::string& name, std::vector<NodeId> parts);
NodeId Softmax(GraphBuilder& gb, const std::string& name, NodeId scores);
// kRandom "dropout_mask" (u8) + elementwise "mul"; returns x unchanged when p == 0.
NodeId Dropout(GraphBuilder& gb, const std::string& name, NodeId x, double p);
NodeId Embedding(GraphBuilder& gb, const std::string& name, NodeId table, NodeId ids);
NodeId Conv2d(GraphBuilder& gb, const std::string& name, NodeId x, NodeId w, NodeId bias, int64_t stride);
NodeId ReduceMean(GraphBuilder& gb, const std::string& name, NodeId x, int axis);
NodeId CrossEntropy(GraphBuilder& gb, const std::string& name, NodeId logits, NodeId labels);

// ---- Building blocks (transformer_blocks.cpp) ----
// kEagerRmsNorm: HuggingFace's RMSNorm (LlamaRMSNorm and its copies), weight * (x * rsqrt(mean(x^2) +
// eps)) in eager ops: the normalized x is kept for the weight's gradient beside the output, two
// tensors where a fused rmsnorm keeps one ("<name>_normalized", then "<name>" = it times the weight).
enum class NormKind : uint8_t { kLayerNorm, kRmsNorm, kEagerRmsNorm };

// x[..., in] x W[in, out] (+ b[out]); parameters "<name>.weight" / "<name>.bias".
NodeId Linear(GraphBuilder& gb, const std::string& name, NodeId x, int64_t out, bool bias);
// layernorm(x, gamma, beta) or rmsnorm(x, gamma) over the last dim.
NodeId Norm(GraphBuilder& gb, const std::string& name, NodeId x, NormKind kind);

struct AttentionOptions {
  int64_t heads = 1;
  int64_t kv_heads = 1;          // < heads: grouped-query attention (query groups share K/V)
  bool bias = true;              // biases on the q/k/v/out projections
  bool rotary = false;           // elementwise "rotary" on q and k (Llama)
  double dropout_p = 0.0;        // attention-probability and output-projection dropout
  NodeId score_bias = ir::kNoNode;  // [heads, sq, sk], added to the scores (T5/Swin relative positions)
  bool fused = false;            // one kAttention op (FlashAttention; no score_bias) instead of the scores
  bool causal = false;           // queries attend to keys up to their own position (GPT, Llama)
  int64_t head_dim = 0;          // 0 = hidden / heads
  bool qk_norm = false;          // RMSNorm over each query and key head (Qwen3)
  bool qkv_bias = false;         // biases on q/k/v even without `bias` (Qwen2)
  LatentAttention mla = {};      // enabled: multi-head latent attention (self-attention, no biases)
};

// Multi-head attention of x_q [B, sq, h] over x_kv [B, sk, h] (the same node for self-attention):
// separate q/k/v projections, heads split as [B, a, s, d], scores = batch_matmul(q, k^T), fused
// scale+mask softmax, dropout, context = batch_matmul(p, v), heads merged, output projection,
// dropout (Megatron placement); fused: one kAttention op (its dropout inside, no mask kept) in place of
// scores, softmax, dropout and context. With `mla` (self-attention): the latent projections of
// DeepSeek's multi-head latent attention in place of q/k/v (the keys joined by a concat from every head's
// own features and one shared rotary head), values of their own width. Returns the [B, sq, h] output
// before the residual add.
NodeId Attention(GraphBuilder& gb, NodeId x_q, NodeId x_kv, const AttentionOptions& options);

// kNewGelu: HuggingFace's NewGELUActivation ("gelu_new", GPT-2's), the tanh approximation written as
// eager arithmetic, whose autograd keeps more than a fused GELU's input (FeedForward).
enum class Activation : uint8_t { kGelu, kRelu, kSwiGlu, kNewGelu };

struct MlpOptions {
  int64_t ffn = 0;
  Activation activation = Activation::kGelu;
  bool bias = true;
  double dropout_p = 0.0;  // after the second matmul (Megatron placement)
  int64_t experts = 0;     // > 0: a mixture of that many SwiGLU experts of width ffn (MoeFeedForward)
  int64_t top_k = 0;
  int64_t shared_expert_ffn = 0;  // with experts: a shared SwiGLU expert of this width (Qwen2-MoE, DeepSeek)
  bool shared_expert_gate = true;  // its output scaled by a sigmoid gate (Qwen2-MoE) or added as it is (DeepSeek)
  double capacity_factor = 1.0;   // with experts: each expert's slots per its even share of the routed rows
};

// fc1 -> activation -> fc2 -> dropout; SwiGLU: down(silu(gate(x)) * up(x)); with experts, MoeFeedForward.
NodeId FeedForward(GraphBuilder& gb, NodeId x, const MlpOptions& options);

// A dropless top-k mixture of SwiGLU experts over x [B, s, h] (Shazeer et al. 2017; Mixtral, Jiang et
// al. 2024): router linear [h, E] and softmax, the top_k indices per token, the (token, expert) rows
// gathered in expert order (Megatron's token permutation) as E groups of ceil(T*k/E) rows (an even
// load), batched expert matmuls [E, h, f], and each token's k rows gathered back and summed, weighted by
// their router probabilities; with a shared expert, plus that dense SwiGLU's output times
// sigmoid(x w_gate) (or ungated).
NodeId MoeFeedForward(GraphBuilder& gb, NodeId x, const MlpOptions& options);

struct LayerOptions {
  NormKind norm = NormKind::kLayerNorm;
  bool pre_norm = true;           // false: post-LN (original BERT)
  AttentionOptions self_attn;
  bool cross_attention = false;   // T5 decoder: cross-attention over `memory`
  AttentionOptions cross_attn;
  MlpOptions mlp;
};

// One transformer layer with Node::layer = `layer` and scopes "layer{i}.attn", "layer{i}.cross_attn",
// "layer{i}.mlp". x and the result are [B, s, h].
NodeId TransformerLayer(GraphBuilder& gb, int32_t layer, NodeId x, const LayerOptions& options,
                        NodeId memory = ir::kNoNode);

// ---- Families (transformer.cpp, swin.cpp) ----
// Structural validation of a config (kBadInput "SOURCE: FIELD: ..."; an HF config's errors name its
// file); BuildTransformerForward runs it.
Status ValidateTransformerConfig(const TransformerConfig& config, std::string_view source = "model config");
std::string FamilyName(Family family);
int64_t FfnSize(const TransformerConfig& config);   // config.ffn, or 4 * hidden
// DeepSeek's MLP layout (presets and --hf-config alike): `dense` first layers of a dense SwiGLU `dense_ffn`
// wide, then `experts` routed experts (top k) and `shared` ungated shared experts, each `width` wide.
void SetDeepSeekExperts(TransformerConfig& config, int dense, int64_t dense_ffn, int64_t experts, int64_t top_k,
                        int64_t shared, int64_t width);
int64_t KvHeads(const TransformerConfig& config);   // config.kv_heads, or heads
int64_t DecoderSeq(const TransformerConfig& config);  // config.decoder_seq, or seq
// Labels shaped like the logits without their last dim, then the cross-entropy loss (scope "head").
NodeId LossHead(GraphBuilder& gb, NodeId logits, bool in_fp32 = false);

// Swin: per-stage geometry, validation and builder (swin.cpp).
struct SwinStage {
  int64_t dim = 0, heads = 0, resolution = 0, window = 0;
  int depth = 0;
};
std::vector<SwinStage> SwinStages(const TransformerConfig& config);
Status ValidateSwin(const TransformerConfig& config);
Result<ir::Graph> BuildSwinForward(const TransformerConfig& config);
int64_t SwinParameterCount(const TransformerConfig& config);

}  // namespace kiwi::models::detail
