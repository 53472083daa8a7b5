// Parameter counts: every builder against the closed forms, and the presets against published sizes
// (Galvatron-BMW Table I, GPT-3 13B, the Llama 2 and 3 model cards, Mixtral 8x7B, Qwen3-30B-A3B).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "kiwi/models/presets.h"
#include "model_test_util.h"

namespace kiwi::models {
namespace {

using test_util::Overrides;

int64_t GraphParameterCount(const ir::Graph& graph) {
  int64_t total = 0;
  for (const ir::Node& node : graph.nodes())
    if (node.kind == ir::OpKind::kParameter) total += node.output.NumElements();
  return total;
}

int64_t BuiltCount(const TransformerConfig& config) {
  Result<ir::Graph> graph = BuildTransformerForward(config);
  EXPECT_TRUE(graph.ok()) << graph.error().message;
  return graph.ok() ? GraphParameterCount(*graph) : -1;
}

struct Size {
  int layers;
  int64_t hidden, heads, seq, ffn;
};
constexpr Size kSizes[] = {{1, 64, 4, 16, 0}, {2, 96, 6, 8, 200}, {3, 128, 8, 32, 0}};

TransformerConfig Sized(Family family, const Size& size, bool embeddings) {
  TransformerConfig c;
  c.family = family;
  c.layers = size.layers;
  c.hidden = size.hidden;
  c.heads = size.heads;
  c.seq = size.seq;
  c.ffn = size.ffn;
  c.batch = 2;
  c.vocab = 101;
  c.embeddings = embeddings;
  c.decoder_layers = size.layers + 1;  // T5 only
  c.decoder_seq = 4;                   // T5 only
  c.image = 32;                        // ViT only: 4 x 4 patches
  c.patch = 8;
  return c;
}

TEST(ParameterCount, BuildersMatchClosedFormForEveryFamilyAndSize) {
  for (Family family : {Family::kGpt, Family::kBert, Family::kT5, Family::kVit, Family::kLlama}) {
    for (const Size& size : kSizes) {
      for (bool embeddings : {true, false}) {
        TransformerConfig c = Sized(family, size, embeddings);
        SCOPED_TRACE(testing::Message() << "family " << static_cast<int>(family) << " hidden " << c.hidden
                                        << " embeddings " << embeddings);
        EXPECT_EQ(BuiltCount(c), ClosedFormParameterCount(c));
      }
    }
  }
}

TEST(ParameterCount, GroupedQueryAttentionMatchesClosedForm) {
  TransformerConfig c = Sized(Family::kLlama, {2, 128, 8, 16, 344}, true);
  c.kv_heads = 2;
  EXPECT_EQ(BuiltCount(c), ClosedFormParameterCount(c));
  // k and v shrink from h x h to h x (kv_heads * d): 2 * 128 * (128 - 32) fewer per layer.
  TransformerConfig full = c;
  full.kv_heads = 0;
  EXPECT_EQ(ClosedFormParameterCount(full) - ClosedFormParameterCount(c), 2 * 2 * 128 * 96);
}

TEST(ParameterCount, SwinBuilderMatchesClosedForm) {
  TransformerConfig a;  // 16x16 tokens, windows 4/4/4/2 (the last stage clips the window)
  a.family = Family::kSwin;
  a.image = 32, a.patch = 2, a.window = 4, a.hidden = 32, a.heads = 1, a.batch = 2, a.vocab = 10;
  a.stage_depths = {1, 1, 2, 1};
  a.layers = 5;
  TransformerConfig b = a;  // two stages of 14x14 and 7x7 tokens with 7x7 windows
  b.image = 56, b.patch = 4, b.window = 7, b.hidden = 64, b.heads = 2, b.stage_depths = {2, 1}, b.layers = 3;
  for (TransformerConfig c : {a, b}) {
    for (bool embeddings : {true, false}) {
      c.embeddings = embeddings;
      EXPECT_EQ(BuiltCount(c), ClosedFormParameterCount(c)) << "hidden " << c.hidden << " embeddings " << embeddings;
    }
  }
}

TEST(ParameterCount, ClosedFormOfGptIsNarayanansFormula) {
  // 12 L h^2 + 13 L h + (2V + s) h + 2h for the untied LM head (Narayanan et al. 2021 with biases).
  TransformerConfig c = Sized(Family::kGpt, {3, 64, 4, 16, 0}, true);
  const int64_t l = 3, h = 64, v = 101, s = 16;
  EXPECT_EQ(ClosedFormParameterCount(c), 12 * l * h * h + 13 * l * h + (2 * v + s) * h + 2 * h);
}

// Galvatron-BMW Table I ("Param. Num"): the builders come within 0.2% of every published size.
TEST(ParameterCount, GalvatronTableIPresets) {
  const std::pair<const char*, double> kTable[] = {
      {"bert-huge-32", 672e6}, {"bert-huge-48", 987e6}, {"vit-huge-32", 632e6},  {"vit-huge-48", 947e6},
      {"t5-large-32", 502e6},  {"t5-large-48", 737e6},  {"t5-512-4-32", 502e6},  {"t5-512-4-48", 737e6},
      {"swin-huge-32", 701e6}, {"swin-huge-48", 1016e6},
  };
  for (const auto& [name, paper] : kTable) {
    Result<ModelSpec> spec = LoadModel(name, Overrides().Batch(1));
    ASSERT_TRUE(spec.ok()) << spec.error().message;
    Result<ir::Graph> graph = BuildForwardGraph(*spec);
    ASSERT_TRUE(graph.ok()) << graph.error().message;
    const int64_t count = GraphParameterCount(*graph);
    EXPECT_EQ(count, ClosedFormParameterCount(std::get<TransformerConfig>(spec->config))) << name;
    EXPECT_LT(std::abs(static_cast<double>(count) - paper) / paper, 0.002) << name << ": " << count;
  }
}

TEST(ParameterCount, Gpt3_13bIsWithinOnePercentOf13Billion) {
  Result<ModelSpec> spec = LoadModel("gpt3-13b", Overrides().Seq(64).Batch(1));  // seq sets the positions only
  ASSERT_TRUE(spec.ok());
  TransformerConfig c = std::get<TransformerConfig>(spec->config);
  c.seq = 2048;
  const int64_t count = ClosedFormParameterCount(c);
  // 12*40*5120^2 + 13*40*5120 + (2*50257 + 2048)*5120 + 2*5120
  EXPECT_EQ(count, int64_t{13'110'702'080});
  EXPECT_LT(std::abs(static_cast<double>(count) - 13.0e9) / 13.0e9, 0.01);
  Result<ir::Graph> graph = BuildForwardGraph(*spec);
  ASSERT_TRUE(graph.ok());
  EXPECT_EQ(GraphParameterCount(*graph), count - (2048 - 64) * 5120);
}

TEST(ParameterCount, LlamaMatchesTheReleasedCheckpoints) {
  // Parameter totals of the released meta-llama/Llama-2-{7b,70b}-hf and Llama-3.1-{8B,70B,405B}
  // checkpoints (the sums of their safetensors' tensor sizes).
  for (const auto& [name, released] : {std::pair{"llama2-7b", int64_t{6'738'415'616}},
                                       std::pair{"llama2-70b", int64_t{68'976'648'192}},
                                       std::pair{"llama3-8b", int64_t{8'030'261'248}},
                                       std::pair{"llama3-70b", int64_t{70'553'706'496}},
                                       std::pair{"llama3-405b", int64_t{405'853'388'800}}}) {
    Result<ModelSpec> spec = LoadModel(name);
    ASSERT_TRUE(spec.ok());
    Result<ir::Graph> graph = BuildForwardGraph(*spec);  // full size: metadata only
    ASSERT_TRUE(graph.ok()) << graph.error().message;
    EXPECT_EQ(GraphParameterCount(*graph), released) << name;
    EXPECT_EQ(ClosedFormParameterCount(std::get<TransformerConfig>(spec->config)), released) << name;
  }
}

TEST(ParameterCount, MixtureOfExpertsAndQwen3AttentionMatchClosedForm) {
  for (bool qk_norm : {false, true}) {
    TransformerConfig c = Sized(Family::kLlama, {2, 64, 4, 8, 48}, true);
    c.experts = 4, c.top_k = 2, c.kv_heads = 2, c.head_dim = qk_norm ? 32 : 0, c.qk_norm = qk_norm;
    SCOPED_TRACE(qk_norm);
    EXPECT_EQ(BuiltCount(c), ClosedFormParameterCount(c));
  }
}

TEST(ParameterCount, MixturesOfExpertsMatchTheReleasedCheckpoints) {
  // Parameter totals of mistralai/Mixtral-8x7B-v0.1 and Qwen/Qwen3-30B-A3B: the sums of the tensor
  // sizes of transformers' MixtralForCausalLM and Qwen3MoeForCausalLM built from the released configs.
  // DeepSeek-V2-Lite, V2 and V3 likewise (DeepseekV2ForCausalLM, DeepseekV3ForCausalLM: V3 without its
  // multi-token prediction module, which transformers does not build, and without the routers'
  // e_score_correction_bias, a buffer there).
  for (const auto& [name, released] : {std::pair{"mixtral-8x7b", int64_t{46'702'792'704}},
                                       std::pair{"qwen3-30b-a3b", int64_t{30'532'122'624}},
                                       std::pair{"deepseek-v2-lite", int64_t{15'706'484'224}},
                                       std::pair{"deepseek-v2", int64_t{235'741'434'880}},
                                       std::pair{"deepseek-v3", int64_t{671'026'404'352}}}) {
    Result<ModelSpec> spec = LoadModel(name);
    ASSERT_TRUE(spec.ok());
    Result<ir::Graph> graph = BuildForwardGraph(*spec);
    ASSERT_TRUE(graph.ok()) << graph.error().message;
    EXPECT_EQ(GraphParameterCount(*graph), released) << name;
    EXPECT_EQ(ClosedFormParameterCount(std::get<TransformerConfig>(spec->config)), released) << name;
  }
}

}  // namespace
}  // namespace kiwi::models
