// HuggingFace config.json files (abridged copies of the published configs) read as kiwi models:
// sizes per family, precision, overrides, the Llama 2 7B config giving the same model as the preset,
// and errors naming the field.
#include "kiwi/models/hf_config.h"
#include "kiwi/ir/backward.h"
#include "kiwi/models/transformer.h"

#include <gtest/gtest.h>

namespace kiwi::models {
namespace {

TransformerConfig Transformer(const Result<ModelSpec>& spec) {
  EXPECT_TRUE(spec.ok()) << (spec.ok() ? "" : spec.error().message);
  return spec.ok() ? std::get<TransformerConfig>(spec->config) : TransformerConfig{};
}

constexpr const char* kGpt2 = R"({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": null,
  "n_positions": 1024, "vocab_size": 50257, "architectures": ["GPT2LMHeadModel"]})";
constexpr const char* kLlama2 = R"({"_name_or_path": "meta-llama/Llama-2-7b-hf", "model_type": "llama",
  "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 4096, "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 32, "torch_dtype": "float16", "vocab_size": 32000})";

TEST(HfConfig, Gpt2) {
  const TransformerConfig t = Transformer(ParseHfConfig(kGpt2, "gpt2.json"));
  EXPECT_EQ(t.family, Family::kGpt);
  EXPECT_EQ(t.layers, 12);
  EXPECT_EQ(t.hidden, 768);
  EXPECT_EQ(t.heads, 12);
  EXPECT_EQ(t.ffn, 0);  // n_inner null: 4 x hidden
  EXPECT_EQ(t.seq, 1024);
  EXPECT_EQ(t.dtype, ir::DType::kF32);
  // GPT2LMHeadModel's lm_head is its wte (tie_word_embeddings, true by default): 124,439,808 parameters,
  // as HuggingFace counts GPT-2; an untied config adds the head's 50257 x 768.
  EXPECT_TRUE(t.tied_embeddings);
  EXPECT_EQ(ClosedFormParameterCount(t), 124'439'808);
  const std::string untied = std::string(kGpt2).replace(std::string(kGpt2).find('}'), 1, R"(, "tie_word_embeddings": false})");
  const TransformerConfig u = Transformer(ParseHfConfig(untied, "gpt2.json"));
  EXPECT_FALSE(u.tied_embeddings);
  EXPECT_EQ(ClosedFormParameterCount(u), 124'439'808 + 50257 * 768);
  // Planned at a shorter sequence the position table keeps its n_positions rows (the sequence looks up
  // the first 128), in the closed form and in the graph alike.
  const TransformerConfig short_seq = Transformer(ParseHfConfig(kGpt2, "gpt2.json", {.seq = 128}));
  EXPECT_EQ(short_seq.seq, 128);
  EXPECT_EQ(short_seq.max_positions, 1024);
  EXPECT_EQ(ClosedFormParameterCount(short_seq), 124'439'808);
  Result<ir::Graph> g = BuildTransformerForward(short_seq);
  ASSERT_TRUE(g.ok()) << g.error().message;
  int64_t parameters = 0;
  for (const ir::Node& n : g->nodes())
    if (n.kind == ir::OpKind::kParameter) parameters += n.output.NumElements();
  EXPECT_EQ(parameters, 124'439'808);
}

