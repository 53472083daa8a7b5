// BuildSpecLayerModel: a stack of identical layers priced once is the same layer model as the whole
// training graph's, field by field, for every family it applies to; the others are built whole.
#include "kiwi/models/layer_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kiwi::models {
namespace {

cost::LayerModel Whole(const ModelSpec& spec, const cost::CostModel& cm) {
  Result<ir::Graph> g = BuildTrainingGraph(spec);
  EXPECT_TRUE(g.ok()) << g.error().message;
  Result<cost::LayerModel> m = cost::BuildLayerModel(*g, SpecBatch(spec), cm);
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? *m : cost::LayerModel{};
}

ModelSpec Small(const std::string& family, int layers, ir::DType dtype = ir::DType::kF32) {
  ModelOverrides o;
  o.layers = layers;
  o.hidden = family == "mlp" ? std::optional<int64_t>() : std::optional<int64_t>(64);
  o.heads = family == "mlp" ? std::optional<int64_t>() : std::optional<int64_t>(4);
  o.seq = family == "vit" || family == "swin" || family == "mlp" ? std::optional<int64_t>() : std::optional<int64_t>(16);
  o.batch = 2;
  o.dtype = dtype;
  Result<ModelSpec> spec = LoadModel(family, o);
  EXPECT_TRUE(spec.ok()) << family << ": " << spec.error().message;
  return spec.ok() ? *spec : ModelSpec{};
}

TEST(BuildSpecLayerModel, EqualsTheWholeGraphsLayerModel) {
  const cost::CostModel cm{cost::DeviceSpec{}};
  for (const std::string family : {"gpt", "bert", "vit", "llama", "t5", "swin", "mlp"}) {
    // T5 takes encoder + decoder layers (even), Swin more than its 2/2/6/2 stage depths.
    const std::vector<int> counts = family == "t5" ? std::vector<int>{2, 4, 6, 10}
                                    : family == "swin" ? std::vector<int>{7, 12}
                                                       : std::vector<int>{1, kPricedLayers, kPricedLayers + 1, 9};
    for (int layers : counts) {
      for (ir::DType dtype : {ir::DType::kF32, ir::DType::kBF16}) {
        SCOPED_TRACE(family + " at " + std::to_string(layers) + " layers, " + std::string(ir::DTypeName(dtype)));
        const ModelSpec spec = Small(family, layers, dtype);
        Result<cost::LayerModel> fast = BuildSpecLayerModel(spec, cm);
        ASSERT_TRUE(fast.ok()) << fast.error().message;
        const cost::LayerModel whole = Whole(spec, cm);
        ASSERT_EQ(fast->layers.size(), whole.layers.size());
        for (size_t i = 0; i < whole.layers.size(); ++i) EXPECT_EQ(fast->layers[i], whole.layers[i]) << "layer " << i;
        EXPECT_EQ(fast->embedding, whole.embedding);
        EXPECT_EQ(fast->head, whole.head);
        EXPECT_TRUE(*fast == whole);
      }
    }
  }
}

}  // namespace
}  // namespace kiwi::models
