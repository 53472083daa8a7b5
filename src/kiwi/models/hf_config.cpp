#include "kiwi/models/hf_config.h"

#include <fmt/format.h>

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>

#include "kiwi/models/builder.h"
#include "kiwi/util/json_depth.h"
#include "kiwi/util/one_line.h"

namespace kiwi::models {
namespace {

using Json = nlohmann::json;

// A config's fields, with errors naming the file and the field.
struct Config {
  const Json& j;
  const std::string& source;

  // The first of `keys` present (JSON null counts as absent), a positive integer; else `fallback`.
  Result<int64_t> Int(std::initializer_list<const char*> keys, std::optional<int64_t> fallback = std::nullopt) const {
    for (const char* key : keys) {
      auto it = j.find(key);
      if (it == j.end() || it->is_null()) continue;
      return Checked(*it, key, 1);
    }
    if (fallback) return *fallback;
    return BadInput(fmt::format("{}: {}: missing", source, *keys.begin()));
  }
  // `key` as a count that may be 0 (JSON null or absent: `fallback`).
  Result<int64_t> Count(const char* key, int64_t fallback) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    return Checked(*it, key, 0);
  }
  // An integer in [least, 2^24] (least 1: positive, 0: non-negative).
  Result<int64_t> Checked(const Json& v, const char* key, int64_t least) const {
    if (!v.is_number_integer() || v.get<int64_t>() < least || v.get<int64_t>() > (int64_t{1} << 24))
      return BadInput(fmt::format("{}: {}: must be a {} integer (got {})", source, key,
                                  least > 0 ? "positive" : "non-negative", OneLine(v.dump())));
    return v.get<int64_t>();
  }
  Result<bool> Bool(const char* key, bool fallback) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) return BadInput(fmt::format("{}: {}: must be true or false (got {})", source, key, OneLine(it->dump())));
    return it->get<bool>();
  }
  std::string String(const char* key, const std::string& fallback) const {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
  }
  // `what` may quote a value of the file (model_type, torch_dtype, ...): one line whatever it holds.
  Error Bad(const char* key, const std::string& what) const {
    return BadInput(fmt::format("{}: {}: {}", source, key, OneLine(what)));
  }
};

// Fills layers, hidden, heads, ffn, seq, vocab from the named fields.
struct Names {
  std::initializer_list<const char*> layers, hidden, heads, ffn, seq, vocab;
  std::optional<int64_t> ffn_default, seq_default, vocab_default;
};

Status ReadSizes(const Config& c, const Names& n, TransformerConfig& t) {
  Result<int64_t> layers = c.Int(n.layers);
  if (!layers) return layers.error();
  if (*layers > kMaxLayers)  // --layers' cap; 100,000 layers ran for minutes
    return c.Bad(*n.layers.begin(), fmt::format("{} layers is too many (at most {})", *layers, kMaxLayers));
  t.layers = static_cast<int>(*layers);
  for (auto [names, fallback, out] : {std::tuple{n.hidden, std::optional<int64_t>{}, &t.hidden},
                                      std::tuple{n.heads, std::optional<int64_t>{}, &t.heads},
                                      std::tuple{n.ffn, n.ffn_default, &t.ffn}, std::tuple{n.seq, n.seq_default, &t.seq},
                                      std::tuple{n.vocab, n.vocab_default, &t.vocab}}) {
    Result<int64_t> v = c.Int(names, fallback);
    if (!v) return v.error();
    *out = *v;
  }
  return Status::Ok();
}

Result<TransformerConfig> Gpt2(const Config& c) {
  TransformerConfig t;
  t.family = Family::kGpt;
  KIWI_RETURN_IF_ERROR(ReadSizes(c, {{"n_layer"}, {"n_embd"}, {"n_head"}, {"n_inner"}, {"n_positions", "n_ctx"},
                                     {"vocab_size"}, 0, 1024, 50257},
                                 t));
  t.max_positions = t.seq;  // the table's rows, whatever sequence length is planned
  Result<bool> tied = c.Bool("tie_word_embeddings", true);  // GPT2LMHeadModel's lm_head is wte
  if (!tied) return tied.error();
  t.tied_embeddings = *tied;
  // GPT2Config's default; "gelu", "gelu_pytorch_tanh" are torch's fused GELU
  t.new_gelu = c.String("activation_function", "gelu_new") == "gelu_new";
  return t;
}

