#pragma once
// Per-layer figures the layer-level (Galvatron-BMW) simulator and planner work with, derived from an
// operator-level training graph (ir/layers.h) and the cost model, so both levels share one source.
#include <cstdint>
#include <string>
#include <vector>

#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/graph.h"
#include "kiwi/util/result.h"

namespace kiwi::sim {

struct LayerProfile {
  std::string name;
  int64_t parameter_bytes = 0;               // the layer's weights (training dtype)
  int64_t activation_bytes_per_sample = 0;   // forward tensors kept for backward, no checkpointing
  int64_t boundary_bytes_per_sample = 0;     // the layer's output: kept when checkpointed, sent between stages
  double forward_seconds_per_sample = 0.0;   // one device, no parallelism
  double backward_seconds_per_sample = 0.0;
  int64_t tp_comm_bytes_per_sample = 0;      // bytes all-reduced by Megatron TP in one forward pass
};

struct LayerModel {
  std::string name;
  std::vector<LayerProfile> layers;
  int64_t other_parameter_bytes = 0;          // parameters outside layers (embeddings, head), on the first/last stage
  int64_t other_activation_bytes_per_sample = 0;
  double other_forward_seconds_per_sample = 0.0;
  double other_backward_seconds_per_sample = 0.0;  // the simulator places all of `other` on the first stage
  // Gradients + optimizer states (+ fp32 master weights) per byte of parameters: e.g. fp32 Adam = 3.
  double state_bytes_per_parameter_byte = 0.0;
};

// Groups the training graph by layer (ir::BuildLayerView) and divides activation bytes and times by
// the graph's batch size `graph_batch` (the batch it was built for) to get per-sample figures.
Result<LayerModel> BuildLayerModel(const ir::Graph& training, int64_t graph_batch, const cost::CostModel& cost_model);

}  // namespace kiwi::sim
