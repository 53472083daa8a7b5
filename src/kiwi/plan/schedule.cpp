#include "kiwi/plan/plan.h"

namespace kiwi::plan {

std::vector<Step> CheckpointAllSchedule(const ir::Graph& graph) {
  const std::vector<ir::NodeId> order = graph.order();
  std::vector<int32_t> position(static_cast<size_t>(graph.size()), -1);
  for (size_t i = 0; i < order.size(); ++i) position[static_cast<size_t>(order[i])] = static_cast<int32_t>(i);

  // last_use[v]: position of v's last consumer, or v's own position when nothing consumes it.
  std::vector<int32_t> last_use(position);
  for (const ir::Node& n : graph.nodes())
    for (ir::NodeId in : n.inputs)
      last_use[static_cast<size_t>(in)] = std::max(last_use[static_cast<size_t>(in)], position[static_cast<size_t>(n.id)]);

  std::vector<std::vector<ir::NodeId>> frees_after(order.size());
  for (const ir::Node& n : graph.nodes())
    if (!n.is_persistent()) frees_after[static_cast<size_t>(last_use[static_cast<size_t>(n.id)])].push_back(n.id);

  std::vector<Step> steps;
  steps.reserve(order.size() * 2);
  for (size_t i = 0; i < order.size(); ++i) {
    steps.push_back({StepKind::kCompute, order[i]});
    for (ir::NodeId v : frees_after[i]) steps.push_back({StepKind::kFree, v});
  }
  return steps;
}

}  // namespace kiwi::plan
