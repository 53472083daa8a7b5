// Which attention the model zoo builds (AttentionKernel): fused for 16-bit models by default but for
// T5 and Swin, materialized on request, and one-line errors where fused cannot express the model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiwi/ir/verify.h"
#include "kiwi/models/presets.h"
#include "model_test_util.h"

namespace kiwi::models {
namespace {

using test_util::Overrides;
using ::testing::HasSubstr;

struct OpCounts {
  int attention = 0, causal = 0, softmax = 0;
};

OpCounts CountOps(const std::string& model, const ModelOverrides& o) {
  OpCounts c;
  Result<ModelSpec> spec = LoadModel(model, o);
  EXPECT_TRUE(spec.ok()) << spec.error().message;
  if (!spec.ok()) return c;
  Result<ir::Graph> g = BuildTrainingGraph(*spec);
  EXPECT_TRUE(g.ok()) << g.error().message;
  if (!g.ok()) return c;
  EXPECT_TRUE(ir::VerifyGraph(*g).ok());
  for (const ir::Node& n : g->nodes()) {
    if (n.kind == ir::OpKind::kAttention && n.op == "attention") {
      ++c.attention;
      c.causal += n.attrs.causal ? 1 : 0;
    }
    if (n.op == "softmax") ++c.softmax;
  }
  return c;
}

TEST(AttentionKernel, SixteenBitModelsFuseByDefault) {
  const Overrides small = Overrides().Layers(2).Hidden(64).Heads(4).Seq(16).Batch(2);
  OpCounts bf16 = CountOps("gpt", Overrides(small).DType(ir::DType::kBF16));
  EXPECT_EQ(bf16.attention, 2);
  EXPECT_EQ(bf16.causal, 2);  // GPT is causal
  EXPECT_EQ(bf16.softmax, 0);
  OpCounts f32 = CountOps("gpt", small);  // fp32: the materialized scores
  EXPECT_EQ(f32.attention, 0);
  EXPECT_EQ(f32.softmax, 2);
  OpCounts bert = CountOps("bert", Overrides(small).DType(ir::DType::kF16));
  EXPECT_EQ(bert.attention, 2);
  EXPECT_EQ(bert.causal, 0);  // bidirectional
  EXPECT_EQ(CountOps("llama", Overrides(small)).attention, 2);  // the llama preset trains in bf16
  // T5's relative position bias needs the scores: auto keeps them.
  EXPECT_EQ(CountOps("t5", Overrides(small).DType(ir::DType::kBF16)).attention, 0);
}

TEST(AttentionKernel, EitherCanBeAskedFor) {
  const Overrides small = Overrides().Layers(2).Hidden(64).Heads(4).Seq(16).Batch(2);
  OpCounts materialized =
      CountOps("gpt", Overrides(small).DType(ir::DType::kBF16).Attention(AttentionKernel::kMaterialized));
  EXPECT_EQ(materialized.attention, 0);
  EXPECT_EQ(materialized.softmax, 2);
  EXPECT_EQ(CountOps("vit", Overrides().Layers(2).Hidden(64).Heads(4).Batch(2).Attention(AttentionKernel::kFused))
                .attention,
            2);
}

TEST(AttentionKernel, FusedRefusesARelativePositionBiasAndMlps) {
  for (const char* model : {"t5", "swin"}) {
    Result<ModelSpec> spec = LoadModel(model, Overrides().Attention(AttentionKernel::kFused));
    ASSERT_FALSE(spec.ok()) << model;
    EXPECT_EQ(spec.error().code, ErrorCode::kBadInput);
    EXPECT_THAT(spec.error().message, HasSubstr("attention"));
    EXPECT_THAT(spec.error().message, HasSubstr("relative position bias"));
  }
  Result<ModelSpec> mlp = LoadModel("mlp", Overrides().Attention(AttentionKernel::kFused));
  ASSERT_FALSE(mlp.ok());
  EXPECT_THAT(mlp.error().message, HasSubstr("--attention"));
}

TEST(AttentionKernel, NamesRoundTrip) {
  for (AttentionKernel k : {AttentionKernel::kAuto, AttentionKernel::kMaterialized, AttentionKernel::kFused})
    EXPECT_EQ(ParseAttentionKernel(AttentionKernelName(k)), k);
  EXPECT_FALSE(ParseAttentionKernel("flash").has_value());
}

}  // namespace
}  // namespace kiwi::models