// GPT2Config's activation_function "gelu_new" (its default) is transformers' NewGELUActivation, the tanh
// GELU as eager arithmetic: autograd keeps tanh's output, 0.5 x and 1 + tanh beside x, three tensors of
// the MLP's width (4 x hidden) more a layer than torch's fused GELU ("gelu_pytorch_tanh", "gelu").
TEST(HfConfig, Gpt2sNewGeluKeepsThreeMoreTensorsOfTheMlpsWidth) {
  auto layer_saved = [](const std::string& act) {
    const std::string config = R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 128)" +
                               (act.empty() ? std::string() : R"(, "activation_function": ")" + act + "\"") + "}";
    const TransformerConfig t = Transformer(ParseHfConfig(config, "gpt2.json", {.seq = 16, .batch = 2}));
    Result<ir::Graph> forward = BuildTransformerForward(t);
    EXPECT_TRUE(forward.ok()) << forward.error().message;
    Result<ir::Graph> training = ir::BuildTrainingGraph(*forward, {.optimizer = ir::Optimizer::kAdam});
    EXPECT_TRUE(training.ok()) << training.error().message;
    return ir::SavedActivationBytes(*training, 1);
  };
  const int64_t width = 2 * 16 * 4 * 64 * 4;  // batch x seq x 4 hidden, fp32
  EXPECT_EQ(layer_saved("") - layer_saved("gelu_pytorch_tanh"), 3 * width);
  EXPECT_EQ(layer_saved("gelu_new"), layer_saved(""));
  EXPECT_EQ(layer_saved("gelu"), layer_saved("gelu_pytorch_tanh"));
}

// A config that names no attention implementation (what save_pretrained and to_json_file write) runs
// transformers' default, "sdpa": fused, no [s, s] scores kept; "eager" keeps them. A relative position
// bias (T5, Swin) keeps them under sdpa too.
TEST(HfConfig, AConfigWithoutAnAttentionImplementationRunsSdpa) {
  auto attention = [](const std::string& impl) {
    std::string config = kGpt2;
    if (!impl.empty()) config.replace(config.find('}'), 1, R"(, "attn_implementation": ")" + impl + "\"}");
    return Transformer(ParseHfConfig(config, "gpt2.json")).attention;
  };
  EXPECT_EQ(attention(""), AttentionKernel::kFused);
  EXPECT_EQ(attention("sdpa"), AttentionKernel::kFused);
  EXPECT_EQ(attention("eager"), AttentionKernel::kMaterialized);
  EXPECT_EQ(Transformer(ParseHfConfig(kGpt2, "gpt2.json", {.attention = AttentionKernel::kMaterialized})).attention,
            AttentionKernel::kMaterialized);  // --attention says otherwise
}

TEST(HfConfig, LlamaTwoSevenBIsThePreset) {
  Result<ModelSpec> hf = ParseHfConfig(kLlama2, "config.json", {.batch = 8});
  const TransformerConfig t = Transformer(hf);
  EXPECT_EQ(hf->name, "meta-llama/Llama-2-7b-hf");
  EXPECT_EQ(t.kv_heads, 0);
  EXPECT_EQ(t.dtype, ir::DType::kF16);
  EXPECT_TRUE(hf->training.master_weights);
  Result<ModelSpec> preset = LoadModel("llama2-7b");
  ASSERT_TRUE(preset.ok());
  EXPECT_EQ(ClosedFormParameterCount(t), ClosedFormParameterCount(std::get<TransformerConfig>(preset->config)));
  EXPECT_FALSE(t.dropout);
}

// Abridged from mistralai/Mixtral-8x7B-v0.1 and Qwen/Qwen3-30B-A3B.
constexpr const char* kMixtral = R"({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000, "torch_dtype": "bfloat16"})";
constexpr const char* kQwen3Moe = R"({"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
  "head_dim": 128, "max_position_embeddings": 40960, "num_attention_heads": 32, "num_hidden_layers": 48,
  "num_key_value_heads": 4, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
  "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": true, "vocab_size": 151936,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";

// Abridged from deepseek-ai/DeepSeek-V3 and deepseek-ai/DeepSeek-V2-Lite (whose q_lora_rank is null).
constexpr const char* kDeepSeekV3 = R"({"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
  "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_nextn_predict_layers": 1, "num_attention_heads": 128,
  "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8,
  "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
  "first_k_dense_replace": 3, "moe_layer_freq": 1, "scoring_func": "sigmoid", "max_position_embeddings": 163840,
  "rope_scaling": {"factor": 40, "type": "yarn"}, "vocab_size": 129280, "tie_word_embeddings": false,
  "attention_bias": false, "torch_dtype": "bfloat16"})";
