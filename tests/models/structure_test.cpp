// The operator structure of each family: layers and scopes, dropout sites, attention shapes (heads,
// GQA groups, cross-attention, windows), per-layer FLOPs, and config errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "kiwi/models/mlp.h"
#include "kiwi/models/transformer.h"

namespace kiwi::models {
namespace {

using ir::Node;
using ir::OpKind;
using ir::Shape;

std::vector<const Node*> Select(const ir::Graph& g, const std::function<bool(const Node&)>& pred) {
  std::vector<const Node*> out;
  for (const Node& n : g.nodes())
    if (pred(n)) out.push_back(&n);
  return out;
}

std::vector<Shape> ShapesOf(const std::vector<const Node*>& nodes) {
  std::vector<Shape> shapes;
  for (const Node* n : nodes) shapes.push_back(n->output.shape);
  return shapes;
}

TransformerConfig Gpt(int layers, int64_t s, int64_t b, int64_t h, int64_t a) {
  TransformerConfig c;
  c.layers = layers, c.seq = s, c.batch = b, c.hidden = h, c.heads = a, c.vocab = 50;
  return c;
}

ir::Graph Build(const TransformerConfig& c) {
  Result<ir::Graph> g = BuildTransformerForward(c);
  EXPECT_TRUE(g.ok()) << g.error().message;
  return g.ok() ? std::move(*g) : ir::Graph();
}

TEST(GptStructure, LayersScopesAndMegatronDropoutSites) {
  const ir::Graph g = Build(Gpt(2, 8, 2, 32, 4));
  for (int layer = 0; layer < 2; ++layer) {
    const std::string prefix = "layer" + std::to_string(layer) + ".";
    auto in_layer = [&](const Node& n) { return n.layer == layer; };
    for (const Node* n : Select(g, in_layer)) EXPECT_EQ(n->scope.rfind(prefix, 0), 0u) << n->name;
    auto masks = Select(g, [&](const Node& n) { return in_layer(n) && n.kind == OpKind::kRandom; });
    // After softmax, after the attention output projection, after the second MLP matmul.
    EXPECT_EQ(ShapesOf(masks), (std::vector<Shape>{{2, 4, 8, 8}, {2, 8, 32}, {2, 8, 32}}));
    for (const Node* m : masks) {
      EXPECT_EQ(m->output.dtype, ir::DType::kU8);
      EXPECT_DOUBLE_EQ(m->attrs.dropout_p, 0.1);
    }
    auto scores = Select(g, [&](const Node& n) { return in_layer(n) && n.kind == OpKind::kBatchMatmul; });
    ASSERT_EQ(scores.size(), 2u);
    EXPECT_TRUE(scores[0]->attrs.transpose_b);
    EXPECT_EQ(ShapesOf(scores), (std::vector<Shape>{{2, 4, 8, 8}, {2, 4, 8, 8}}));
    EXPECT_EQ(Select(g, [&](const Node& n) { return in_layer(n) && n.kind == OpKind::kMatmul; }).size(), 6u);
    EXPECT_EQ(Select(g, [&](const Node& n) { return in_layer(n) && n.op == "gelu"; }).size(), 1u);
  }
  for (const Node* n : Select(g, [](const Node& n) { return n.layer == -1; }))
    EXPECT_TRUE(n->scope == "embed" || n->scope == "head") << n->name << " in " << n->scope;
}

TEST(GptStructure, LayerMatmulFlopsAre24bsh2Plus4bs2h) {
  // Narayanan et al. 2021: a layer's forward matmuls cost 24 b s h^2 + 4 b s^2 h.
  const int64_t s = 16, b = 2, h = 64;
  const ir::Graph g = Build(Gpt(2, s, b, h, 4));
  double flops = 0;
  for (const Node& n : g.nodes())
    if (n.layer == 1 && (n.kind == OpKind::kMatmul || n.kind == OpKind::kBatchMatmul)) flops += n.flops;
  EXPECT_DOUBLE_EQ(flops, static_cast<double>(24 * b * s * h * h + 4 * b * s * s * h));
}

TEST(LlamaStructure, GroupedQueryAttentionRotaryAndNoDropout) {
  TransformerConfig c = Gpt(2, 8, 1, 64, 8);
  c.family = Family::kLlama, c.kv_heads = 2, c.ffn = 96, c.dropout = false;
  const ir::Graph g = Build(c);
  EXPECT_TRUE(Select(g, [](const Node& n) { return n.kind == OpKind::kRandom; }).empty());
  EXPECT_EQ(Select(g, [](const Node& n) { return n.op == "rotary"; }).size(), 4u);  // q and k per layer
  auto scores = Select(g, [](const Node& n) { return n.kind == OpKind::kBatchMatmul && n.attrs.transpose_b; });
  ASSERT_EQ(scores.size(), 2u);
  EXPECT_EQ(scores[0]->output.shape, (Shape{1, 2, 4 * 8, 8}));  // [b, kv_heads, groups * s, s]
  auto k_weight = Select(g, [](const Node& n) { return n.name == "layer0.attn.k.weight"; });
  ASSERT_EQ(k_weight.size(), 1u);
  EXPECT_EQ(k_weight[0]->output.shape, (Shape{64, 16}));  // [h, kv_heads * d]
  EXPECT_TRUE(Select(g, [](const Node& n) { return n.kind == OpKind::kMatmul && n.inputs.size() == 3; }).empty());
  EXPECT_EQ(Select(g, [](const Node& n) { return n.op == "silu"; }).size(), 2u);
  EXPECT_EQ(Select(g, [](const Node& n) { return n.op == "rmsnorm"; }).size(), 5u);  // 2 per layer + final
}

TEST(MoeStructure, RouterTopKDispatchExpertsAndCombine) {
  // 2 x 8 tokens, 4 experts, top 2: 32 (token, expert) rows, 8 per expert.
  TransformerConfig c = Gpt(2, 8, 2, 64, 4);
  c.family = Family::kLlama, c.ffn = 96, c.dropout = false, c.experts = 4, c.top_k = 2;
  const ir::Graph g = Build(c);
  auto in_layer0 = [](const Node& n) { return n.layer == 0 && n.scope == "layer0.mlp"; };
  auto topk = Select(g, [&](const Node& n) { return in_layer0(n) && n.op == "topk"; });
  ASSERT_EQ(topk.size(), 2u);  // each token's experts; each expert's slots
  EXPECT_EQ(ShapesOf(topk), (std::vector<Shape>{{16, 2}, {4, 8}}));
  EXPECT_EQ(topk[0]->output.dtype, ir::DType::kI64);
  auto router = Select(g, [](const Node& n) { return n.name == "layer0.mlp.router.weight"; });
  ASSERT_EQ(router.size(), 1u);
  EXPECT_EQ(router[0]->output.shape, (Shape{64, 4}));
  auto experts = Select(g, [&](const Node& n) { return in_layer0(n) && n.kind == OpKind::kBatchMatmul; });
  EXPECT_EQ(ShapesOf(experts), (std::vector<Shape>{{4, 8, 96}, {4, 8, 96}, {4, 8, 64}}));  // gate, up, down
  // Three gathers: the gates, the dispatch into expert order, the combine back per token.
  EXPECT_EQ(ShapesOf(Select(g, [&](const Node& n) { return in_layer0(n) && n.kind == OpKind::kEmbedding; })),
            (std::vector<Shape>{{16, 2, 1}, {4, 8, 64}, {16, 2, 64}}));
  // Each token runs top_k experts: the experts' forward FLOPs are k times one dense SwiGLU MLP of the
  // same width (2 * 3 * tokens * h * f each), whatever the number of experts.
  double expert_flops = 0;
  for (const Node* n : experts) expert_flops += n->flops;
  EXPECT_DOUBLE_EQ(expert_flops, 2.0 * (2 * 3 * 16 * 64 * 96));
}

TEST(Qwen3Structure, HeadDimApartFromHiddenAndQkNorm) {
  TransformerConfig c = Gpt(1, 8, 1, 64, 8);
  c.family = Family::kLlama, c.kv_heads = 2, c.head_dim = 16, c.qk_norm = true, c.ffn = 96, c.dropout = false;
  const ir::Graph g = Build(c);
  auto weight = [&](const std::string& name) {
    auto w = Select(g, [&](const Node& n) { return n.name == name; });
    return w.size() == 1 ? w[0]->output.shape : Shape{};
  };
  EXPECT_EQ(weight("layer0.attn.q.weight"), (Shape{64, 128}));  // 8 heads of 16, wider than hidden 64
  EXPECT_EQ(weight("layer0.attn.k.weight"), (Shape{64, 32}));
  EXPECT_EQ(weight("layer0.attn.out.weight"), (Shape{128, 64}));
  EXPECT_EQ(weight("layer0.attn.q_norm.gamma"), (Shape{16}));
  EXPECT_EQ(weight("layer0.attn.k_norm.gamma"), (Shape{16}));
}

TEST(T5Structure, CrossAttentionReadsTheEncoderAndRelativeBiasIsAdded) {
  TransformerConfig c = Gpt(2, 16, 1, 32, 4);
  c.family = Family::kT5, c.decoder_layers = 3, c.decoder_seq = 4;
  const ir::Graph g = Build(c);
  auto cross = Select(g, [](const Node& n) {
    return n.kind == OpKind::kBatchMatmul && n.attrs.transpose_b && n.scope.find("cross_attn") != std::string::npos;
  });
  ASSERT_EQ(cross.size(), 3u);
  EXPECT_EQ(cross[0]->output.shape, (Shape{1, 4, 4, 16}));  // [b, a, decoder s, encoder s]
  EXPECT_EQ(cross[0]->layer, 2);                            // decoder layers follow the encoder's
  EXPECT_EQ(Select(g, [](const Node& n) { return n.name.find("scores_bias") != std::string::npos; }).size(), 5u);
  EXPECT_EQ(Select(g, [](const Node& n) { return n.op == "relu"; }).size(), 5u);
  EXPECT_TRUE(Select(g, [](const Node& n) { return n.op == "layernorm"; }).empty());
}

TEST(SwinStructure, WindowAttentionAndPatchMerging) {
  TransformerConfig c;
  c.family = Family::kSwin, c.image = 56, c.patch = 4, c.window = 7, c.hidden = 32, c.heads = 1, c.batch = 2;
  c.stage_depths = {2, 1}, c.layers = 3, c.vocab = 10;
  const ir::Graph g = Build(c);
  auto scores = Select(g, [](const Node& n) { return n.kind == OpKind::kBatchMatmul && n.attrs.transpose_b; });
  // 14x14 tokens = 4 windows of 7x7 at stage 1, 7x7 = 1 window at stage 2 (width and heads doubled).
  EXPECT_EQ(ShapesOf(scores), (std::vector<Shape>{{8, 1, 49, 49}, {8, 1, 49, 49}, {2, 2, 49, 49}}));
  auto merge = Select(g, [](const Node& n) { return n.name == "layer1.merge.reduction.weight"; });
  ASSERT_EQ(merge.size(), 1u);
  EXPECT_EQ(merge[0]->output.shape, (Shape{128, 64}));
  auto patch = Select(g, [](const Node& n) { return n.kind == OpKind::kConv; });
  ASSERT_EQ(patch.size(), 1u);
  EXPECT_EQ(patch[0]->output.shape, (Shape{2, 32, 14, 14}));
}

TEST(VitStructure, ConvPatchEmbeddingAndPooledClassifier) {
  TransformerConfig c = Gpt(1, 0, 2, 64, 4);
  c.family = Family::kVit, c.image = 32, c.patch = 8, c.seq = 16, c.vocab = 10;
  const ir::Graph g = Build(c);
  auto conv = Select(g, [](const Node& n) { return n.kind == OpKind::kConv; });
  ASSERT_EQ(conv.size(), 1u);
  EXPECT_EQ(conv[0]->output.shape, (Shape{2, 64, 4, 4}));
  EXPECT_EQ(conv[0]->attrs.stride, 8);
  auto loss = Select(g, [](const Node& n) { return n.kind == OpKind::kLoss; });
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_EQ(g.node(loss[0]->inputs[0]).output.shape, (Shape{2, 10}));
}

TEST(MlpStructure, OneLayerPerLinearAndActivation) {
  MlpConfig c{.widths = {8, 16, 4}, .batch = 3, .dtype = ir::DType::kF32, .bias = true, .activation = "gelu"};
  Result<ir::Graph> g = BuildMlpForward(c);
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto matmuls = Select(*g, [](const Node& n) { return n.kind == OpKind::kMatmul; });
  ASSERT_EQ(matmuls.size(), 2u);
  EXPECT_EQ(matmuls[0]->layer, 0);
  EXPECT_EQ(matmuls[1]->layer, 1);
  EXPECT_DOUBLE_EQ(matmuls[0]->flops, 2.0 * 3 * 8 * 16);
  EXPECT_EQ(Select(*g, [](const Node& n) { return n.op == "gelu"; }).size(), 2u);
  EXPECT_EQ(g->size(), 1 + 2 * 4 + 2);  // input, (w, b, matmul, act) x 2, labels, loss
}

void ExpectConfigError(const TransformerConfig& c, const std::string& field) {
  Result<ir::Graph> g = BuildTransformerForward(c);
  ASSERT_FALSE(g.ok()) << field;
  EXPECT_EQ(g.error().code, ErrorCode::kBadInput);
  EXPECT_THAT(g.error().message, ::testing::HasSubstr(field));
}

TEST(ConfigErrors, NameTheField) {
  TransformerConfig c = Gpt(2, 8, 1, 32, 5);
  ExpectConfigError(c, "heads: 5 does not divide hidden 32");
  c = Gpt(0, 8, 1, 32, 4);
  ExpectConfigError(c, "layers");
  c = Gpt(2, 8, 1, 32, 4);
  c.kv_heads = 3;
  ExpectConfigError(c, "kv_heads");
  c.kv_heads = 0, c.family = Family::kT5, c.decoder_layers = 0;
  ExpectConfigError(c, "decoder_layers");
  c.family = Family::kVit, c.image = 30, c.patch = 8;
  ExpectConfigError(c, "patch");
  c.family = Family::kSwin, c.image = 56, c.patch = 4, c.window = 5, c.stage_depths = {1, 1};
  ExpectConfigError(c, "window");
  c.window = 7, c.stage_depths = {1, 2};
  ExpectConfigError(c, "stage_depths");
  c = Gpt(2, 8, 1, 32, 4);
  c.experts = 4, c.top_k = 2;
  ExpectConfigError(c, "experts: kiwi builds mixture-of-experts layers for llama-style models, not gpt");
  c.family = Family::kLlama, c.top_k = 5;
  ExpectConfigError(c, "top_k: must be in [1, 4] (the experts), got 5");
  c.experts = 0, c.top_k = 2;
  ExpectConfigError(c, "top_k: 2 without experts");
  c.top_k = 0, c.head_dim = -1;
  ExpectConfigError(c, "head_dim");
  c.head_dim = 0, c.shared_expert_ffn = 64;
  ExpectConfigError(c, "shared_expert_ffn: 64 without experts");
  c = Gpt(2, 8, 1, 32, 4);
  c.qkv_bias = true;
  ExpectConfigError(c, "qkv_bias: only llama-style models take it, not gpt");
  c.qkv_bias = false, c.family = Family::kBert, c.tied_embeddings = true;
  ExpectConfigError(c, "tied_embeddings: only GPT- and llama-style models take it, not bert");
  Result<ir::Graph> mlp = BuildMlpForward({.widths = {8}});
  ASSERT_FALSE(mlp.ok());
  EXPECT_THAT(mlp.error().message, ::testing::HasSubstr("widths"));
  mlp = BuildMlpForward({.activation = "tanh"});
  ASSERT_FALSE(mlp.ok());
  EXPECT_THAT(mlp.error().message, ::testing::HasSubstr("activation"));
}

}  // namespace
}  // namespace kiwi::models
