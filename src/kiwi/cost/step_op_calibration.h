#pragma once
// The per-op time of eager training on a CPU, calibrated from a timed training pass of a small model
// (DeviceProfile::reference_step). PyTorch's eager mode runs more than kiwi's IR counts for one op (a
// linear's weight transposed forward and backward, the views around a batched matmul, autograd's
// engine visiting each recorded function): measured on this project's 2-core machine, a small GPT's
// pass costs about 7 us per IR op beyond its work, where a chain of one-element multiplications (the
// profile's kernel_time) costs 3.7 us per op. The reference pass measures the first directly.
#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/graph.h"
#include "kiwi/util/result.h"

namespace kiwi::cost {

// (measured_seconds - work) / ops over the forward and backward ops of `reference` (its optimizer step
// left out, as the reference pass leaves it out): SumPassWork's seconds and priced ops, the work being
// what `priced_by` gives each op beyond its per-op overhead (an op measured by name counts whole). 0 when the measured pass is no
// longer than its priced work; kBadInput when `reference` has no such op or the time is not positive.
Result<double> CalibratedStepOpSeconds(const ir::Graph& reference, double measured_seconds,
                                       const CostModel& priced_by);

}  // namespace kiwi::cost
