#pragma once
// What `kiwi graph` reports about a training graph. Memory and time come from the simulator
// replaying the checkpoint-all schedule on one device, never from a separate computation.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/graph.h"
#include "kiwi/util/result.h"

namespace kiwi::report {

struct GraphSummary {
  std::string name;
  int64_t nodes = 0;
  int64_t edges = 0;
  int64_t forward_nodes = 0;
  int64_t backward_nodes = 0;
  int64_t checkpoint_all_peak_bytes = 0;  // CONTRACT.md definition, via sim::SimulateOperatorPlan
  double compute_cost = 0.0;              // sum of every node's cost (measured, else roofline seconds)
  int64_t parameters = 0;                 // elements of the parameter tensors (the model's parameter count)
  int64_t persistent_bytes = 0;           // parameters and optimizer state
  int64_t saved_activation_bytes = 0;     // forward tensors read by the backward pass
  int64_t layers = 0;                     // distinct Node::layer values >= 0
  bool measured_costs = false;            // every computed node has a measured cost
  double per_op_seconds = 0.0;            // what each priced op pays beyond its work (CostModel::KernelOverhead)
};

Result<GraphSummary> SummarizeGraph(const ir::Graph& graph, const cost::CostModel& cost_model);
nlohmann::json ToJson(const GraphSummary& summary);
std::string ToText(const GraphSummary& summary);

}  // namespace kiwi::report