constexpr const char* kDeepSeekV2Lite = R"({"model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
  "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
  "n_shared_experts": 2, "n_routed_experts": 64, "num_experts_per_tok": 6, "kv_lora_rank": 512, "q_lora_rank": null,
  "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "first_k_dense_replace": 1, "moe_layer_freq": 1,
  "max_position_embeddings": 163840, "vocab_size": 102400, "torch_dtype": "bfloat16"})";

TEST(HfConfig, DeepSeekConfigsAreThePresets) {
  for (const auto& [text, preset] : {std::pair{kDeepSeekV3, "deepseek-v3"}, std::pair{kDeepSeekV2Lite, "deepseek-v2-lite"}}) {
    const TransformerConfig t = Transformer(ParseHfConfig(text, "config.json", {.seq = 4096}));
    Result<ModelSpec> p = LoadModel(preset);
    ASSERT_TRUE(p.ok());
    const TransformerConfig& want = std::get<TransformerConfig>(p->config);
    EXPECT_EQ(t.mla.kv_rank, want.mla.kv_rank) << preset;
    EXPECT_EQ(t.mla.q_rank, want.mla.q_rank) << preset;
    EXPECT_EQ(t.mla.rope, want.mla.rope) << preset;
    EXPECT_EQ(t.dense_layers, want.dense_layers) << preset;
    EXPECT_EQ(t.dense_ffn, want.dense_ffn) << preset;
    EXPECT_EQ(t.shared_expert_ffn, want.shared_expert_ffn) << preset;
    EXPECT_FALSE(t.shared_expert_gate) << preset;
    EXPECT_EQ(t.dtype, ir::DType::kBF16) << preset;
    EXPECT_EQ(ClosedFormParameterCount(t), ClosedFormParameterCount(want)) << preset;
  }
  const auto error = [](std::string text, const std::string& from, const std::string& to) {
    text.replace(text.find(from), from.size(), to);
    Result<ModelSpec> r = ParseHfConfig(text, "d.json");
    return r.ok() ? std::string("read") : r.error().message;
  };
  EXPECT_EQ(error(kDeepSeekV3, "\"moe_layer_freq\": 1", "\"moe_layer_freq\": 2"),
            "d.json: moe_layer_freq: kiwi builds every layer after the dense ones with experts (1)");
  EXPECT_EQ(error(kDeepSeekV3, "\"attention_bias\": false", "\"attention_bias\": true"),
            "d.json: attention_bias: kiwi's latent attention has no biases (false)");
  EXPECT_EQ(error(kDeepSeekV3, "\"first_k_dense_replace\": 3", "\"first_k_dense_replace\": 62"),
            "d.json: first_k_dense_replace: 62 is more than the 61 layers");
  EXPECT_EQ(error(kDeepSeekV3, "\"q_lora_rank\": 1536", "\"q_lora_rank\": -1"),
            "d.json: q_lora_rank: must be a non-negative integer (got -1)");
  EXPECT_EQ(error(kDeepSeekV3, "\"kv_lora_rank\": 512, ", ""), "d.json: kv_lora_rank: missing");
  EXPECT_EQ(error(kDeepSeekV2Lite, "\"num_key_value_heads\": 16", "\"num_key_value_heads\": 8"),
            "d.json: kv_heads: latent attention has a key and value head per query head (16), got 8");
}

