#pragma once
// A model's layer-level cost model (cost::LayerModel) straight from its spec: the training graph is
// built and grouped by layer (cost::BuildLayerModel), but a stack of identical layers is priced once.
#include <cstdint>

#include "kiwi/cost/cost_model.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/models/presets.h"
#include "kiwi/util/result.h"

namespace kiwi::models {

// The batch the spec's graph is built for.
int64_t SpecBatch(const ModelSpec& spec);

// The layers priced from a built graph: a single stack of identical layers (GPT, BERT, ViT, Llama)
// beyond kPricedLayers is priced from a copy with kPricedLayers layers, its middle layer repeated (after
// DeepSeek's dense first layers, each priced); T5, Swin and MLPs are built whole. Same result as BuildLayerModel(BuildTrainingGraph(spec)) (tested
// field by field) without building every layer (10,000 GPT layers: a million nodes, 2.6 s, 780 MB).
inline constexpr int kPricedLayers = 4;
Result<cost::LayerModel> BuildSpecLayerModel(const ModelSpec& spec, const cost::CostModel& cost_model);

}  // namespace kiwi::models
