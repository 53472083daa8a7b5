// Named models (CONTRACT.md "Names"): the families with default sizes and the presets of
// Galvatron-BMW Table I plus GPT-3 13B and Llama 2 7B/70B; command-line overrides on top.
#include "kiwi/models/presets.h"

#include <algorithm>
#include <array>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiwi/models/builder.h"

namespace kiwi::models {
namespace {

using ir::DType;

constexpr ir::TrainingOptions kFp32Adam = {.optimizer = ir::Optimizer::kAdam, .master_weights = false};
// bf16 mixed precision: Adam states and an fp32 master copy per parameter.
constexpr ir::TrainingOptions kMixedAdam = {.optimizer = ir::Optimizer::kAdam, .master_weights = true};
constexpr int64_t kSwinHeadDim = 32;  // Swin: heads = dim / 32 in every stage

// A preset plus which sizes follow --hidden when it is overridden.
struct Preset {
  ModelSpec spec;
  bool ffn_follows_hidden = false;    // family defaults: ffn derived from hidden (4h, or SwiGLU's 8h/3)
};

TransformerConfig Base(Family family, int layers, int64_t hidden, int64_t heads, int64_t seq, int64_t vocab) {
  TransformerConfig c;
  c.family = family;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.seq = seq;
  c.vocab = vocab;
  return c;
}

Preset Make(std::string name, TransformerConfig c, ir::TrainingOptions training, bool ffn_follows = false) {
  return {ModelSpec{std::move(name), std::move(c), training}, ffn_follows};
}

// Llama's SwiGLU width: 2/3 of 4h, rounded up to a multiple of 256 (Touvron et al. 2023).
int64_t LlamaFfn(int64_t hidden) { return (8 * hidden / 3 + 255) / 256 * 256; }

TransformerConfig Vit(int layers, int64_t hidden, int64_t heads, int64_t patch) {
  TransformerConfig c = Base(Family::kVit, layers, hidden, heads, (224 / patch) * (224 / patch), 1000);
  c.patch = patch;
  return c;
}

TransformerConfig Swin(int64_t hidden, std::vector<int> depths) {
  const int layers = std::accumulate(depths.begin(), depths.end(), 0);
  TransformerConfig c = Base(Family::kSwin, layers, hidden, hidden / kSwinHeadDim, (224 / 4) * (224 / 4), 1000);
  c.patch = 4;
  c.stage_depths = std::move(depths);
  c.dropout = false;  // Swin trains with stochastic depth, not dropout (drop_rate 0)
  return c;
}

TransformerConfig T5(int per_stack, int64_t decoder_seq) {
  TransformerConfig c = Base(Family::kT5, per_stack, 1024, 16, 512, 32128);
  c.decoder_layers = per_stack;
  c.ffn = 4096;
  c.decoder_seq = decoder_seq;
  return c;
}

TransformerConfig Llama(int layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn, int64_t seq,
                        int64_t vocab = 32000) {
  TransformerConfig c = Base(Family::kLlama, layers, hidden, heads, seq, vocab);
  c.kv_heads = kv_heads;
  c.ffn = ffn;
  c.dtype = DType::kBF16;
  c.dropout = false;
  return c;
}

TransformerConfig Moe(TransformerConfig c, int64_t experts, int64_t top_k) {
  c.experts = experts;
  c.top_k = top_k;
  return c;
}

// Qwen3: 128 features per head whatever the hidden size, and QK norm.
TransformerConfig Qwen3(TransformerConfig c) {
  c.head_dim = 128;
  c.qk_norm = true;
  return c;
}

// DeepSeek-V2/V3 (DeepSeek-AI 2024, 2024b; config.json of the releases): latent attention with 128-wide
// nope and value heads and 64 rotary features, `dense` first layers of a dense SwiGLU, then `experts`
// routed experts (top k) and `shared` shared ones, each `width` wide.
TransformerConfig DeepSeek(TransformerConfig c, LatentAttention mla, int dense, int64_t experts, int64_t top_k,
                           int64_t shared, int64_t width) {
  c.mla = mla;
  detail::SetDeepSeekExperts(c, dense, c.ffn, experts, top_k, shared, width);
  return c;
}

TransformerConfig Bf16(TransformerConfig c) {
  c.dtype = DType::kBF16;
  return c;
}

// Family defaults (gpt: the README's default job) then the presets, in ModelNames() order.
std::vector<Preset> Presets() {
  TransformerConfig t5 = T5(2, 0);
  t5.ffn = 0;
  return {
      Make("gpt", Base(Family::kGpt, 4, 1024, 16, 1024, 50257), kFp32Adam, true),
      Make("bert", Base(Family::kBert, 4, 1024, 16, 512, 30522), kFp32Adam, true),
      Make("t5", t5, kFp32Adam, true),
      Make("vit", Vit(4, 1024, 16, 16), kFp32Adam, true),
      Make("swin", Swin(96, {2, 2, 6, 2}), kFp32Adam),  // Swin-T
      Make("llama", Llama(4, 1024, 16, 0, 0, 1024), kMixedAdam, true),
      {ModelSpec{"mlp", MlpConfig{}, kFp32Adam}, false},
      // Galvatron-BMW Table I (fp32, Adam).
      Make("bert-huge-32", Base(Family::kBert, 32, 1280, 16, 512, 30522), kFp32Adam),
      Make("bert-huge-48", Base(Family::kBert, 48, 1280, 16, 512, 30522), kFp32Adam),
      Make("vit-huge-32", Vit(32, 1280, 16, 14), kFp32Adam),
      Make("vit-huge-48", Vit(48, 1280, 16, 14), kFp32Adam),
      Make("t5-large-32", T5(16, 0), kFp32Adam),
      Make("t5-large-48", T5(24, 0), kFp32Adam),
      Make("t5-512-4-32", T5(16, 4), kFp32Adam),
      Make("t5-512-4-48", T5(24, 4), kFp32Adam),
      Make("swin-huge-32", Swin(320, {2, 2, 26, 2}), kFp32Adam),
      Make("swin-huge-48", Swin(320, {2, 2, 42, 2}), kFp32Adam),
      // bf16 mixed precision with Adam and fp32 master weights.
      Make("gpt3-13b", Bf16(Base(Family::kGpt, 40, 5120, 40, 2048, 50257)), kMixedAdam),
      Make("llama2-7b", Llama(32, 4096, 32, 0, 11008, 4096), kMixedAdam),
      Make("llama2-70b", Llama(80, 8192, 64, 8, 28672, 4096), kMixedAdam),
      // Llama 3 / 3.1 (Meta's model cards and config.json: 8 key/value heads, vocabulary 128,256, untied
      // head), at the 8,192-token sequence of their pre-training.
      Make("llama3-8b", Llama(32, 4096, 32, 8, 14336, 8192, 128256), kMixedAdam),
      Make("llama3-70b", Llama(80, 8192, 64, 8, 28672, 8192, 128256), kMixedAdam),
      Make("llama3-405b", Llama(126, 16384, 128, 8, 53248, 8192, 128256), kMixedAdam),
      // Mixture of experts, at a 4,096-token sequence: Mixtral 8x7B (Jiang et al. 2024: 8 experts, top 2)
      // and Qwen3-30B-A3B (128 experts, top 8, 128-wide heads with QK norm); parameter counts as released.
      Make("mixtral-8x7b", Moe(Llama(32, 4096, 32, 8, 14336, 4096), 8, 2), kMixedAdam),
      Make("qwen3-30b-a3b", Qwen3(Moe(Llama(48, 2048, 32, 4, 768, 4096, 151936), 128, 8)), kMixedAdam),
      // DeepSeek-V2-Lite, V2 and V3 with latent attention, at the 4,096-token sequence of their
      // pre-training; parameter counts as transformers builds the released configs (V3 without its
      // multi-token prediction module).
      Make("deepseek-v2-lite",
           DeepSeek(Llama(27, 2048, 16, 0, 10944, 4096, 102400), {512, 0, 128, 64, 128}, 1, 64, 6, 2, 1408), kMixedAdam),
      Make("deepseek-v2",
           DeepSeek(Llama(60, 5120, 128, 0, 12288, 4096, 102400), {512, 1536, 128, 64, 128}, 1, 160, 6, 2, 1536), kMixedAdam),
      Make("deepseek-v3",
           DeepSeek(Llama(61, 7168, 128, 0, 18432, 4096, 129280), {512, 1536, 128, 64, 128}, 3, 256, 8, 1, 2048), kMixedAdam),
  };
}

Status CheckPositive(const char* flag, std::optional<int64_t> value) {
  constexpr int64_t kMaxDim = int64_t{1} << 24;  // far beyond any real model; keeps products of two dims exact
  if (value && *value <= 0) return BadInput(fmt::format("{}: must be positive, got {}", flag, *value));
  if (value && *value > kMaxDim) return BadInput(fmt::format("{}: {} is larger than {}", flag, *value, kMaxDim));
  return Status::Ok();
}

Status CheckOverrideValues(const ModelOverrides& o) {
  KIWI_RETURN_IF_ERROR(CheckPositive("--layers", o.layers));
  KIWI_RETURN_IF_ERROR(CheckPositive("--hidden", o.hidden));
  KIWI_RETURN_IF_ERROR(CheckPositive("--heads", o.heads));
  KIWI_RETURN_IF_ERROR(CheckPositive("--seq", o.seq));
  KIWI_RETURN_IF_ERROR(CheckPositive("--batch", o.batch));
  KIWI_RETURN_IF_ERROR(CheckPositive("--ffn", o.ffn));
  KIWI_RETURN_IF_ERROR(CheckPositive("--vocab", o.vocab));
  if (o.optimizer && *o.optimizer == ir::Optimizer::kNone) return BadInput("--optimizer: must be adam, fused_adam or sgd");
  if (o.dropout && !(*o.dropout >= 0.0 && *o.dropout < 1.0))
    return BadInput(fmt::format("--dropout: must be in [0, 1), got {}", *o.dropout));
  if (o.capacity_factor) KIWI_RETURN_IF_ERROR(CheckCapacityFactor(*o.capacity_factor));
  return Status::Ok();
}

Status NotApplicable(const std::string& model, const char* flag, const char* why) {
  return BadInput(fmt::format("{}: not applicable to model {}: {}", flag, model, why));
}

// --layers for T5: encoder + decoder, split evenly (t5-large-32 = 16 + 16).
Status ApplyT5Layers(const std::string& name, int layers, TransformerConfig& c) {
  if (layers < 2 || layers % 2 != 0)
    return BadInput(fmt::format("--layers: {} needs an even number of layers >= 2 (encoder + decoder), got {}",
                                name, layers));
  c.layers = c.decoder_layers = layers / 2;
  return Status::Ok();
}

// --layers for Swin: the deepest stage absorbs the change (2/2/26/2 -> 2/2/x/2).
Status ApplySwinLayers(const std::string& name, int layers, TransformerConfig& c) {
  auto deepest = std::max_element(c.stage_depths.begin(), c.stage_depths.end());
  const int others = c.layers - *deepest;
  if (layers <= others)
    return BadInput(fmt::format("--layers: {} needs more than {} layers (stage depths {}), got {}", name, others,
                                fmt::join(c.stage_depths, "/"), layers));
  *deepest = layers - others;
  c.layers = layers;
  return Status::Ok();
}

Status ApplyDivisibility(const std::string& name, const ModelOverrides& o, TransformerConfig& c) {
  if (c.head_dim == 0 && c.hidden % c.heads != 0) {
    if (o.heads) return BadInput(fmt::format("--heads: {} does not divide --hidden {}", c.heads, c.hidden));
    return BadInput(fmt::format("--hidden: {} is not divisible by the {} heads of {}", c.hidden, c.heads, name));
  }
  if (c.kv_heads > 0 && c.heads % c.kv_heads != 0)
    return BadInput(fmt::format("--heads: {} is not a multiple of the {} key/value heads of {}", c.heads,
                                c.kv_heads, name));
  return Status::Ok();
}

Status ApplyTransformer(const Preset& preset, const ModelOverrides& o, TransformerConfig& c) {
  const std::string& name = preset.spec.name;
  const bool image_model = c.family == Family::kVit || c.family == Family::kSwin;
  if (o.seq && image_model) return NotApplicable(name, "--seq", "its tokens are (image / patch)^2");
  if (o.ffn && c.family == Family::kSwin) return NotApplicable(name, "--ffn", "Swin's MLP is 4x each stage");
  if (o.vocab && image_model) return NotApplicable(name, "--vocab", "an image model has classes, not words");
  if (o.layers && c.family == Family::kT5) KIWI_RETURN_IF_ERROR(ApplyT5Layers(name, *o.layers, c));
  if (o.layers && c.family == Family::kSwin) KIWI_RETURN_IF_ERROR(ApplySwinLayers(name, *o.layers, c));
  if (o.layers && c.family != Family::kT5 && c.family != Family::kSwin) {
    c.layers = *o.layers;
    c.dense_layers = std::min(c.dense_layers, c.layers - 1);  // DeepSeek: at least one layer of experts stays
  }
  if (o.hidden) c.hidden = *o.hidden;
  if (o.hidden && !o.heads && c.family == Family::kSwin) {
    if (c.hidden % kSwinHeadDim != 0)
      return BadInput(fmt::format("--hidden: {} is not a multiple of 32 (swin heads = hidden / 32); give --heads",
                                  c.hidden));
    c.heads = c.hidden / kSwinHeadDim;
  }
  if (o.heads) c.heads = *o.heads;
  if (o.seq) c.seq = *o.seq;
  if (o.batch) c.batch = *o.batch;
  if (o.ffn) c.ffn = *o.ffn;
  if (o.vocab) c.vocab = *o.vocab;
  if (o.dropout) {
    c.dropout = *o.dropout > 0.0;
    if (c.dropout) c.dropout_p = *o.dropout;
  }
  if (o.capacity_factor && c.experts == 0)
    return NotApplicable(name, "--capacity-factor", "it has no mixture of experts");
  if (o.capacity_factor) c.capacity_factor = *o.capacity_factor;
  if (!o.ffn && preset.ffn_follows_hidden && c.family == Family::kLlama) c.ffn = LlamaFfn(c.hidden);
  if (!o.ffn && preset.ffn_follows_hidden && c.family != Family::kLlama) c.ffn = 0;  // 4 * hidden
  if (o.dtype) c.dtype = *o.dtype;
  if (o.attention) c.attention = *o.attention;
  KIWI_RETURN_IF_ERROR(ApplyDivisibility(name, o, c));
  return detail::ValidateTransformerConfig(c);
}

// --layers = number of linears, --hidden = input/output width, --ffn = inner width.
Status ApplyMlp(const std::string& name, const ModelOverrides& o, MlpConfig& c) {
  if (o.heads) return NotApplicable(name, "--heads", "an MLP has no attention");
  if (o.attention) return NotApplicable(name, "--attention", "an MLP has no attention");
  if (o.seq) return NotApplicable(name, "--seq", "an MLP has no sequence");
  if (o.vocab) return NotApplicable(name, "--vocab", "an MLP has no vocabulary");
  if (o.dropout) return NotApplicable(name, "--dropout", "kiwi's MLP has no dropout");
  if (o.capacity_factor) return NotApplicable(name, "--capacity-factor", "it has no mixture of experts");
  if (o.layers || o.hidden || o.ffn) {
    const int layers = o.layers.value_or(static_cast<int>(c.widths.size()) - 1);
    const int64_t outer = o.hidden.value_or(c.widths.front());
    const int64_t inner = o.ffn.value_or(c.widths.size() > 2 ? c.widths[1] : 4 * outer);
    c.widths.assign(static_cast<size_t>(layers) + 1, inner);
    c.widths.front() = c.widths.back() = outer;
  }
  if (o.batch) c.batch = *o.batch;
  if (o.dtype) c.dtype = *o.dtype;
  return Status::Ok();
}

bool Is16Bit(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }

DType SpecDType(const ModelSpec& spec) {
  if (const auto* t = std::get_if<TransformerConfig>(&spec.config)) return t->dtype;
  return std::get<MlpConfig>(spec.config).dtype;
}

}  // namespace

std::vector<std::string> ModelNames() {
  std::vector<std::string> names;
  for (const Preset& p : Presets()) names.push_back(p.spec.name);
  return names;
}

Result<ModelSpec> LoadModel(const std::string& name, const ModelOverrides& overrides) {
  std::vector<Preset> presets = Presets();
  auto it = std::find_if(presets.begin(), presets.end(), [&](const Preset& p) { return p.spec.name == name; });
  if (it == presets.end())
    return BadInput(fmt::format("--model: unknown model '{}' (known: {})", name, fmt::join(ModelNames(), ", ")));
  KIWI_RETURN_IF_ERROR(CheckOverrideValues(overrides));
  ModelSpec spec = it->spec;
  if (auto* t = std::get_if<TransformerConfig>(&spec.config)) {
    KIWI_RETURN_IF_ERROR(ApplyTransformer(*it, overrides, *t));
  } else {
    KIWI_RETURN_IF_ERROR(ApplyMlp(name, overrides, std::get<MlpConfig>(spec.config)));
  }
  if (overrides.optimizer) spec.training.optimizer = *overrides.optimizer;
  if (overrides.zero_runtime) spec.zero_runtime = *overrides.zero_runtime;
  // 16-bit training keeps fp32 master weights (mixed precision); fp32 training needs none.
  if (overrides.dtype) spec.training.master_weights = Is16Bit(SpecDType(spec));
  return spec;
}

Result<ir::Graph> BuildForwardGraph(const ModelSpec& spec) {
  Result<ir::Graph> graph = std::holds_alternative<TransformerConfig>(spec.config)
                                ? BuildTransformerForward(std::get<TransformerConfig>(spec.config))
                                : BuildMlpForward(std::get<MlpConfig>(spec.config));
  if (graph) graph->set_name(spec.name);
  return graph;
}

Result<ir::Graph> BuildTrainingGraph(const ModelSpec& spec) {
  Result<ir::Graph> forward = BuildForwardGraph(spec);
  if (!forward) return forward.error();
  return ir::BuildTrainingGraph(*forward, spec.training);
}

Status CheckCapacityFactor(double capacity_factor) {
  if (capacity_factor > 0.0 && capacity_factor <= kMaxCapacityFactor) return Status::Ok();
  return BadInput(fmt::format("--capacity-factor: must be in (0, {}], got {}", kMaxCapacityFactor, capacity_factor));
}

}  // namespace kiwi::models