Result<TransformerConfig> Bert(const Config& c) {
  TransformerConfig t;
  t.family = Family::kBert;
  KIWI_RETURN_IF_ERROR(ReadSizes(c, {{"num_hidden_layers"}, {"hidden_size"}, {"num_attention_heads"},
                                     {"intermediate_size"}, {"max_position_embeddings"}, {"vocab_size"}, 0, 512, 30522},
                                 t));
  t.max_positions = t.seq;  // the table's rows, whatever sequence length is planned
  return t;
}

Result<TransformerConfig> T5(const Config& c) {
  TransformerConfig t;
  t.family = Family::kT5;
  KIWI_RETURN_IF_ERROR(
      ReadSizes(c, {{"num_layers"}, {"d_model"}, {"num_heads"}, {"d_ff"}, {"n_positions"}, {"vocab_size"}, 0, 512, 32128}, t));
  Result<int64_t> decoders = c.Int({"num_decoder_layers"}, t.layers);
  if (!decoders) return decoders.error();
  t.decoder_layers = static_cast<int>(*decoders);
  Result<int64_t> d_kv = c.Int({"d_kv"}, t.hidden / t.heads);
  if (!d_kv) return d_kv.error();
  if (*d_kv * t.heads != t.hidden)
    return c.Bad("d_kv", fmt::format("{} x {} heads != d_model {}: not supported", *d_kv, t.heads, t.hidden));
  const std::string ff = c.String("feed_forward_proj", "relu");
  if (ff != "relu") return c.Bad("feed_forward_proj", fmt::format("'{}' is not supported (kiwi's T5 has the ReLU MLP)", ff));
  return t;
}

Result<TransformerConfig> Vit(const Config& c) {
  TransformerConfig t;
  t.family = Family::kVit;
  KIWI_RETURN_IF_ERROR(ReadSizes(c, {{"num_hidden_layers"}, {"hidden_size"}, {"num_attention_heads"},
                                     {"intermediate_size"}, {"image_size"}, {"num_labels"}, 0, 224, 1000},
                                 t));
  t.image = t.seq;
  Result<int64_t> patch = c.Int({"patch_size"}, 16);
  if (!patch) return patch.error();
  t.patch = *patch;
  if (t.image % t.patch != 0) return c.Bad("patch_size", fmt::format("{} does not divide image_size {}", t.patch, t.image));
  t.seq = (t.image / t.patch) * (t.image / t.patch);
  return t;
}

Result<TransformerConfig> Llama(const Config& c) {
  TransformerConfig t;
  t.family = Family::kLlama;
  KIWI_RETURN_IF_ERROR(ReadSizes(c, {{"num_hidden_layers"}, {"hidden_size"}, {"num_attention_heads"},
                                     {"intermediate_size"}, {"max_position_embeddings"}, {"vocab_size"}, {}, 4096, 32000},
                                 t));
  Result<int64_t> kv = c.Int({"num_key_value_heads"}, t.heads);
  if (!kv) return kv.error();
  t.kv_heads = *kv == t.heads ? 0 : *kv;
  Result<int64_t> head_dim = c.Int({"head_dim"}, 0);  // 0: hidden / heads
  if (!head_dim) return head_dim.error();
  t.head_dim = t.hidden % t.heads == 0 && *head_dim == t.hidden / t.heads ? 0 : *head_dim;
  Result<bool> tied = c.Bool("tie_word_embeddings", false);
  if (!tied) return tied.error();
  t.tied_embeddings = *tied;
  t.dropout = false;
  return t;
}

// Qwen2: Llama's layout with biases on the query, key and value projections.
Result<TransformerConfig> Qwen2(const Config& c) {
  Result<TransformerConfig> t = Llama(c);
  if (!t) return t;
  t->qkv_bias = true;
  return t;
}

