#include "kiwi/sim/layer_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <span>

#include "kiwi/ir/backward.h"
#include "kiwi/ir/layers.h"

namespace kiwi::sim {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Seconds one device spends on `ops` for the whole graph batch; the optimizer update runs once per
// iteration, not per sample, so it is left out (Galvatron-BMW §V times layers per sample).
double SumComputeSeconds(const ir::Graph& graph, std::span<const ir::NodeId> ops, const cost::CostModel& cost_model) {
  double seconds = 0.0;
  for (ir::NodeId id : ops) {
    const ir::Node& node = graph.node(id);
    if (node.kind == ir::OpKind::kOptimizer) continue;
    seconds += cost_model.ComputeTime(node);
  }
  return seconds;
}

// Gradients + optimizer states per parameter byte. The final gradient of each parameter is what the
// optimizer node reads from the backward pass (ir/backward.h); without an optimizer node gradients
// are assumed to be as large as the parameters.
double StateBytesPerParameterByte(const ir::Graph& graph) {
  int64_t parameter_bytes = 0, state_bytes = 0, gradient_bytes = 0;
  bool has_optimizer = false;
  for (const ir::Node& node : graph.nodes()) {
    if (node.kind == ir::OpKind::kParameter) parameter_bytes += node.output.Bytes();
    if (node.kind == ir::OpKind::kOptimizerState) state_bytes += node.output.Bytes();
    if (node.kind != ir::OpKind::kOptimizer) continue;
    has_optimizer = true;
    for (ir::NodeId in : node.inputs) {
      const ir::Node& read = graph.node(in);  // parameters and states are read too: skip them
      if (read.is_backward() && !read.is_persistent()) gradient_bytes += read.output.Bytes();
    }
  }
  if (parameter_bytes == 0) return 0.0;
  if (!has_optimizer) gradient_bytes = parameter_bytes;
  return static_cast<double>(state_bytes + gradient_bytes) / static_cast<double>(parameter_bytes);
}

LayerProfile ProfileOf(const ir::Graph& graph, const ir::Layer& layer, int64_t graph_batch,
                       const cost::CostModel& cost_model) {
  LayerProfile p;
  p.name = layer.name;
  p.parameter_bytes = layer.parameter_bytes;
  p.activation_bytes_per_sample = CeilDiv(layer.saved_activation_bytes, graph_batch);
  p.boundary_bytes_per_sample = CeilDiv(layer.boundary_activation_bytes, graph_batch);
  const double batch = static_cast<double>(graph_batch);
  p.forward_seconds_per_sample = SumComputeSeconds(graph, layer.forward, cost_model) / batch;
  p.backward_seconds_per_sample = SumComputeSeconds(graph, layer.backward, cost_model) / batch;
  // Megatron TP all-reduces the layer's [s, b, h] output twice per forward pass (after attention and
  // after the MLP), each as large as the boundary tensor (Shoeybi et al. 2019, Fig. 3).
  p.tp_comm_bytes_per_sample = 2 * p.boundary_bytes_per_sample;
  return p;
}

// Embeddings, head, loss: the nodes of no layer.
void FillOther(const ir::Graph& graph, const ir::LayerView& view, int64_t graph_batch,
               const cost::CostModel& cost_model, LayerModel& model) {
  std::vector<ir::NodeId> forward, backward;
  for (ir::NodeId id : view.other) {
    const ir::Node& node = graph.node(id);
    if (node.kind == ir::OpKind::kParameter) model.other_parameter_bytes += node.output.Bytes();
    (node.is_backward() ? backward : forward).push_back(id);
  }
  int64_t layer_saved = 0;
  for (const ir::Layer& layer : view.layers) layer_saved += layer.saved_activation_bytes;
  const int64_t other_saved = ir::SavedActivationBytes(graph, -1) - layer_saved;
  model.other_activation_bytes_per_sample = CeilDiv(std::max<int64_t>(other_saved, 0), graph_batch);
  const double batch = static_cast<double>(graph_batch);
  model.other_forward_seconds_per_sample = SumComputeSeconds(graph, forward, cost_model) / batch;
  model.other_backward_seconds_per_sample = SumComputeSeconds(graph, backward, cost_model) / batch;
}

}  // namespace

Result<LayerModel> BuildLayerModel(const ir::Graph& training, int64_t graph_batch, const cost::CostModel& cost_model) {
  if (graph_batch <= 0)
    return BadInput(fmt::format("{}: graph batch: must be positive, got {}", training.name(), graph_batch));
  Result<ir::LayerView> view = ir::BuildLayerView(training);
  if (!view) return view.error();

  LayerModel model;
  model.name = training.name();
  model.layers.reserve(view->layers.size());
  for (const ir::Layer& layer : view->layers) model.layers.push_back(ProfileOf(training, layer, graph_batch, cost_model));
  FillOther(training, *view, graph_batch, cost_model, model);
  model.state_bytes_per_parameter_byte = StateBytesPerParameterByte(training);
  return model;
}

}  // namespace kiwi::sim
