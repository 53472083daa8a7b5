// Galvatron-BMW Eq. 1 and Eq. 8 over a pipeline's stages: pipeline.h.
#include "kiwi/cost/pipeline.h"

#include <algorithm>

namespace kiwi::cost {

int MicrobatchesInFlight(plan::PipelineSchedule schedule, int pp, int micro_batches, int stage) {
  if (schedule == plan::PipelineSchedule::kGPipe) return micro_batches;
  return std::min(pp - stage, micro_batches);
}

StageMemory& StageMemory::operator+=(const StageMemory& layer) {
  model_states += layer.model_states;
  activations += layer.activations;
  transient = std::max(transient, layer.transient);
  gathered = std::max(gathered, layer.gathered);
  return *this;
}

int64_t ReservedBytes(const DeviceSpec& device) { return std::max<int64_t>(device.reserved_bytes, 0); }

double PipelineIterationSeconds(int micro_batches, double slowest_microbatch_seconds, double sum_of_stages_seconds,
                                double slowest_optimizer_seconds) {
  return (micro_batches - 1) * slowest_microbatch_seconds + sum_of_stages_seconds + slowest_optimizer_seconds;
}

}  // namespace kiwi::cost