// Mixtral: every layer's MLP is num_local_experts experts of intermediate_size.
Result<TransformerConfig> Mixtral(const Config& c) {
  Result<TransformerConfig> t = Llama(c);
  if (!t) return t;
  Result<int64_t> experts = c.Int({"num_local_experts"});
  if (!experts) return experts.error();
  Result<int64_t> top_k = c.Int({"num_experts_per_tok"}, 2);
  if (!top_k) return top_k.error();
  t->experts = *experts;
  t->top_k = *top_k;
  return t;
}

// Qwen3 (dense) and Qwen3-MoE: Llama's layout with QK norm; the MoE's experts are moe_intermediate_size
// wide, in every layer (kiwi builds no mixed dense/MoE stacks).
Result<TransformerConfig> Qwen3(const Config& c) {
  Result<TransformerConfig> t = Llama(c);
  if (!t) return t;
  t->qk_norm = true;
  return t;
}

// Qwen2-MoE and Qwen3-MoE: num_experts experts of moe_intermediate_size in every layer; Qwen2-MoE adds
// its gated shared expert.
Status ReadQwenExperts(const Config& c, TransformerConfig& t) {
  for (auto [key, out] : {std::pair{"num_experts", &t.experts}, std::pair{"num_experts_per_tok", &t.top_k},
                          std::pair{"moe_intermediate_size", &t.ffn}}) {
    Result<int64_t> v = c.Int({key});
    if (!v) return v.error();
    *out = *v;
  }
  Result<int64_t> step = c.Int({"decoder_sparse_step"}, 1);
  if (!step) return step.error();
  auto dense = c.j.find("mlp_only_layers");
  if (*step != 1 || (dense != c.j.end() && !(dense->is_array() && dense->empty())))
    return c.Bad(*step != 1 ? "decoder_sparse_step" : "mlp_only_layers",
                 "kiwi builds every layer's MLP as experts (decoder_sparse_step 1, no mlp_only_layers)");
  return Status::Ok();
}

Result<TransformerConfig> Qwen3Moe(const Config& c) {
  Result<TransformerConfig> t = Qwen3(c);
  if (!t) return t;
  KIWI_RETURN_IF_ERROR(ReadQwenExperts(c, *t));
  return t;
}

Result<TransformerConfig> Qwen2Moe(const Config& c) {
  Result<TransformerConfig> t = Qwen2(c);
  if (!t) return t;
  KIWI_RETURN_IF_ERROR(ReadQwenExperts(c, *t));
  Result<int64_t> shared = c.Int({"shared_expert_intermediate_size"}, 0);
  if (!shared) return shared.error();
  t->shared_expert_ffn = *shared;
  Result<bool> qkv_bias = c.Bool("qkv_bias", true);
  if (!qkv_bias) return qkv_bias.error();
  t->qkv_bias = *qkv_bias;
  return t;
}

// DeepSeek-V2 and V3: latent attention (kv_lora_rank, q_lora_rank or null, qk_nope_head_dim,
// qk_rope_head_dim, v_head_dim); after the first first_k_dense_replace layers (a dense SwiGLU of
// intermediate_size), n_routed_experts experts of moe_intermediate_size, top num_experts_per_tok, and
// n_shared_experts of that width added ungated. The router's scoring (softmax, V3's sigmoid) and group
// limits cost alike; V3's multi-token prediction module (num_nextn_predict_layers) is not built, as
// transformers' DeepseekV3ForCausalLM does not build it.
Result<TransformerConfig> DeepSeek(const Config& c) {
  Result<TransformerConfig> t = Llama(c);
  if (!t) return t;
  t->head_dim = 0;  // transformers writes qk_rope_head_dim there; the latent sizes say it all
  const int64_t dense_width = t->ffn;  // intermediate_size, as Llama read it
  for (auto [key, out] : {std::pair{"kv_lora_rank", &t->mla.kv_rank}, std::pair{"qk_nope_head_dim", &t->mla.nope},
                          std::pair{"qk_rope_head_dim", &t->mla.rope}, std::pair{"v_head_dim", &t->mla.v},
                          std::pair{"n_routed_experts", &t->experts}, std::pair{"num_experts_per_tok", &t->top_k},
                          std::pair{"moe_intermediate_size", &t->ffn}}) {
    Result<int64_t> v = c.Int({key});
    if (!v) return v.error();
    *out = *v;
  }
  Result<int64_t> q_rank = c.Count("q_lora_rank", 0);
  if (!q_rank) return q_rank.error();
  Result<int64_t> shared = c.Count("n_shared_experts", 0);
  if (!shared) return shared.error();
  Result<int64_t> dense = c.Count("first_k_dense_replace", 0);
  if (!dense) return dense.error();
  Result<int64_t> frequency = c.Int({"moe_layer_freq"}, 1);
  if (!frequency) return frequency.error();
  Result<bool> bias = c.Bool("attention_bias", false);
  if (!bias) return bias.error();
  if (*frequency != 1) return c.Bad("moe_layer_freq", "kiwi builds every layer after the dense ones with experts (1)");
  if (*bias) return c.Bad("attention_bias", "kiwi's latent attention has no biases (false)");
  if (*dense > t->layers)
    return c.Bad("first_k_dense_replace", fmt::format("{} is more than the {} layers", *dense, t->layers));
  t->mla.q_rank = *q_rank;
  detail::SetDeepSeekExperts(*t, static_cast<int>(*dense), *dense > 0 ? dense_width : 0, t->experts, t->top_k, *shared,
                             t->ffn);
  return t;
}

