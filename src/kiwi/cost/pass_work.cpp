#include "kiwi/cost/pass_work.h"

namespace kiwi::cost {

PassWork SumPassWork(const ir::Graph& graph, std::span<const ir::NodeId> ops, const CostModel& cost_model) {
  PassWork work;
  for (ir::NodeId id : ops) {
    const ir::Node& node = graph.node(id);
    if (node.kind == ir::OpKind::kOptimizer) continue;
    const double overhead = cost_model.OverheadIn(node);
    work.seconds += cost_model.ComputeTime(node) - overhead;
    work.overhead += overhead;
    if (cost_model.LaunchesKernel(node)) ++work.kernels;
    if (cost_model.PaysOpOverhead(node)) ++work.priced_ops;
  }
  return work;
}

}  // namespace kiwi::cost
