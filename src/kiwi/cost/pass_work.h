#pragma once
// What one pass over a set of ops costs one device, split the way the layer model and the per-op
// calibration both need it: the work (which scales with the batch) apart from the per-op overhead.
#include <span>

#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/graph.h"

namespace kiwi::cost {

// One pass over `ops` for the whole graph batch: the seconds one device spends on the work, the per-op
// overhead it pays whatever the batch (CostModel::OverheadIn) over the ops that pay one
// (CostModel::PaysOpOverhead), and the kernels it launches. The optimizer update runs once per
// iteration, not per pass, so it is left out (Galvatron-BMW §V times layers per sample).
struct PassWork {
  double seconds = 0.0;
  double overhead = 0.0;
  int kernels = 0;
  int priced_ops = 0;
};

PassWork SumPassWork(const ir::Graph& graph, std::span<const ir::NodeId> ops, const CostModel& cost_model);

}  // namespace kiwi::cost
