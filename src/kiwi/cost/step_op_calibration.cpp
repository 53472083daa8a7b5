#include "kiwi/cost/step_op_calibration.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiwi::cost {

Result<double> CalibratedStepOpSeconds(const ir::Graph& reference, double measured_seconds,
                                       const CostModel& priced_by) {
  if (!(measured_seconds > 0.0))
    return BadInput(fmt::format("the reference pass's time must be positive (got {})", measured_seconds));
  double work = 0.0;
  int64_t ops = 0;
  for (const ir::Node& node : reference.nodes()) {
    if (node.kind == ir::OpKind::kOptimizer) continue;
    work += priced_by.ComputeTime(node) - priced_by.OverheadIn(node);
    if (priced_by.PaysOpOverhead(node)) ++ops;
  }
  if (ops == 0) return BadInput("the reference model has no op that pays a per-op time");
  return std::max(measured_seconds - work, 0.0) / static_cast<double>(ops);
}

}  // namespace kiwi::cost