// Swin: kiwi's builder has heads = stage dim / 32 and square windows.
Result<TransformerConfig> Swin(const Config& c) {
  TransformerConfig t;
  t.family = Family::kSwin;
  t.dropout = false;
  t.layers = 0;
  auto depths = c.j.find("depths");
  auto heads = c.j.find("num_heads");
  if (depths == c.j.end() || !depths->is_array() || depths->empty()) return c.Bad("depths", "must be a list of stage depths");
  Result<int64_t> dim = c.Int({"embed_dim"});
  if (!dim) return dim.error();
  t.hidden = *dim;
  t.heads = *dim / 32;
  for (size_t s = 0; s < depths->size(); ++s) {
    const Json& d = (*depths)[s];
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > kMaxLayers)
      return c.Bad("depths", fmt::format("must be positive integers of at most {}", kMaxLayers));
    t.stage_depths.push_back(d.get<int>());
    const int64_t expected = (*dim << s) / 32;
    if (heads != c.j.end() && (!heads->is_array() || heads->size() != depths->size() || !(*heads)[s].is_number_integer() ||
                               (*heads)[s].get<int64_t>() != expected))
      return c.Bad("num_heads", fmt::format("kiwi's Swin needs dim / 32 heads per stage ({} in stage {})", expected, s));
    t.layers += t.stage_depths.back();
  }
  for (auto [keys, fallback, out] : {std::tuple{"image_size", int64_t{224}, &t.image}, std::tuple{"patch_size", int64_t{4}, &t.patch},
                                     std::tuple{"window_size", int64_t{7}, &t.window}, std::tuple{"num_labels", int64_t{1000}, &t.vocab}}) {
    Result<int64_t> v = c.Int({keys}, fallback);
    if (!v) return v.error();
    *out = *v;
  }
  t.seq = (t.image / t.patch) * (t.image / t.patch);
  return t;
}

struct Handler {
  const char* model_type;
  Result<TransformerConfig> (*read)(const Config&);
};

constexpr Handler kHandlers[] = {{"gpt2", Gpt2}, {"bert", Bert}, {"roberta", Bert},   {"t5", T5},          {"mt5", T5},
                                 {"vit", Vit},   {"swin", Swin}, {"llama", Llama}, {"mistral", Llama},
                                 {"mixtral", Mixtral}, {"qwen2", Qwen2}, {"qwen2_moe", Qwen2Moe}, {"qwen3", Qwen3},
                                 {"qwen3_moe", Qwen3Moe}, {"deepseek_v2", DeepSeek}, {"deepseek_v3", DeepSeek}};