TEST(HfConfig, MixturesOfExpertsAreThePresets) {
  for (const auto& [text, preset] : {std::pair{kMixtral, "mixtral-8x7b"}, std::pair{kQwen3Moe, "qwen3-30b-a3b"}}) {
    const TransformerConfig t = Transformer(ParseHfConfig(text, "config.json", {.seq = 4096}));
    Result<ModelSpec> p = LoadModel(preset);
    ASSERT_TRUE(p.ok());
    const TransformerConfig& want = std::get<TransformerConfig>(p->config);
    EXPECT_EQ(t.experts, want.experts) << preset;
    EXPECT_EQ(t.top_k, want.top_k) << preset;
    EXPECT_EQ(t.head_dim, want.head_dim) << preset;
    EXPECT_EQ(t.qk_norm, want.qk_norm) << preset;
    EXPECT_EQ(ClosedFormParameterCount(t), ClosedFormParameterCount(want)) << preset;
  }
  std::string dense_layers = kQwen3Moe;
  dense_layers.replace(dense_layers.find("\"mlp_only_layers\": []"), 21, "\"mlp_only_layers\": [0]");
  Result<ModelSpec> r = ParseHfConfig(dense_layers, "q.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "q.json: mlp_only_layers: kiwi builds every layer's MLP as experts (decoder_sparse_step 1, no mlp_only_layers)");
  std::string too_many = kMixtral;
  too_many.replace(too_many.find("\"num_experts_per_tok\": 2"), 24, "\"num_experts_per_tok\": 9");
  r = ParseHfConfig(too_many, "m.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "m.json: top_k: must be in [1, 8] (the experts), got 9");
  // A capacity factor is a training choice: --capacity-factor applies to an MoE config, not to a dense one.
  EXPECT_EQ(Transformer(ParseHfConfig(kMixtral, "m.json", {.capacity_factor = 1.25})).capacity_factor, 1.25);
  r = ParseHfConfig(kMixtral, "m.json", {.capacity_factor = 0.0});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "m.json: --capacity-factor: must be in (0, 64], got 0");
  r = ParseHfConfig(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                         "num_hidden_layers": 2, "vocab_size": 100})", "l.json", {.capacity_factor = 1.25});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "l.json: --capacity-factor: the model has no mixture of experts");
}

// Qwen2 (biases on q/k/v), Qwen2-MoE (a gated shared expert beside 60 experts) and tied embeddings
// (Qwen2 0.5B, Llama 3.2 1B): the parameters of transformers' Qwen2ForCausalLM, Qwen2MoeForCausalLM and
// LlamaForCausalLM built from these configs (transformers 5.24, counted on the meta device).
TEST(HfConfig, Qwen2Qwen2MoeAndTiedEmbeddingsCountAsTransformersBuildsThem) {
  const std::pair<const char*, int64_t> cases[] = {
      {R"({"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
          "num_hidden_layers": 24, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": true})",
       494'032'768},
      {R"({"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
          "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": false})",
       7'615'616'512},
      {R"({"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 16,
          "num_hidden_layers": 24, "num_key_value_heads": 16, "vocab_size": 151936, "num_experts": 60,
          "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
          "decoder_sparse_step": 1, "mlp_only_layers": [], "qkv_bias": true, "tie_word_embeddings": false})",
       14'315'784'192},
      {R"({"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
          "num_hidden_layers": 16, "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": true})",
       1'235'814'400},
  };
  for (const auto& [text, released] : cases) {
    Result<ModelSpec> spec = ParseHfConfig(text, "config.json", {.seq = 64, .batch = 1});
    const TransformerConfig t = Transformer(spec);
    EXPECT_EQ(spec->name.rfind(t.experts > 0 ? "qwen2_moe" : t.qkv_bias ? "qwen2" : "llama", 0), 0u);  // no _name_or_path
    EXPECT_EQ(ClosedFormParameterCount(t), released) << text;
    Result<ir::Graph> graph = BuildForwardGraph(*spec);
    ASSERT_TRUE(graph.ok()) << graph.error().message;
    int64_t built = 0;
    for (const ir::Node& n : graph->nodes())
      if (n.kind == ir::OpKind::kParameter) built += n.output.NumElements();
    EXPECT_EQ(built, released) << text;
  }
  Result<ModelSpec> bad = ParseHfConfig(R"({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100, "tie_word_embeddings": "yes"})", "q.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "q.json: tie_word_embeddings: must be true or false (got \"yes\")");
}

