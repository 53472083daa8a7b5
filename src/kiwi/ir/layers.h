#pragma once
// The layer-level view of a training graph, for the hybrid (Galvatron-BMW) planner: operators grouped
// by Node::layer. Nodes outside every layer (embeddings, head, loss, optimizer) form `other`.
#include <cstdint>
#include <string>
#include <vector>

#include "kiwi/ir/graph.h"
#include "kiwi/util/result.h"

namespace kiwi::ir {

struct Layer {
  int32_t index = 0;
  std::string name;                 // e.g. "layer3" (scope prefix of its nodes)
  std::vector<NodeId> forward;      // forward ops of the layer, in execution order
  std::vector<NodeId> backward;     // backward ops of the layer, in execution order
  int64_t parameter_bytes = 0;      // parameters of the layer
  int64_t saved_activation_bytes = 0;  // forward tensors of the layer read by backward ops
  int64_t boundary_activation_bytes = 0;  // forward tensors of the layer read by later layers' forward ops
  double forward_flops = 0.0;
  double backward_flops = 0.0;
};

struct LayerView {
  std::vector<Layer> layers;        // ascending layer index; indices are 0..n-1 without gaps
  std::vector<NodeId> other;        // nodes of no layer
};

// Fails (kBadInput) if layer indices have gaps.
Result<LayerView> BuildLayerView(const Graph& training);

}  // namespace kiwi::ir
