#include "kiwi/cost/step_op_calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kiwi/cost/pass_work.h"

namespace kiwi::cost {

Result<double> CalibratedStepOpSeconds(const ir::Graph& reference, double measured_seconds,
                                       const CostModel& priced_by) {
  if (!(measured_seconds > 0.0))
    return BadInput(fmt::format("the reference pass's time must be positive (got {})", measured_seconds));
  std::vector<ir::NodeId> all(static_cast<size_t>(reference.size()));
  std::iota(all.begin(), all.end(), 0);
  const PassWork pass = SumPassWork(reference, all, priced_by);  // the optimizer step left out
  if (pass.priced_ops == 0) return BadInput("the reference model has no op that pays a per-op time");
  return std::max(measured_seconds - pass.seconds, 0.0) / static_cast<double>(pass.priced_ops);
}

}  // namespace kiwi::cost
