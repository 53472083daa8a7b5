#pragma once
// Operator-level builders for transformer models: individual matmuls (with fused bias), head
// transposes, batched matmuls for scores and context, fused scale+mask softmax (or one fused attention
// op, AttentionKernel), dropout (a kRandom
// mask + multiply), layernorm/rmsnorm, GELU/SwiGLU, residual adds; embeddings, final norm, LM/class
// head and loss. Node::layer is set per transformer layer and Node::scope to "layer{i}.attn" etc.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kiwi/ir/graph.h"
#include "kiwi/util/result.h"

namespace kiwi::models {

enum class Family : uint8_t {
  kGpt,   // decoder-only, causal self-attention, learned positions, GELU MLP
  kBert,  // encoder, bidirectional self-attention
  kT5,    // encoder + decoder with cross-attention, relative position bias, ReLU MLP, RMS-style norm
  kVit,   // patch embedding (conv) + encoder + classification head
  kSwin,  // hierarchical stages of windowed attention with patch merging
  kLlama, // decoder-only, RMSNorm, SwiGLU, rotary positions, no biases, no dropout
};

// How attention runs: materialized (scores and probabilities as [s, s] tensors per head, kept for the
// backward pass: Megatron-LM's fused softmax) or fused (FlashAttention: one kernel that never writes
// the scores; PyTorch's scaled_dot_product_attention on GPUs). Auto: fused for 16-bit models, whose
// kernels exist, except T5 and Swin, whose relative position bias needs the scores' gradient.
enum class AttentionKernel : uint8_t { kAuto, kMaterialized, kFused };
std::optional<AttentionKernel> ParseAttentionKernel(std::string_view name);  // auto | materialized | fused
std::string_view AttentionKernelName(AttentionKernel kernel);

// Multi-head latent attention (DeepSeek-V2, DeepSeek-AI 2024 §2.1; DeepSeek-V3): each token's keys and
// values come from a kv_rank-wide latent (normalized, then up-projected per head), its queries from a
// q_rank-wide latent (0: one projection, as DeepSeek-V2-Lite); each head's query and key have `nope`
// features of their own and `rope` rotary ones, the key's rotary features one head all heads share;
// values have `v` features per head. kv_rank 0: standard attention.
struct LatentAttention {
  int64_t kv_rank = 0;
  int64_t q_rank = 0;
  int64_t nope = 0;
  int64_t rope = 0;
  int64_t v = 0;
  bool enabled() const { return kv_rank > 0; }
};

struct TransformerConfig {
  Family family = Family::kGpt;
  int layers = 4;            // encoder layers (decoder-only models: all layers)
  int decoder_layers = 0;    // T5 only
  int64_t hidden = 1024;
  int64_t heads = 16;
  int64_t kv_heads = 0;      // grouped-query attention (Llama 2 70B); 0 = heads
  int64_t head_dim = 0;      // 0 = hidden / heads (Qwen3: 128 per head whatever the hidden size)
  bool qk_norm = false;      // an RMSNorm over each query and key head before rotary (Qwen3)
  bool qkv_bias = false;     // biases on the query, key and value projections only (Qwen2)
  bool tied_embeddings = false;
  bool new_gelu = false;     // GPT: HuggingFace's "gelu_new" (NewGELUActivation, eager arithmetic), not a fused GELU
  // The loss reads logits.float(): HuggingFace's causal and masked LM losses (transformers' ForCausalLMLoss,
  // ForMaskedLMLoss) upcast 16-bit logits, so that the loss, its saved softmax and the logits' gradient are fp32.
  bool loss_in_fp32 = false;
  // Llama family: RMSNorms as HuggingFace's eager module runs them (NormKind::kEagerRmsNorm), not fused.
  bool eager_rms_norm = false;
  // GPT, BERT: the learned position table's rows (HuggingFace's n_positions, max_position_embeddings), of
  // which the first seq are looked up; 0 (or at most seq): a table of seq rows, added whole.
  int64_t max_positions = 0;  // GPT, Llama families: the LM head is the word embedding (GPT-2, Llama 3.2 1B, Qwen2 0.5B)
  int64_t ffn = 0;           // 0 = 4 * hidden; with experts: each expert's width
  // Mixture of experts (Llama family: Mixtral, Qwen3-MoE): every layer's MLP is `experts` SwiGLU
  // experts behind a softmax router that sends each token to its top_k (dropless, even load); 0: dense.
  int64_t experts = 0;
  int64_t top_k = 0;
  // With experts: a shared expert of this width every token runs, scaled by a sigmoid gate (Qwen2-MoE); 0: none.
  int64_t shared_expert_ffn = 0;
  bool shared_expert_gate = true;  // false: the shared experts' output is added ungated (DeepSeek)
  // With experts: the first dense_layers layers have a dense SwiGLU MLP dense_ffn wide instead (DeepSeek's
  // first_k_dense_replace); 0: every layer has experts.
  int dense_layers = 0;
  int64_t dense_ffn = 0;
  LatentAttention mla = {};  // Llama family: multi-head latent attention in place of q/k/v (DeepSeek)
  // With experts: each expert's slots, in its even share T k / E of the tokens' routed rows (GShard's and
  // Switch's capacity factor, Megatron-LM's --moe-expert-capacity-factor): 1 is a dropless router with an
  // even load; above 1 also the busiest expert of an uneven one, whose slots every expert pads to.
  double capacity_factor = 1.0;
  int64_t seq = 1024;        // encoder / decoder-only sequence length
  int64_t decoder_seq = 0;   // T5 decoder length; 0 = seq
  int64_t batch = 8;
  int64_t vocab = 50257;     // token models; ViT/Swin: number of classes
  int64_t image = 224;       // ViT/Swin input size
  int64_t patch = 16;        // ViT/Swin patch size
  int64_t window = 7;        // Swin window size
  std::vector<int> stage_depths;    // Swin: layers per stage (sum = layers)
  ir::DType dtype = ir::DType::kF32;
  bool dropout = true;       // GPT/BERT/T5/ViT train with dropout; Llama without
  double dropout_p = 0.1;    // the probability at every dropout site when `dropout`: Megatron-LM's default
  bool embeddings = true;    // include embeddings, final norm, head and loss (false: layers + loss only)
  AttentionKernel attention = AttentionKernel::kAuto;
};

// T5's and Swin's relative position bias is added to the scores, so their attention cannot be fused.
bool HasRelativePositionBias(Family family);

// Whether the config's attention layers are built fused (AttentionKernel, auto resolved).
bool UsesFusedAttention(const TransformerConfig& config);

// The forward graph (verified), ending in one kLoss node.
Result<ir::Graph> BuildTransformerForward(const TransformerConfig& config);

}  // namespace kiwi::models
