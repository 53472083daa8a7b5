// Named models: defaults, overrides, errors naming the flag, and every preset building a verified
// forward graph whose size grows linearly with the number of layers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "kiwi/ir/layers.h"
#include "kiwi/ir/verify.h"
#include "kiwi/models/presets.h"
#include "model_test_util.h"

namespace kiwi::models {
namespace {

using test_util::Overrides;

using ::testing::HasSubstr;

const TransformerConfig& Config(const ModelSpec& spec) { return std::get<TransformerConfig>(spec.config); }

TEST(ModelNames, ListsEveryContractName) {
  const std::vector<std::string> names = ModelNames();
  for (const char* name : {"gpt", "bert", "t5", "vit", "swin", "llama", "mlp", "bert-huge-32", "bert-huge-48",
                           "vit-huge-32", "vit-huge-48", "t5-large-32", "t5-large-48", "t5-512-4-32",
                           "t5-512-4-48", "swin-huge-32", "swin-huge-48", "gpt3-13b", "llama2-7b", "llama2-70b",
                           "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", "qwen3-30b-a3b",
                           "deepseek-v2-lite", "deepseek-v2", "deepseek-v3"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
}

TEST(LoadModel, GptDefaultIsTheReadmeJob) {
  Result<ModelSpec> spec = LoadModel("gpt");
  ASSERT_TRUE(spec.ok());
  const TransformerConfig& c = Config(*spec);
  EXPECT_EQ(c.family, Family::kGpt);
  EXPECT_EQ(c.layers, 4);
  EXPECT_EQ(c.hidden, 1024);
  EXPECT_EQ(c.heads, 16);
  EXPECT_EQ(c.seq, 1024);
  EXPECT_EQ(c.batch, 8);
  EXPECT_EQ(c.dtype, ir::DType::kF32);
  EXPECT_EQ(spec->training.optimizer, ir::Optimizer::kAdam);
  EXPECT_FALSE(spec->training.master_weights);
}

TEST(LoadModel, PresetPrecisionFollowsTheirPapers) {
  for (const char* name : {"gpt3-13b", "llama2-7b", "llama2-70b", "llama3-8b", "llama3-405b"}) {
    Result<ModelSpec> spec = LoadModel(name);
    ASSERT_TRUE(spec.ok());
    EXPECT_EQ(Config(*spec).dtype, ir::DType::kBF16) << name;
    EXPECT_TRUE(spec->training.master_weights) << name;
  }
  Result<ModelSpec> bert = LoadModel("bert-huge-32");
  ASSERT_TRUE(bert.ok());
  EXPECT_EQ(Config(*bert).dtype, ir::DType::kF32);
  EXPECT_FALSE(bert->training.master_weights);
  EXPECT_EQ(Config(*LoadModel("llama2-70b")).kv_heads, 8);
  EXPECT_EQ(Config(*LoadModel("t5-512-4-32")).decoder_seq, 4);
  EXPECT_EQ(Config(*LoadModel("swin-huge-48")).stage_depths, (std::vector<int>{2, 2, 42, 2}));
}

TEST(LoadModel, OverridesApplyOnTop) {
  Result<ModelSpec> gpt = LoadModel("gpt", Overrides().Layers(2).Hidden(256).Heads(8).Seq(128).Batch(3).Ffn(512)
                                            .DType(ir::DType::kBF16).Optimizer(ir::Optimizer::kSgd));
  ASSERT_TRUE(gpt.ok()) << gpt.error().message;
  const TransformerConfig& c = Config(*gpt);
  EXPECT_EQ(std::tie(c.layers, c.hidden, c.heads, c.seq, c.batch, c.ffn), std::make_tuple(2, 256, 8, 128, 3, 512));
  EXPECT_EQ(c.dtype, ir::DType::kBF16);
  EXPECT_EQ(gpt->training.optimizer, ir::Optimizer::kSgd);
  EXPECT_TRUE(gpt->training.master_weights);  // 16-bit training keeps fp32 masters
  EXPECT_FALSE(LoadModel("llama2-7b", Overrides().DType(ir::DType::kF32))->training.master_weights);
}

// --dropout 0 builds the model without its dropout sites (masks and their multiplications, both passes);
// another probability keeps every site at that probability (the fused attention's own dropout included).
TEST(LoadModel, DropoutOverrideRemovesOrSetsEverySite) {
  const auto count = [](const ir::Graph& g, auto pred) {
    return std::count_if(g.nodes().begin(), g.nodes().end(), pred);
  };
  const auto masks = [&](const ir::Graph& g) {
    return count(g, [](const ir::Node& n) { return n.kind == ir::OpKind::kRandom; });
  };
  const auto small = [](double p) {
    return Overrides().Layers(2).Hidden(64).Heads(4).Seq(16).Batch(2).Vocab(128).Dropout(p);
  };
  Result<ir::Graph> with = BuildTrainingGraph(*LoadModel("gpt", Overrides().Layers(2).Hidden(64).Heads(4).Seq(16)
                                                                   .Batch(2).Vocab(128)));
  Result<ir::Graph> without = BuildTrainingGraph(*LoadModel("gpt", small(0.0)));
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_EQ(masks(*with), 1 + 3 * 2);  // the embeddings', then per layer: attention probabilities, two outputs
  EXPECT_EQ(masks(*without), 0);
  // Each site: its mask, the forward multiplication and the backward one.
  EXPECT_EQ(with->size() - without->size(), 3 * (1 + 3 * 2));
  EXPECT_TRUE(ir::VerifyGraph(*without).ok());
  Result<ModelSpec> fused = LoadModel("gpt", small(0.2).DType(ir::DType::kBF16));
  ASSERT_TRUE(fused.ok()) << fused.error().message;
  EXPECT_DOUBLE_EQ(Config(*fused).dropout_p, 0.2);
  Result<ir::Graph> g = BuildTrainingGraph(*fused);
  ASSERT_TRUE(g.ok());
  EXPECT_GT(count(*g, [](const ir::Node& n) { return n.kind == ir::OpKind::kAttention && n.attrs.dropout_p == 0.2; }), 0);
  EXPECT_EQ(count(*g, [](const ir::Node& n) { return n.attrs.dropout_p != 0.0 && n.attrs.dropout_p != 0.2; }), 0);
}

TEST(LoadModel, VocabularyOverrideResizesEmbeddingAndHead) {
  // GPT's untied embedding and LM head each hold vocab x hidden weights: 50,257 -> 50,304 words (nanoGPT's
  // padding to a multiple of 64) adds 2 x 47 x 1024 parameters.
  Result<ModelSpec> gpt = LoadModel("gpt");
  Result<ModelSpec> padded = LoadModel("gpt", Overrides().Vocab(50304));
  ASSERT_TRUE(padded.ok()) << padded.error().message;
  EXPECT_EQ(Config(*gpt).vocab, 50257);
  EXPECT_EQ(Config(*padded).vocab, 50304);
  EXPECT_EQ(ClosedFormParameterCount(Config(*padded)) - ClosedFormParameterCount(Config(*gpt)), 2 * 47 * 1024);
  EXPECT_EQ(Config(*LoadModel("llama2-7b", Overrides().Vocab(128256))).vocab, 128256);
}

TEST(LoadModel, FamilySpecificLayerOverrides) {
  const TransformerConfig t5 = Config(*LoadModel("t5-large-32", Overrides().Layers(8)));
  EXPECT_EQ(t5.layers, 4);
  EXPECT_EQ(t5.decoder_layers, 4);
  const TransformerConfig swin = Config(*LoadModel("swin-huge-32", Overrides().Layers(40)));
  EXPECT_EQ(swin.stage_depths, (std::vector<int>{2, 2, 34, 2}));
  EXPECT_EQ(swin.layers, 40);
  const TransformerConfig swin_h = Config(*LoadModel("swin", Overrides().Hidden(128)));
  EXPECT_EQ(swin_h.heads, 4);  // heads = hidden / 32
  // Llama's family default derives the SwiGLU width from hidden: 8h/3 rounded up to 256.
  EXPECT_EQ(Config(*LoadModel("llama", Overrides().Hidden(4096))).ffn, 11008);
  Result<ModelSpec> mlp = LoadModel("mlp", Overrides().Layers(2).Hidden(64).Ffn(128));
  EXPECT_EQ(std::get<MlpConfig>(mlp->config).widths, (std::vector<int64_t>{64, 128, 64}));
}

void ExpectBadInput(const std::string& name, const ModelOverrides& overrides, const std::string& text) {
  Result<ModelSpec> spec = LoadModel(name, overrides);
  ASSERT_FALSE(spec.ok()) << name << " accepted; expected " << text;
  EXPECT_EQ(spec.error().code, ErrorCode::kBadInput);
  EXPECT_THAT(spec.error().message, HasSubstr(text));
  EXPECT_EQ(spec.error().message.find('\n'), std::string::npos);
}

TEST(LoadModel, BadOverridesNameTheFlag) {
  ExpectBadInput("gpt", Overrides().Heads(7), "--heads: 7 does not divide --hidden 1024");
  ExpectBadInput("gpt", Overrides().Hidden(1000), "--hidden: 1000");
  ExpectBadInput("gpt", Overrides().Hidden(0), "--hidden: must be positive, got 0");
  ExpectBadInput("gpt", Overrides().Layers(-2), "--layers: must be positive");
  ExpectBadInput("bert", Overrides().Seq(0), "--seq");
  ExpectBadInput("bert", Overrides().Batch(-1), "--batch");
  ExpectBadInput("llama", Overrides().Ffn(0), "--ffn");
  ExpectBadInput("gpt", Overrides().Optimizer(ir::Optimizer::kNone), "--optimizer");
  ExpectBadInput("llama2-70b", Overrides().Heads(4), "--heads: 4 is not a multiple of the 8 key/value heads");
  ExpectBadInput("t5-large-32", Overrides().Layers(7), "--layers");
  ExpectBadInput("swin-huge-32", Overrides().Layers(6), "--layers");
  ExpectBadInput("swin", Overrides().Hidden(100), "--hidden");
  ExpectBadInput("swin", Overrides().Ffn(64), "--ffn");
  ExpectBadInput("vit-huge-32", Overrides().Seq(64), "--seq");
  ExpectBadInput("mlp", Overrides().Heads(4), "--heads");
  ExpectBadInput("gpt", Overrides().Vocab(0), "--vocab: must be positive, got 0");
  ExpectBadInput("vit-huge-32", Overrides().Vocab(1000), "--vocab: not applicable to model vit-huge-32");
  ExpectBadInput("swin", Overrides().Vocab(1000), "--vocab");
  ExpectBadInput("mlp", Overrides().Vocab(1000), "--vocab: not applicable to model mlp");
  ExpectBadInput("gpt", Overrides().Dropout(1.0), "--dropout: must be in [0, 1), got 1");
  ExpectBadInput("gpt", Overrides().Dropout(-0.1), "--dropout: must be in [0, 1)");
  ExpectBadInput("mlp", Overrides().Dropout(0.0), "--dropout: not applicable to model mlp");
  ExpectBadInput("gpt-5", {}, "--model: unknown model 'gpt-5'");
}

// The smallest and the next two layer counts each preset accepts.
int FirstLayers(const std::string& name) {
  if (name.rfind("swin", 0) == 0) return 7;
  if (name.rfind("t5", 0) == 0) return 2;
  if (name.rfind("deepseek", 0) == 0) return name == "deepseek-v3" ? 4 : 2;  // past the dense first layers
  return 1;
}
int LayerStep(const std::string& name) { return name.rfind("t5", 0) == 0 ? 2 : 1; }

int32_t CountNodes(const std::string& name, int layers) {
  ModelOverrides o = Overrides().Layers(layers).Batch(1);
  const bool has_seq = name != "mlp" && name.rfind("vit", 0) != 0 && name.rfind("swin", 0) != 0;
  if (has_seq) o.seq = 16;
  Result<ModelSpec> spec = LoadModel(name, o);
  EXPECT_TRUE(spec.ok()) << name << ": " << spec.error().message;
  if (!spec.ok()) return -1;
  Result<ir::Graph> graph = BuildForwardGraph(*spec);
  EXPECT_TRUE(graph.ok()) << name << ": " << graph.error().message;
  if (!graph.ok()) return -1;
  EXPECT_TRUE(ir::VerifyGraph(*graph, name).ok()) << name;
  EXPECT_EQ(graph->name(), name);
  EXPECT_EQ(std::count_if(graph->nodes().begin(), graph->nodes().end(),
                          [](const ir::Node& n) { return n.kind == ir::OpKind::kLoss; }),
            1)
      << name;
  int32_t max_layer = -1;
  for (const ir::Node& node : graph->nodes()) max_layer = std::max(max_layer, node.layer);
  EXPECT_EQ(max_layer, layers - 1) << name;
  return graph->size();
}

TEST(Presets, EveryPresetBuildsAndScalesLinearlyWithLayers) {
  for (const std::string& name : ModelNames()) {
    const int first = FirstLayers(name), step = LayerStep(name);
    const int32_t n0 = CountNodes(name, first), n1 = CountNodes(name, first + step),
                  n2 = CountNodes(name, first + 2 * step);
    EXPECT_GT(n1, n0) << name;
    EXPECT_EQ(n2 - n1, n1 - n0) << name;
  }
}

// Every op the zoo emits has a gradient rule, and the layer view has no gaps.
TEST(Presets, EveryPresetHasATrainingGraphAndLayerView) {
  for (const std::string& name : ModelNames()) {
    ModelOverrides o = Overrides().Layers(FirstLayers(name)).Batch(2);
    if (name != "mlp" && name.rfind("vit", 0) != 0 && name.rfind("swin", 0) != 0) o.seq = 8;
    Result<ModelSpec> spec = LoadModel(name, o);
    ASSERT_TRUE(spec.ok()) << name;
    Result<ir::Graph> training = BuildTrainingGraph(*spec);
    ASSERT_TRUE(training.ok()) << name << ": " << training.error().message;
    EXPECT_GT(training->NumNodes(ir::Pass::kBackward), 0) << name;
    EXPECT_EQ(std::count_if(training->nodes().begin(), training->nodes().end(),
                            [](const ir::Node& n) { return n.kind == ir::OpKind::kOptimizer; }),
              1)
        << name;
    Result<ir::LayerView> view = ir::BuildLayerView(*training);
    ASSERT_TRUE(view.ok()) << name << ": " << view.error().message;
    EXPECT_EQ(static_cast<int>(view->layers.size()), FirstLayers(name)) << name;
  }
}

}  // namespace
}  // namespace kiwi::models