Status ApplyPrecision(const Config& c, const ModelOverrides& o, ModelSpec& spec) {
  auto& t = std::get<TransformerConfig>(spec.config);
  const std::string dtype = c.String("torch_dtype", "float32");
  if (dtype == "float16") t.dtype = ir::DType::kF16;
  else if (dtype == "bfloat16") t.dtype = ir::DType::kBF16;
  else if (dtype == "float32") t.dtype = ir::DType::kF32;
  else return c.Bad("torch_dtype", fmt::format("'{}' is not float32, float16 or bfloat16", dtype));
  if (o.dtype) t.dtype = *o.dtype;
  spec.training = {ir::Optimizer::kAdam, t.dtype != ir::DType::kF32};  // 16-bit: fp32 master weights
  if (o.optimizer) spec.training.optimizer = *o.optimizer;
  if (o.zero_runtime) spec.zero_runtime = *o.zero_runtime;
  // transformers' attention implementation: "eager" materializes the scores, "sdpa" (PyTorch's
  // scaled_dot_product_attention, flash kernels on GPUs) and "flash_attention_2" fuse them. A config that
  // names none (what save_pretrained and to_json_file write) runs "sdpa", transformers' default with
  // PyTorch >= 2.1.1.
  const std::string impl = c.String("_attn_implementation", c.String("attn_implementation", "sdpa"));
  if (impl == "eager") t.attention = AttentionKernel::kMaterialized;
  else if (impl == "sdpa" || impl == "flash_attention_2")  // a relative position bias (T5, Swin) keeps the scores
    t.attention = HasRelativePositionBias(t.family) ? AttentionKernel::kMaterialized : AttentionKernel::kFused;
  else if (!impl.empty())
    return c.Bad("attn_implementation", fmt::format("'{}' is not eager, sdpa or flash_attention_2", impl));
  if (o.attention) t.attention = *o.attention;
  return Status::Ok();
}

}  // namespace

Result<ModelSpec> ParseHfConfig(std::string_view text, const std::string& source, const ModelOverrides& o) {
  if (o.layers || o.hidden || o.heads || o.ffn || o.vocab || o.dropout)
    return BadInput(fmt::format("{}: the sizes come from the config; only --batch, --seq, --dtype, --optimizer, --attention, --capacity-factor apply", source));
  if (JsonDeeperThan(text))
    return BadInput(fmt::format("{}: JSON nested deeper than {} levels (an HF config is flat)", source, kMaxJsonDepth));
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return BadInput(fmt::format("{}: not a JSON object", source));
  const Config c{j, source};
  const std::string type = c.String("model_type", "");
  const Handler* handler = nullptr;
  for (const Handler& h : kHandlers)
    if (type == h.model_type) handler = &h;
  if (!handler)
    return c.Bad("model_type", fmt::format("'{}' is not one of gpt2, bert, roberta, t5, mt5, vit, swin, llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v2, deepseek_v3", type));
  Result<TransformerConfig> t = handler->read(c);
  if (!t) return t.error();
  if (o.seq && (t->family == Family::kVit || t->family == Family::kSwin))
    return BadInput(fmt::format("{}: --seq: not applicable to an image model", source));
  // transformers' causal and masked LM losses read logits.float() (T5's and the image classifiers' do not)
  t->loss_in_fp32 = t->family == Family::kGpt || t->family == Family::kBert || t->family == Family::kLlama;
  // and their RMSNorm is an eager module (LlamaRMSNorm, MistralRMSNorm, Qwen2RMSNorm, ...)
  t->eager_rms_norm = t->family == Family::kLlama;
  if (o.seq) t->seq = *o.seq;
  if (o.batch) t->batch = *o.batch;
  if (o.capacity_factor) {  // a training choice, not the config's
    if (t->experts == 0) return BadInput(fmt::format("{}: --capacity-factor: the model has no mixture of experts", source));
    if (Status range = CheckCapacityFactor(*o.capacity_factor); !range)
      return BadInput(fmt::format("{}: {}", source, range.error().message));
    t->capacity_factor = *o.capacity_factor;
  }
  const std::string name = c.String("_name_or_path", "");  // transformers writes "" for a config built in code
  ModelSpec spec{name.empty() ? type : name, *t, {}};
  KIWI_RETURN_IF_ERROR(ApplyPrecision(c, o, spec));
  const TransformerConfig& built = std::get<TransformerConfig>(spec.config);
  KIWI_RETURN_IF_ERROR(detail::ValidateTransformerConfig(built, source));
  return spec;
}

}  // namespace kiwi::models