TEST(HfConfig, BertT5VitSwin) {
  const TransformerConfig bert = Transformer(ParseHfConfig(
      R"({"model_type": "bert", "num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16,
          "intermediate_size": 4096, "max_position_embeddings": 512, "vocab_size": 30522})", "bert.json", {.seq = 128}));
  EXPECT_EQ(bert.layers, 24);
  EXPECT_EQ(bert.seq, 128);  // override
  const TransformerConfig t5 = Transformer(ParseHfConfig(
      R"({"model_type": "t5", "num_layers": 6, "num_decoder_layers": 4, "d_model": 512, "num_heads": 8, "d_kv": 64,
          "d_ff": 2048, "vocab_size": 32128, "feed_forward_proj": "relu"})", "t5.json"));
  EXPECT_EQ(t5.layers, 6);
  EXPECT_EQ(t5.decoder_layers, 4);
  EXPECT_EQ(t5.ffn, 2048);
  const TransformerConfig vit = Transformer(ParseHfConfig(
      R"({"model_type": "vit", "num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
          "intermediate_size": 3072, "image_size": 224, "patch_size": 16})", "vit.json"));
  EXPECT_EQ(vit.seq, 196);
  EXPECT_EQ(vit.vocab, 1000);
  const TransformerConfig swin = Transformer(ParseHfConfig(
      R"({"model_type": "swin", "embed_dim": 96, "depths": [2, 2, 6, 2], "num_heads": [3, 6, 12, 24],
          "window_size": 7, "image_size": 224, "patch_size": 4})", "swin.json"));
  EXPECT_EQ(swin.layers, 12);
  EXPECT_EQ(swin.stage_depths, (std::vector<int>{2, 2, 6, 2}));
  EXPECT_EQ(swin.seq, 56 * 56);
}

