// Transformer families: GPT, BERT, T5, ViT and Llama (Swin lives in swin.cpp). Each family builder
// is a stem (embeddings), a stack of TransformerLayer()s and a head; the blocks are shared.
#include "kiwi/models/transformer.h"

#include <algorithm>
#include <array>
#include <string>

#include <fmt/format.h>

#include "kiwi/models/builder.h"

namespace kiwi::models {
namespace detail {

std::string FamilyName(Family family) {
  constexpr std::array<const char*, 6> kNames = {"gpt", "bert", "t5", "vit", "swin", "llama"};
  return kNames[static_cast<size_t>(family)];
}

int64_t FfnSize(const TransformerConfig& config) { return config.ffn > 0 ? config.ffn : 4 * config.hidden; }
void SetDeepSeekExperts(TransformerConfig& c, int dense, int64_t dense_ffn, int64_t experts, int64_t top_k,
                        int64_t shared, int64_t width) {
  c.dense_layers = dense;
  c.dense_ffn = dense_ffn;
  c.ffn = width;
  c.experts = experts;
  c.top_k = top_k;
  c.shared_expert_ffn = shared * width;
  c.shared_expert_gate = false;
}
int64_t KvHeads(const TransformerConfig& config) { return config.kv_heads > 0 ? config.kv_heads : config.heads; }
int64_t DecoderSeq(const TransformerConfig& config) {
  return config.decoder_seq > 0 ? config.decoder_seq : config.seq;
}

NodeId LossHead(GraphBuilder& gb, NodeId logits, bool in_fp32) {
  gb.Enter(-1, "head");
  Shape labels_shape = gb.shape(logits);
  if (in_fp32 && gb.dtype_of(logits) != ir::DType::kF32)
    logits = gb.Add(ir::OpKind::kElementwise, "cast", "logits_fp32", {logits}, {ir::DType::kF32, labels_shape});
  labels_shape.pop_back();
  NodeId labels = gb.Input("labels", ir::DType::kI64, std::move(labels_shape));
  return CrossEntropy(gb, "loss", logits, labels);
}

namespace {

double DropoutP(const TransformerConfig& c) { return c.dropout ? c.dropout_p : 0.0; }

LayerOptions StandardLayer(const TransformerConfig& c, NormKind norm, bool pre_norm, Activation act, bool bias) {
  LayerOptions o;
  o.norm = norm;
  o.pre_norm = pre_norm;
  o.self_attn = {.heads = c.heads, .kv_heads = KvHeads(c), .bias = bias, .rotary = false,
                 .dropout_p = DropoutP(c), .score_bias = ir::kNoNode, .fused = UsesFusedAttention(c),
                 .causal = c.family == Family::kGpt || c.family == Family::kLlama,
                 .head_dim = c.head_dim, .qk_norm = c.qk_norm, .qkv_bias = c.qkv_bias, .mla = c.mla};
  o.mlp = {.ffn = FfnSize(c), .activation = act, .bias = bias, .dropout_p = DropoutP(c), .experts = c.experts,
           .top_k = c.top_k, .shared_expert_ffn = c.shared_expert_ffn, .shared_expert_gate = c.shared_expert_gate,
           .capacity_factor = c.capacity_factor};
  return o;
}

// embeddings == false: the first layer reads a given hidden-state input.
NodeId HiddenInput(GraphBuilder& gb, const std::string& name, Shape shape) {
  gb.Enter(-1, "embed");
  return gb.Input(name, gb.dtype(), std::move(shape));
}

NodeId TokenEmbedding(GraphBuilder& gb, const std::string& name, NodeId table, int64_t batch, int64_t seq) {
  NodeId ids = gb.Input(name + "_ids", ir::DType::kI64, {batch, seq});
  return Embedding(gb, name, table, ids);
}

// T5 relative position bias: bucket ids [sq, sk] -> table[32, heads] -> [heads, sq, sk].
NodeId RelativeBias(GraphBuilder& gb, const std::string& name, int64_t sq, int64_t sk, int64_t heads) {
  NodeId buckets = gb.Input(name + "_buckets", ir::DType::kI64, {sq, sk});
  NodeId table = gb.Parameter(name + ".weight", {kT5Buckets, heads});
  return Transpose(gb, name, Embedding(gb, name + "_lookup", table, buckets), {2, 0, 1});
}

// GPT's and BERT's learned positions, [seq, hidden]: the whole table, or its first seq rows looked up
// when the model has more (TransformerConfig::max_positions; HuggingFace's wpe(position_ids)).
NodeId LearnedPositions(GraphBuilder& gb, const TransformerConfig& c) {
  const int64_t rows = std::max(c.max_positions, c.seq);
  const NodeId table = gb.Parameter("position.weight", {rows, c.hidden});
  if (rows == c.seq) return table;
  return Embedding(gb, "position_lookup", table, gb.Input("position_ids", ir::DType::kI64, {c.seq}));
}

Result<ir::Graph> BuildGpt(const TransformerConfig& c) {
  GraphBuilder gb("gpt", c.dtype);
  NodeId x, word = ir::kNoNode;
  if (c.embeddings) {
    gb.Enter(-1, "embed");
    word = gb.Parameter("word.weight", {c.vocab, c.hidden});
    x = TokenEmbedding(gb, "tokens", word, c.batch, c.seq);
    x = Binary(gb, "add", "positions", x, LearnedPositions(gb, c));
    x = Dropout(gb, "dropout", x, DropoutP(c));
  } else {
    x = HiddenInput(gb, "hidden", {c.batch, c.seq, c.hidden});
  }
  const LayerOptions layer =
      StandardLayer(c, NormKind::kLayerNorm, true, c.new_gelu ? Activation::kNewGelu : Activation::kGelu, true);
  for (int i = 0; i < c.layers; ++i) x = TransformerLayer(gb, i, x, layer);
  if (c.embeddings) {
    gb.Enter(-1, "head");
    x = Norm(gb, "final_norm", x, NormKind::kLayerNorm);
    x = c.tied_embeddings ? Matmul(gb, "lm_head", x, word, ir::kNoNode, /*transpose_b=*/true)  // HuggingFace's GPT-2
                          : Linear(gb, "lm_head", x, c.vocab, false);                          // Megatron's presets
  }
  LossHead(gb, x, c.loss_in_fp32);
  return std::move(gb).Finish();
}

Result<ir::Graph> BuildBert(const TransformerConfig& c) {
  GraphBuilder gb("bert", c.dtype);
  NodeId x, word = ir::kNoNode;
  if (c.embeddings) {
    gb.Enter(-1, "embed");
    word = gb.Parameter("word.weight", {c.vocab, c.hidden});
    x = TokenEmbedding(gb, "tokens", word, c.batch, c.seq);
    x = Binary(gb, "add", "types", x,
               TokenEmbedding(gb, "token_types", gb.Parameter("type.weight", {2, c.hidden}), c.batch, c.seq));
    x = Binary(gb, "add", "positions", x, LearnedPositions(gb, c));
    x = Dropout(gb, "dropout", Norm(gb, "norm", x, NormKind::kLayerNorm), DropoutP(c));
  } else {
    x = HiddenInput(gb, "hidden", {c.batch, c.seq, c.hidden});
  }
  const LayerOptions layer = StandardLayer(c, NormKind::kLayerNorm, false, Activation::kGelu, true);
  for (int i = 0; i < c.layers; ++i) x = TransformerLayer(gb, i, x, layer);
  if (c.embeddings) {  // MLM head: transform + decoder tied to the word embedding (as BERT)
    gb.Enter(-1, "head");
    x = Unary(gb, "gelu", "transform_act", Linear(gb, "transform", x, c.hidden, true));
    x = Norm(gb, "transform_norm", x, NormKind::kLayerNorm);
    x = Matmul(gb, "decoder", x, word, gb.Parameter("decoder.bias", {c.vocab}), /*transpose_b=*/true);
  }
  LossHead(gb, x, c.loss_in_fp32);
  return std::move(gb).Finish();
}

Result<ir::Graph> BuildT5(const TransformerConfig& c) {
  GraphBuilder gb("t5", c.dtype);
  const int64_t sd = DecoderSeq(c);
  const double p = DropoutP(c);
  LayerOptions enc = StandardLayer(c, NormKind::kRmsNorm, true, Activation::kRelu, false);
  LayerOptions dec = enc;
  dec.cross_attention = true;
  dec.cross_attn = dec.self_attn;
  NodeId x, shared = ir::kNoNode;
  if (c.embeddings) {
    gb.Enter(-1, "embed");
    shared = gb.Parameter("shared.weight", {c.vocab, c.hidden});
    x = Dropout(gb, "dropout", TokenEmbedding(gb, "tokens", shared, c.batch, c.seq), p);
    enc.self_attn.score_bias = RelativeBias(gb, "encoder_bias", c.seq, c.seq, c.heads);
  } else {
    x = HiddenInput(gb, "hidden", {c.batch, c.seq, c.hidden});
  }
  for (int i = 0; i < c.layers; ++i) x = TransformerLayer(gb, i, x, enc);
  if (c.embeddings) {  // the encoder's final norm belongs to its last layer (it sits between stacks)
    gb.Enter(c.layers - 1, fmt::format("layer{}.final_norm", c.layers - 1));
    x = Norm(gb, "norm", x, NormKind::kRmsNorm);
  }
  const NodeId memory = x;
  NodeId y;
  if (c.embeddings) {
    gb.Enter(-1, "decoder_embed");
    y = Dropout(gb, "dropout", TokenEmbedding(gb, "tokens", shared, c.batch, sd), p);
    dec.self_attn.score_bias = RelativeBias(gb, "decoder_bias", sd, sd, c.heads);
  } else {
    y = HiddenInput(gb, "decoder_hidden", {c.batch, sd, c.hidden});
  }
  for (int i = 0; i < c.decoder_layers; ++i) y = TransformerLayer(gb, c.layers + i, y, dec, memory);
  if (c.embeddings) {  // T5 v1.0: final norm, d^-1/2 rescale, LM head tied to the shared embedding
    gb.Enter(-1, "head");
    y = Unary(gb, "scale", "rescale", Norm(gb, "final_norm", y, NormKind::kRmsNorm));
    y = Matmul(gb, "lm_head", y, shared, ir::kNoNode, /*transpose_b=*/true);
  }
  LossHead(gb, y);
  return std::move(gb).Finish();
}

Result<ir::Graph> BuildVit(const TransformerConfig& c) {
  GraphBuilder gb("vit", c.dtype);
  const int64_t grid = c.image / c.patch;
  NodeId x;
  if (c.embeddings) {  // patch embedding = conv with kernel = stride = patch
    gb.Enter(-1, "embed");
    NodeId image = gb.Input("image", c.dtype, {c.batch, kImageChannels, c.image, c.image});
    NodeId w = gb.Parameter("patch.weight", {c.hidden, kImageChannels, c.patch, c.patch});
    x = Conv2d(gb, "patch", image, w, gb.Parameter("patch.bias", {c.hidden}), c.patch);
    x = Transpose(gb, "tokens", Reshape(gb, "flatten", x, {c.batch, c.hidden, grid * grid}), {0, 2, 1});
    x = Binary(gb, "add", "positions", x, gb.Parameter("position.weight", {grid * grid, c.hidden}));
    x = Dropout(gb, "dropout", x, DropoutP(c));
  } else {
    x = HiddenInput(gb, "hidden", {c.batch, grid * grid, c.hidden});
  }
  const LayerOptions layer = StandardLayer(c, NormKind::kLayerNorm, true, Activation::kGelu, true);
  for (int i = 0; i < c.layers; ++i) x = TransformerLayer(gb, i, x, layer);
  if (c.embeddings) {  // no concat/slice in the IR: the classifier reads mean-pooled tokens, not a cls token
    gb.Enter(-1, "head");
    x = ReduceMean(gb, "pool", Norm(gb, "final_norm", x, NormKind::kLayerNorm), 1);
    x = Linear(gb, "classifier", x, c.vocab, true);
  }
  LossHead(gb, x);
  return std::move(gb).Finish();
}

Result<ir::Graph> BuildLlama(const TransformerConfig& c) {
  GraphBuilder gb("llama", c.dtype);
  NodeId x, word = ir::kNoNode;
  if (c.embeddings) {
    gb.Enter(-1, "embed");
    word = gb.Parameter("word.weight", {c.vocab, c.hidden});
    x = TokenEmbedding(gb, "tokens", word, c.batch, c.seq);
  } else {
    x = HiddenInput(gb, "hidden", {c.batch, c.seq, c.hidden});
  }
  const NormKind rms = c.eager_rms_norm ? NormKind::kEagerRmsNorm : NormKind::kRmsNorm;
  LayerOptions layer = StandardLayer(c, rms, true, Activation::kSwiGlu, false);
  layer.self_attn.rotary = true;
  LayerOptions dense = layer;  // DeepSeek's first layers: a dense MLP before the experts' layers
  dense.mlp = {.ffn = c.dense_ffn, .activation = Activation::kSwiGlu, .bias = false, .dropout_p = DropoutP(c)};
  for (int i = 0; i < c.layers; ++i) x = TransformerLayer(gb, i, x, i < c.dense_layers ? dense : layer);
  if (c.embeddings) {
    gb.Enter(-1, "head");
    x = Norm(gb, "final_norm", x, rms);
    x = c.tied_embeddings ? Matmul(gb, "lm_head", x, word, ir::kNoNode, /*transpose_b=*/true)
                          : Linear(gb, "lm_head", x, c.vocab, false);
  }
  LossHead(gb, x, c.loss_in_fp32);
  return std::move(gb).Finish();
}

Status Positive(int64_t value, const char* field) {
  if (value <= 0) return BadInput(fmt::format("{}: must be positive, got {}", field, value));
  return Status::Ok();
}

Status ValidateFamily(const TransformerConfig& c) {
  if ((c.qkv_bias || c.qk_norm) && c.family != Family::kLlama)
    return BadInput(fmt::format("{}: only llama-style models take it, not {}", c.qkv_bias ? "qkv_bias" : "qk_norm",
                                FamilyName(c.family)));
  if (c.tied_embeddings && c.family != Family::kLlama && c.family != Family::kGpt)
    return BadInput(fmt::format("tied_embeddings: only GPT- and llama-style models take it, not {} (whose heads are "
                                "tied by their architecture)", FamilyName(c.family)));
  if (c.attention == AttentionKernel::kFused && HasRelativePositionBias(c.family))
    return BadInput(fmt::format("attention: fused attention has no relative position bias, which {} "
                                "adds to its scores (use materialized)", FamilyName(c.family)));
  if (c.family == Family::kT5) {
    KIWI_RETURN_IF_ERROR(Positive(c.decoder_layers, "decoder_layers"));
    if (c.decoder_seq < 0) return BadInput(fmt::format("decoder_seq: must be >= 0, got {}", c.decoder_seq));
  }
  if (c.family == Family::kVit) {
    KIWI_RETURN_IF_ERROR(Positive(c.image, "image"));
    KIWI_RETURN_IF_ERROR(Positive(c.patch, "patch"));
    if (c.image % c.patch != 0)
      return BadInput(fmt::format("patch: {} does not divide image {}", c.patch, c.image));
  }
  if (c.family == Family::kSwin) return ValidateSwin(c);
  return Status::Ok();
}

Status ValidateExperts(const TransformerConfig& c) {
  if (c.experts < 0) return BadInput(fmt::format("experts: must be >= 0, got {}", c.experts));
  if (c.shared_expert_ffn < 0) return BadInput(fmt::format("shared_expert_ffn: must be >= 0, got {}", c.shared_expert_ffn));
  if (c.experts == 0) {
    if (c.top_k != 0) return BadInput(fmt::format("top_k: {} without experts", c.top_k));
    if (c.shared_expert_ffn != 0) return BadInput(fmt::format("shared_expert_ffn: {} without experts", c.shared_expert_ffn));
    return Status::Ok();
  }
  if (c.family != Family::kLlama)
    return BadInput(fmt::format("experts: kiwi builds mixture-of-experts layers for llama-style models, not {}",
                                FamilyName(c.family)));
  if (c.top_k < 1 || c.top_k > c.experts)
    return BadInput(fmt::format("top_k: must be in [1, {}] (the experts), got {}", c.experts, c.top_k));
  return Status::Ok();
}

// Multi-head latent attention: every size positive (q_rank may be 0), self-attention of a llama-style
// model with one key/value head per query head and no QK norm or q/k/v biases.
Status ValidateLatentAttention(const TransformerConfig& c) {
  const LatentAttention& m = c.mla;
  for (auto [value, field] : {std::pair{m.kv_rank, "mla.kv_rank"}, std::pair{m.q_rank, "mla.q_rank"},
                              std::pair{m.nope, "mla.nope"}, std::pair{m.rope, "mla.rope"}, std::pair{m.v, "mla.v"}})
    if (value < 0) return BadInput(fmt::format("{}: must be >= 0, got {}", field, value));
  if (!m.enabled()) {
    if (m.q_rank != 0 || m.nope != 0 || m.rope != 0 || m.v != 0)
      return BadInput("mla.kv_rank: 0 (no latent attention), yet other latent attention sizes are set");
    return Status::Ok();
  }
  if (c.family != Family::kLlama)
    return BadInput(fmt::format("mla: kiwi builds latent attention for llama-style models, not {}", FamilyName(c.family)));
  KIWI_RETURN_IF_ERROR(Positive(m.nope, "mla.nope"));
  KIWI_RETURN_IF_ERROR(Positive(m.rope, "mla.rope"));
  KIWI_RETURN_IF_ERROR(Positive(m.v, "mla.v"));
  if (KvHeads(c) != c.heads)
    return BadInput(fmt::format("kv_heads: latent attention has a key and value head per query head ({}), got {}",
                                c.heads, KvHeads(c)));
  if (c.qk_norm || c.qkv_bias) return BadInput(fmt::format("{}: latent attention has none", c.qk_norm ? "qk_norm" : "qkv_bias"));
  return Status::Ok();
}

// DeepSeek's dense first layers: a mixture of experts' leading layers with a dense MLP of their own width.
Status ValidateDenseLayers(const TransformerConfig& c) {
  if (c.dense_layers < 0) return BadInput(fmt::format("dense_layers: must be >= 0, got {}", c.dense_layers));
  if (c.dense_ffn < 0) return BadInput(fmt::format("dense_ffn: must be >= 0, got {}", c.dense_ffn));
  if (c.dense_layers == 0) return Status::Ok();
  if (c.experts == 0) return BadInput(fmt::format("dense_layers: {} without experts (every layer is dense)", c.dense_layers));
  if (c.dense_layers > c.layers)
    return BadInput(fmt::format("dense_layers: {} is more than the {} layers", c.dense_layers, c.layers));
  return Positive(c.dense_ffn, "dense_ffn");
}

// The checks of ValidateTransformerConfig, their messages naming the field alone.
Status ValidateFields(const TransformerConfig& c) {
  if (static_cast<size_t>(c.family) > static_cast<size_t>(Family::kLlama))
    return BadInput("family: unknown");
  KIWI_RETURN_IF_ERROR(Positive(c.layers, "layers"));
  KIWI_RETURN_IF_ERROR(Positive(c.hidden, "hidden"));
  KIWI_RETURN_IF_ERROR(Positive(c.heads, "heads"));
  KIWI_RETURN_IF_ERROR(Positive(c.seq, "seq"));
  KIWI_RETURN_IF_ERROR(Positive(c.batch, "batch"));
  KIWI_RETURN_IF_ERROR(Positive(c.vocab, "vocab"));
  if (c.ffn < 0) return BadInput(fmt::format("ffn: must be >= 0, got {}", c.ffn));
  if (c.kv_heads < 0) return BadInput(fmt::format("kv_heads: must be >= 0, got {}", c.kv_heads));
  if (c.head_dim < 0) return BadInput(fmt::format("head_dim: must be >= 0, got {}", c.head_dim));
  if (c.head_dim == 0 && c.hidden % c.heads != 0)
    return BadInput(fmt::format("heads: {} does not divide hidden {}", c.heads, c.hidden));
  KIWI_RETURN_IF_ERROR(ValidateExperts(c));
  KIWI_RETURN_IF_ERROR(ValidateDenseLayers(c));
  KIWI_RETURN_IF_ERROR(ValidateLatentAttention(c));
  if (c.heads % KvHeads(c) != 0)
    return BadInput(fmt::format("kv_heads: {} does not divide heads {}", KvHeads(c), c.heads));
  return ValidateFamily(c);
}

}  // namespace

Status ValidateTransformerConfig(const TransformerConfig& c, std::string_view source) {
  Status fields = ValidateFields(c);
  if (!fields.ok()) return BadInput(fmt::format("{}: {}", source, fields.error().message));
  return fields;
}

namespace {

using FamilyBuilder = Result<ir::Graph> (*)(const TransformerConfig&);
constexpr std::array<FamilyBuilder, 6> kBuilders = {BuildGpt, BuildBert, BuildT5, BuildVit, BuildSwinForward,
                                                    BuildLlama};

}  // namespace
}  // namespace detail

std::optional<AttentionKernel> ParseAttentionKernel(std::string_view name) {
  for (AttentionKernel k : {AttentionKernel::kAuto, AttentionKernel::kMaterialized, AttentionKernel::kFused})
    if (AttentionKernelName(k) == name) return k;
  return std::nullopt;
}

std::string_view AttentionKernelName(AttentionKernel kernel) {
  constexpr std::array<std::string_view, 3> kNames = {"auto", "materialized", "fused"};
  return kNames[static_cast<size_t>(kernel)];
}

bool HasRelativePositionBias(Family family) { return family == Family::kT5 || family == Family::kSwin; }

bool UsesFusedAttention(const TransformerConfig& c) {
  if (c.attention != AttentionKernel::kAuto) return c.attention == AttentionKernel::kFused;
  return !HasRelativePositionBias(c.family) && (c.dtype == ir::DType::kBF16 || c.dtype == ir::DType::kF16);
}

Result<ir::Graph> BuildTransformerForward(const TransformerConfig& config) {
  KIWI_RETURN_IF_ERROR(detail::ValidateTransformerConfig(config));
  return detail::kBuilders[static_cast<size_t>(config.family)](config);
}

}  // namespace kiwi::models
