// DeepSeek's layers in the model zoo: multi-head latent attention (the query and key/value latents
// normalized before their up-projections, one rotary key head shared by every head) and a mixture of
// experts after dense first layers, with ungated shared experts. Parameter counts against the closed
// form, and the layer profile's terms (experts, what TP keeps whole, what a context-parallel ring
// passes) against closed forms of a small config.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/cost/recompute_set.h"
#include "kiwi/ir/graph.h"
#include "kiwi/models/layer_model.h"
#include "kiwi/models/presets.h"

namespace kiwi::models {
namespace {

constexpr int64_t kHidden = 64, kHeads = 4, kSeq = 16, kExperts = 4, kWidth = 16;

// 3 layers (the first dense), hidden 64, 4 heads with 8 own + 4 rotary query/key features and 10 value
// features, latents of 24 (keys and values) and 32 (queries; 0: one query projection).
TransformerConfig SmallDeepSeek(int64_t q_rank) {
  TransformerConfig c;
  c.family = Family::kLlama;
  c.layers = 3;
  c.hidden = kHidden;
  c.heads = kHeads;
  c.seq = kSeq;
  c.batch = 2;
  c.vocab = 128;
  c.dtype = ir::DType::kBF16;
  c.dropout = false;
  c.ffn = kWidth;
  c.experts = kExperts;
  c.top_k = 2;
  c.shared_expert_ffn = kWidth;
  c.shared_expert_gate = false;
  c.dense_layers = 1;
  c.dense_ffn = 48;
  c.mla = {.kv_rank = 24, .q_rank = q_rank, .nope = 8, .rope = 4, .v = 10};
  return c;
}

int64_t GraphParameters(const ir::Graph& g) {
  int64_t n = 0;
  for (const ir::Node& node : g.nodes())
    if (node.kind == ir::OpKind::kParameter) n += node.output.NumElements();
  return n;
}

cost::LayerModel LayerModelOf(const TransformerConfig& c) {
  const ModelSpec spec{"small-deepseek", c, {ir::Optimizer::kAdam, true}};
  Result<cost::Cluster> cluster = cost::ClusterPreset("dgx-h100");
  EXPECT_TRUE(cluster.ok());
  Result<cost::LayerModel> m = BuildSpecLayerModel(spec, cost::CostModel{cluster->device});
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? *m : cost::LayerModel{};
}

TEST(LatentAttention, ParametersMatchTheClosedFormWithAndWithoutAQueryLatent) {
  for (int64_t q_rank : {0, 32}) {
    const TransformerConfig c = SmallDeepSeek(q_rank);
    Result<ir::Graph> g = BuildTransformerForward(c);
    ASSERT_TRUE(g.ok()) << g.error().message;
    EXPECT_EQ(GraphParameters(*g), ClosedFormParameterCount(c)) << q_rank;
  }
  // By hand, q_rank 32: q_a + norm + q_b, kv_a + k_rope + norm, k_b + v_b, out.
  const int64_t attention = 64 * 32 + 32 + 32 * 4 * 12 + 64 * (24 + 4) + 24 + 24 * 4 * (8 + 10) + 4 * 10 * 64;
  const int64_t moe = kExperts * (3 * 64 * kWidth + 64) + 3 * 64 * kWidth;  // experts, router, one shared expert
  const int64_t dense = 3 * 64 * 48;
  EXPECT_EQ(ClosedFormParameterCount(SmallDeepSeek(32)),
            attention * 3 + dense + 2 * moe + 3 * 2 * 64 + 2 * 128 * 64 + 64);
}

TEST(LatentAttention, TheDenseFirstLayerHasNoExpertsAndTheOthersDo) {
  const cost::LayerModel m = LayerModelOf(SmallDeepSeek(32));
  ASSERT_EQ(m.layers.size(), 3u);
  EXPECT_EQ(m.layers[0].experts, 0);
  EXPECT_EQ(m.layers[0].expert_parameter_bytes, 0);
  for (size_t i : {1u, 2u}) {
    EXPECT_EQ(m.layers[i].experts, kExperts) << i;
    EXPECT_EQ(m.layers[i].expert_parameter_bytes, kExperts * 3 * kHidden * kWidth * 2) << i;  // bf16
    // Each token's 2 copies of its hidden state go to the experts.
    EXPECT_EQ(m.layers[i].routed_bytes_per_sample, 2 * kSeq * kHidden * 2) << i;
  }
  EXPECT_EQ(m.MaxExperts(), kExperts);
  // The recompute menu marks the gathers of hidden-state rows by the routing (under EP, all-to-alls),
  // not the gates' gather of router probabilities.
  std::vector<std::string> routed;
  for (const cost::MenuOp& op : m.layers[1].recompute_menu.menu->ops)
    if (op.routed) routed.push_back(op.name);
  EXPECT_EQ(routed, (std::vector<std::string>{"mlp.dispatch", "mlp.combine"}));
  for (const cost::MenuOp& op : m.layers[0].recompute_menu.menu->ops) EXPECT_FALSE(op.routed) << op.name;
}

TEST(LatentAttention, TensorParallelismKeepsTheLatentsAndTheRotaryKeyHeadWhole) {
  const cost::LayerModel m = LayerModelOf(SmallDeepSeek(32));
  ASSERT_EQ(m.layers.size(), 3u);
  // Whole on every TP rank: two layer norms, the latents' norms, the query and key/value latent
  // projections, the shared rotary key head's projection (bf16); the MoE layers also their router.
  const int64_t latent = 2 * kHidden + 32 + 24 + kHidden * 32 + kHidden * 24 + kHidden * 4;
  EXPECT_EQ(m.layers[0].replicated_parameter_bytes, latent * 2);
  EXPECT_EQ(m.layers[1].replicated_parameter_bytes, (latent + kHidden * kExperts) * 2);
  // Without a query latent, the query projection is column-parallel like the up-projections.
  const cost::LayerModel direct = LayerModelOf(SmallDeepSeek(0));
  EXPECT_EQ(direct.layers[0].replicated_parameter_bytes, (2 * kHidden + 24 + kHidden * 24 + kHidden * 4) * 2);
  // And their work runs whole on every rank (without SP): the latents, their norms, the rotary key
  // head, the router; the up-projections are split.
  const cost::RecomputeMenu& menu = *m.layers[1].recompute_menu.menu;
  const auto op = [&](const std::string& name) {
    const int i = menu.Find(name);
    EXPECT_GE(i, 0) << name;
    return i < 0 ? cost::MenuOp{} : menu.ops[static_cast<size_t>(i)];
  };
  double whole = 0.0;
  for (const char* name : {"attn.q_a", "attn.kv_a", "attn.k_rope", "attn.q_a_norm", "attn.kv_a_norm", "mlp.router"}) {
    EXPECT_TRUE(op(name).replicated) << name;
    whole += op(name).seconds_per_sample;
  }
  for (const char* name : {"attn.q_b", "attn.k_b", "attn.v_b"}) EXPECT_FALSE(op(name).replicated) << name;
  EXPECT_GT(whole, 0.0);
  EXPECT_GE(m.layers[1].replicated_forward_seconds_per_sample, whole * (1 - 1e-12));
  EXPECT_LT(m.layers[1].replicated_forward_seconds_per_sample, m.layers[1].forward_seconds_per_sample);
}

TEST(LatentAttention, TheRingPassesEveryHeadsJoinedKeysAndItsValues) {
  for (AttentionKernel kernel : {AttentionKernel::kFused, AttentionKernel::kMaterialized}) {
    TransformerConfig c = SmallDeepSeek(32);
    c.attention = kernel;
    const cost::LayerModel m = LayerModelOf(c);
    ASSERT_EQ(m.layers.size(), 3u);
    const cost::LayerProfile& p = m.layers[1];
    EXPECT_EQ(p.attention_sequence, kSeq);
    // keys: 4 heads x (8 + 4) features; values 4 x 10; bf16; per sample.
    EXPECT_EQ(p.attention_kv_bytes_per_sample, kSeq * (kHeads * 12 + kHeads * 10) * 2);
    EXPECT_EQ(m.ContextParallelSequence(), kSeq);
    EXPECT_EQ(p.attention_core_bytes_per_sample > 0, kernel == AttentionKernel::kMaterialized);
  }
}

TEST(LatentAttention, PricedFromAFewLayersAsFromTheWholeGraph) {
  const cost::CostModel cm{cost::DeviceSpec{}};
  for (int dense : {1, 2}) {
    for (int layers : {3, 6, 7, 10}) {
      TransformerConfig c = SmallDeepSeek(32);
      c.layers = layers, c.dense_layers = dense;
      SCOPED_TRACE(std::to_string(layers) + " layers, " + std::to_string(dense) + " dense");
      const ModelSpec spec{"small-deepseek", c, {ir::Optimizer::kAdam, true}};
      Result<cost::LayerModel> fast = BuildSpecLayerModel(spec, cm);
      ASSERT_TRUE(fast.ok()) << fast.error().message;
      Result<ir::Graph> g = BuildTrainingGraph(spec);
      ASSERT_TRUE(g.ok()) << g.error().message;
      Result<cost::LayerModel> whole = cost::BuildLayerModel(*g, SpecBatch(spec), cm);
      ASSERT_TRUE(whole.ok()) << whole.error().message;
      ASSERT_EQ(fast->layers.size(), whole->layers.size());
      for (size_t i = 0; i < whole->layers.size(); ++i) {
        EXPECT_EQ(fast->layers[i], whole->layers[i]) << "layer " << i;
        EXPECT_EQ(fast->layers[i].experts, static_cast<int>(i) < dense ? 0 : kExperts) << "layer " << i;
      }
    }
  }
  // DeepSeek-V3: three dense layers, then 256 experts in each of the other 58.
  Result<ModelSpec> v3 = LoadModel("deepseek-v3");
  ASSERT_TRUE(v3.ok());
  Result<cost::LayerModel> m = BuildSpecLayerModel(*v3, cm);
  ASSERT_TRUE(m.ok()) << m.error().message;
  ASSERT_EQ(m->layers.size(), 61u);
  for (size_t i = 0; i < 61; ++i) EXPECT_EQ(m->layers[i].experts, i < 3 ? 0 : 256) << "layer " << i;
}

TEST(LatentAttention, FewerLayersKeepAtLeastOneLayerOfExperts) {
  for (const auto& [layers, dense] : {std::pair{1, 0}, std::pair{2, 1}, std::pair{4, 3}, std::pair{10, 3}}) {
    ModelOverrides o;
    o.layers = layers;
    Result<ModelSpec> spec = LoadModel("deepseek-v3", o);
    ASSERT_TRUE(spec.ok()) << spec.error().message;
    EXPECT_EQ(std::get<TransformerConfig>(spec->config).dense_layers, dense) << layers;
  }
}

TEST(LatentAttention, BadConfigsNameTheField) {
  const auto error = [](TransformerConfig c) {
    Result<ir::Graph> g = BuildTransformerForward(c);
    return g.ok() ? std::string("built") : g.error().message;
  };
  TransformerConfig c = SmallDeepSeek(32);
  c.kv_heads = 2;
  EXPECT_EQ(error(c), "model config: kv_heads: latent attention has a key and value head per query head (4), got 2");
  c = SmallDeepSeek(32);
  c.mla.rope = 0;
  EXPECT_EQ(error(c), "model config: mla.rope: must be positive, got 0");
  c = SmallDeepSeek(32);
  c.mla.kv_rank = 0;
  EXPECT_EQ(error(c), "model config: mla.kv_rank: 0 (no latent attention), yet other latent attention sizes are set");
  c = SmallDeepSeek(32);
  c.qk_norm = true;
  EXPECT_EQ(error(c), "model config: qk_norm: latent attention has none");
  c = SmallDeepSeek(32);
  c.dense_layers = 4;
  EXPECT_EQ(error(c), "model config: dense_layers: 4 is more than the 3 layers");
  c = SmallDeepSeek(32);
  c.dense_ffn = 0;
  EXPECT_EQ(error(c), "model config: dense_ffn: must be positive, got 0");
  c = SmallDeepSeek(32);
  c.experts = 0, c.top_k = 0, c.shared_expert_ffn = 0;
  EXPECT_EQ(error(c), "model config: dense_layers: 1 without experts (every layer is dense)");
  c = SmallDeepSeek(32);
  c.family = Family::kGpt;
  c.experts = 0, c.top_k = 0, c.shared_expert_ffn = 0, c.dense_layers = 0;
  EXPECT_EQ(error(c), "model config: mla: kiwi builds latent attention for llama-style models, not gpt");
}

}  // namespace
}  // namespace kiwi::models
