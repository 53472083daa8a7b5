// BuildLayerView: groups a training graph by Node::layer for the layer-level (Galvatron-BMW) planner.
#include "kiwi/ir/layers.h"

#include <fmt/format.h>

#include <algorithm>

#include "kiwi/ir/backward.h"

namespace kiwi::ir {
namespace {

std::vector<std::string> Components(const std::string& scope) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= scope.size()) {
    const size_t dot = std::min(scope.find('.', start), scope.size());
    parts.push_back(scope.substr(start, dot - start));
    start = dot + 1;
  }
  return parts;
}

// The dotted components all the layer's scopes share ("layer3.attn", "layer3.mlp" -> "layer3"), or
// "layer<i>" when they share none.
std::string LayerName(const Graph& g, const Layer& layer) {
  std::vector<std::string> common;
  bool first = true;
  for (const std::vector<NodeId>* ids : {&layer.forward, &layer.backward})
    for (NodeId id : *ids) {
      const std::vector<std::string> parts = Components(g.node(id).scope);
      if (first) {
        common = parts;
        first = false;
        continue;
      }
      size_t k = 0;
      while (k < common.size() && k < parts.size() && common[k] == parts[k]) ++k;
      common.resize(k);
    }
  if (common.empty() || common[0].empty()) return fmt::format("layer{}", layer.index);
  return fmt::format("{}", fmt::join(common, "."));
}

// A forward tensor of the layer read by a forward op outside it (a later layer or the head): what a
// checkpointed layer keeps and what a pipeline stage sends on.
bool IsBoundary(const Graph& g, const Node& n, const std::vector<NodeId>& readers) {
  if (n.is_persistent()) return false;
  return std::any_of(readers.begin(), readers.end(), [&](NodeId r) {
    const Node& reader = g.node(r);
    return !reader.is_backward() && reader.layer != n.layer;
  });
}

}  // namespace

Result<LayerView> BuildLayerView(const Graph& training) {
  const std::string source = training.name().empty() ? "graph" : training.name();
  KIWI_RETURN_IF_ERROR(RequireTensorOperands(training, "the layer view"));
  int32_t max_layer = -1;
  for (const Node& n : training.nodes()) {
    if (n.layer < -1)
      return BadInput(fmt::format("{}: node {} '{}': layer: must be >= -1, got {}", source, n.id, n.name, n.layer));
    max_layer = std::max(max_layer, n.layer);
  }
  LayerView view;
  view.layers.resize(static_cast<size_t>(max_layer + 1));
  for (size_t i = 0; i < view.layers.size(); ++i) view.layers[i].index = static_cast<int32_t>(i);
  const std::vector<std::vector<NodeId>> readers = training.Consumers();
  for (NodeId id : training.order()) {
    const Node& n = training.node(id);
    if (n.layer < 0) {
      view.other.push_back(id);
      continue;
    }
    Layer& layer = view.layers[static_cast<size_t>(n.layer)];
    if (n.is_backward()) {
      layer.backward.push_back(id);
      layer.backward_flops += n.flops;
      continue;
    }
    layer.forward.push_back(id);
    layer.forward_flops += n.flops;
    if (n.kind == OpKind::kParameter) layer.parameter_bytes += n.output.Bytes();
    if (IsBoundary(training, n, readers[static_cast<size_t>(id)])) layer.boundary_activation_bytes += n.output.Bytes();
  }
  const std::vector<int64_t> saved = SavedActivationBytesByLayer(training, static_cast<int32_t>(view.layers.size()));
  for (Layer& layer : view.layers) {
    if (layer.forward.empty() && layer.backward.empty())
      return BadInput(fmt::format("{}: layer {}: no node has this layer index (layer indices must be 0..{} "
                                  "without gaps)",
                                  source, layer.index, max_layer));
    layer.name = LayerName(training, layer);
    layer.saved_activation_bytes = saved[static_cast<size_t>(layer.index)];
  }
  return view;
}

}  // namespace kiwi::ir