// transformers' LM losses read logits.float(): a 16-bit model's loss, its saved softmax and the logits'
// gradient are fp32 (on an H200, HF Llama bf16 peaked 8-24% above kiwi's count without it, docs/distributed.md).
TEST(HfConfig, LanguageModelLossesReadFp32Logits) {
  const TransformerConfig llama = Transformer(ParseHfConfig(kLlama2, "config.json", {.seq = 64, .batch = 2}));
  ASSERT_TRUE(llama.loss_in_fp32);
  Result<ir::Graph> forward = BuildTransformerForward(llama);
  ASSERT_TRUE(forward.ok()) << forward.error().message;
  const ir::Node* cast = nullptr;
  const ir::Node* loss = nullptr;
  for (const ir::Node& n : forward->nodes()) {
    if (n.op == "cast") cast = &n;
    if (n.kind == ir::OpKind::kLoss) loss = &n;
  }
  ASSERT_NE(cast, nullptr);
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(cast->output.dtype, ir::DType::kF32);
  EXPECT_EQ(cast->output.shape, (ir::Shape{2, 64, 32000}));
  EXPECT_EQ(forward->node(cast->inputs[0]).output.dtype, ir::DType::kF16);
  EXPECT_EQ(loss->inputs[0], cast->id);
  // The backward pass casts the logits' fp32 gradient back to the model's dtype.
  Result<ir::Graph> training = ir::BuildTrainingGraph(*forward, {.optimizer = ir::Optimizer::kAdam});
  ASSERT_TRUE(training.ok()) << training.error().message;
  int back = 0;
  for (const ir::Node& n : training->nodes())
    back += n.is_backward() && n.op == "cast" && n.output.dtype == ir::DType::kF16;
  EXPECT_EQ(back, 1);
  // fp32 models have nothing to cast; T5's loss (CrossEntropyLoss on its logits) does not upcast.
  const TransformerConfig fp32 = Transformer(ParseHfConfig(kLlama2, "config.json", {.seq = 64, .batch = 2,
                                                                                    .dtype = ir::DType::kF32}));
  Result<ir::Graph> plain = BuildTransformerForward(fp32);
  ASSERT_TRUE(plain.ok());
  for (const ir::Node& n : plain->nodes()) EXPECT_NE(n.op, "cast") << n.name;
  EXPECT_FALSE(Transformer(ParseHfConfig(R"({"model_type": "t5", "num_layers": 2, "d_model": 64, "num_heads": 2,
      "d_kv": 32, "d_ff": 128, "vocab_size": 320})", "t5.json")).loss_in_fp32);
}

TEST(HfConfig, ErrorsNameTheField) {
  auto message = [](const char* text) {
    Result<ModelSpec> r = ParseHfConfig(text, "c.json");
    return r.ok() ? std::string("ok") : r.error().message;
  };
  EXPECT_NE(message(R"({"model_type": "bloom"})").find("c.json: model_type"), std::string::npos);
  EXPECT_NE(message(R"({"model_type": "gpt2", "n_embd": 768, "n_head": 12})").find("c.json: n_layer: missing"),
            std::string::npos);
  EXPECT_NE(message(R"({"model_type": "gpt2", "n_layer": -1, "n_embd": 768, "n_head": 12})").find("n_layer"),
            std::string::npos);
  EXPECT_NE(message(R"({"model_type": "t5", "num_layers": 2, "d_model": 512, "num_heads": 8, "d_ff": 1024,
                        "feed_forward_proj": "gated-gelu"})").find("feed_forward_proj"), std::string::npos);
  EXPECT_NE(message(R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 768, "n_head": 7})").find("heads"),
            std::string::npos);
  EXPECT_NE(message(R"({"model_type": "swin", "embed_dim": 96, "depths": [2, 2], "num_heads": [4, 8]})").find("num_heads"),
            std::string::npos);
  EXPECT_NE(message("[1]").find("not a JSON object"), std::string::npos);
  // --layers' cap holds for configs too (100,000 layers ran for minutes)
  EXPECT_NE(message(R"({"model_type": "gpt2", "n_layer": 100000, "n_embd": 64, "n_head": 4})")
                .find("c.json: n_layer: 100000 layers is too many (at most 10000)"),
            std::string::npos);
  EXPECT_NE(message(R"({"model_type": "llama", "num_hidden_layers": 10001, "hidden_size": 64, "num_attention_heads": 4,
                        "intermediate_size": 128})").find("num_hidden_layers: 10001 layers is too many"),
            std::string::npos);
  EXPECT_FALSE(ParseHfConfig(kGpt2, "gpt2.json", {.layers = 3}).ok());
  EXPECT_FALSE(ParseHfConfig(kGpt2, "gpt2.json", {.vocab = 50304}).ok());  // the config's vocab_size rules
}

// Found by fuzz/hf_config_fuzzer (issue 18): sizes that read well but do not fit together were
// refused as "model config: heads: ...", naming no file.
// Found by hf_config_fuzzer: a model_type holding a newline (JSON "\n") was quoted raw, two lines.
TEST(HfConfig, AQuotedValueStaysOnOneLine) {
  Result<ModelSpec> r = ParseHfConfig(R"({"model_type": "g\\\nx"})", "f.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.rfind("f.json: model_type: 'g\\\\x0ax'", 0), 0u) << r.error().message;
}

TEST(HfConfig, SizesThatDoNotFitTogetherNameTheFile) {
  Result<ModelSpec> r = ParseHfConfig(R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    "num_attention_heads": 33, "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000})", "c.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "c.json: heads: 33 does not divide hidden 4096");
  r = ParseHfConfig(R"({"model_type": "swin", "embed_dim": 96, "depths": [2, 2], "num_heads": [3, 6], "image_size": 100,
    "patch_size": 4, "window_size": 7})", "c.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message.rfind("c.json: ", 0), 0u) << r.error().message;
}

TEST(HfConfig, DeepNestingIsRefusedNotACrash) {  // issue 18: recursive dump() of 100,000 levels
  const std::string deep =
      R"({"model_type": "gpt2", "n_layer": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  Result<ModelSpec> r = ParseHfConfig(deep, "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  EXPECT_NE(r.error().message.find("config.json: JSON nested deeper than 512 levels"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace kiwi::models
