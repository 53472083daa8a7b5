// Context parallelism's terms of the layer profile (cost::LayerProfile::attention_*) on the model zoo's
// families: the attention's sequence, the keys' and values' bytes per sample the ring passes (grouped-
// query K/V unexpanded), and which attention a ring cannot split (a score bias: T5's and Swin's relative
// positions). Checked against closed forms of the configs.
#include <gtest/gtest.h>

#include <string>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/models/layer_model.h"

namespace kiwi::models {
namespace {

cost::CostModel H100() {
  Result<cost::Cluster> cluster = cost::ClusterPreset("dgx-h100");
  EXPECT_TRUE(cluster.ok());
  return cost::CostModel{cluster.ok() ? cluster->device : cost::DeviceSpec{}};
}

cost::LayerModel LayerModelOf(const std::string& family, bool fused) {
  ModelOverrides o;
  o.layers = family == "swin" ? 7 : 2;
  o.batch = 2;
  if (family != "vit" && family != "swin" && family != "mlp") {
    o.hidden = 64;
    o.heads = 4;
    o.seq = 32;
  }
  if (family != "swin" && family != "mlp") o.attention = fused ? AttentionKernel::kFused : AttentionKernel::kMaterialized;
  Result<ModelSpec> spec = LoadModel(family, o);
  EXPECT_TRUE(spec.ok()) << family << ": " << spec.error().message;
  if (!spec.ok()) return {};
  Result<ir::Graph> g = BuildTrainingGraph(*spec);
  EXPECT_TRUE(g.ok()) << g.error().message;
  Result<cost::LayerModel> m = cost::BuildLayerModel(*g, SpecBatch(*spec), H100());
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? *m : cost::LayerModel{};
}

TEST(AttentionProfile, RingSplitsTheSelfAttentionOfGptBertAndLlama) {
  for (const std::string family : {"gpt", "bert", "llama"}) {
    for (bool fused : {false, true}) {
      const cost::LayerModel m = LayerModelOf(family, fused);
      ASSERT_FALSE(m.layers.empty()) << family;
      const cost::LayerProfile& p = m.layers.front();
      EXPECT_EQ(p.attention_sequence, 32) << family << " fused " << fused;
      EXPECT_EQ(m.ContextParallelSequence(), 32) << family;
      EXPECT_GT(p.attention_forward_seconds_per_sample, 0.0) << family;
      EXPECT_GT(p.attention_backward_seconds_per_sample, p.attention_forward_seconds_per_sample) << family;
      // K and V of 32 tokens x 64 features (4 heads of 16) in the model's dtype, per sample.
      const int64_t element = ir::DTypeBytes(ir::DType::kF32);
      if (family != "llama") {
        EXPECT_EQ(p.attention_kv_bytes_per_sample, 2 * 32 * 64 * element) << family;
      }
      EXPECT_EQ(m.embedding.attention_sequence, 0);
      EXPECT_EQ(m.head.attention_sequence, 0);
    }
  }
}

TEST(AttentionProfile, GroupedQueryAttentionPassesItsKvHeadsOnly) {
  ModelOverrides o;
  o.layers = 2;
  o.batch = 2;
  o.seq = 64;
  Result<ModelSpec> spec = LoadModel("llama3-8b", o);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  Result<ir::Graph> g = BuildTrainingGraph(*spec);
  ASSERT_TRUE(g.ok()) << g.error().message;
  Result<cost::LayerModel> m = cost::BuildLayerModel(*g, SpecBatch(*spec), H100());
  ASSERT_TRUE(m.ok()) << m.error().message;
  const cost::LayerProfile& p = m->layers.front();
  EXPECT_EQ(p.attention_sequence, 64);
  // 8 KV heads of 128 (not the 32 query heads), bf16, K and V.
  EXPECT_EQ(p.attention_kv_bytes_per_sample, 2 * 64 * 8 * 128 * 2);
}

TEST(AttentionProfile, ScoreBiasedAttentionHasNoRing) {
  for (const std::string family : {"t5", "swin"}) {
    const cost::LayerModel m = LayerModelOf(family, false);
    ASSERT_FALSE(m.layers.empty()) << family;
    EXPECT_EQ(m.layers.front().attention_sequence, cost::LayerProfile::kRingless) << family;
    EXPECT_EQ(m.ContextParallelSequence(), 0) << family;
  }
  const cost::LayerModel mlp = LayerModelOf("mlp", false);
  EXPECT_EQ(mlp.ContextParallelSequence(), 0);  // no attention: nothing for a ring
}

}  // namespace
}  // namespace kiwi::models
