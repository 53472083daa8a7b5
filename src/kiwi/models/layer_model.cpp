#include "kiwi/models/layer_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <variant>

#include "kiwi/models/transformer.h"

namespace kiwi::models {
namespace {

// One stack of layers that differ only in their index.
bool IsUniformStack(const TransformerConfig& c) {
  return c.family == Family::kGpt || c.family == Family::kBert || c.family == Family::kVit || c.family == Family::kLlama;
}

Result<cost::LayerModel> BuildWhole(const ModelSpec& spec, const cost::CostModel& cost_model) {
  Result<ir::Graph> graph = BuildTrainingGraph(spec);
  if (!graph) return graph.error();
  return cost::BuildLayerModel(*graph, SpecBatch(spec), cost_model);
}

// The layers priced as BuildSpecLayerModel says, without what the spec says of the runtime.
Result<cost::LayerModel> BuildPricedLayers(const ModelSpec& spec, const cost::CostModel& cost_model) {
  const auto* t = std::get_if<TransformerConfig>(&spec.config);
  // DeepSeek's dense first layers are priced each, then kPricedLayers of the rest.
  const int priced_layers = t == nullptr ? 0 : t->dense_layers + kPricedLayers;
  if (t == nullptr || !IsUniformStack(*t) || t->layers <= priced_layers) return BuildWhole(spec, cost_model);
  ModelSpec priced = spec;
  std::get<TransformerConfig>(priced.config).layers = priced_layers;
  Result<cost::LayerModel> few = BuildWhole(priced, cost_model);
  if (!few) return few.error();
  // The first layer reads the embeddings and the last feeds the head; the middle ones must agree.
  cost::LayerModel model = *std::move(few);
  const std::vector<cost::LayerProfile> l = std::move(model.layers);
  const size_t middle = static_cast<size_t>(priced_layers - 2);  // the last before the one feeding the head
  if (l.size() != static_cast<size_t>(priced_layers) ||
      !cost::SameButName(l[static_cast<size_t>(t->dense_layers) + 1], l[middle]))
    return BuildWhole(spec, cost_model);
  model.layers.reserve(static_cast<size_t>(t->layers));
  for (int i = 0; i < t->layers; ++i) {
    const size_t k = i == t->layers - 1 ? l.size() - 1 : std::min(static_cast<size_t>(i), middle);
    model.layers.push_back(l[k]);
    model.layers.back().name = fmt::format("layer{}", i);
  }
  return model;
}

}  // namespace

int64_t SpecBatch(const ModelSpec& spec) {
  if (const auto* t = std::get_if<TransformerConfig>(&spec.config)) return t->batch;
  return std::get<MlpConfig>(spec.config).batch;
}

Result<cost::LayerModel> BuildSpecLayerModel(const ModelSpec& spec, const cost::CostModel& cost_model) {
  Result<cost::LayerModel> model = BuildPricedLayers(spec, cost_model);
  if (!model) return model;
  model->zero_runtime = spec.zero_runtime;
  // kiwi.torch.parallelize runs sequence parallelism with DTensor's styles, which save each column-parallel
  // group's gathered input (LayerProfile::column_input_bytes_per_sample).
  const bool gathered = spec.zero_runtime == cost::ZeroRuntime::kFsdp2;
  for (cost::LayerProfile* p : {&model->embedding, &model->head}) p->sequence_parallel_saves_gathered_inputs = gathered;
  for (cost::LayerProfile& p : model->layers) p.sequence_parallel_saves_gathered_inputs = gathered;
  return model;
}

}  // namespace kiwi::models
