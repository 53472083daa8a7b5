// Galvatron-BMW Eq. 1 and Eq. 8 over a pipeline's stages: pipeline.h.
#include "kiwi/cost/pipeline.h"

#include <algorithm>

namespace kiwi::cost {

int MicrobatchesInFlight(plan::PipelineSchedule schedule, int pp, int micro_batches, int stage, int virtual_stages) {
  if (schedule == plan::PipelineSchedule::kGPipe) return micro_batches;
  if (virtual_stages <= 1) return std::min(pp - stage, micro_batches);
  const int64_t warmup = 2 * int64_t{pp - stage - 1} + int64_t{virtual_stages - 1} * pp;
  return static_cast<int>(std::min<int64_t>(warmup + 1, int64_t{virtual_stages} * micro_batches));
}

StageMemory& StageMemory::operator+=(const StageMemory& layer) {
  backward_peak = std::max(backward_peak, activations + layer.backward_peak);  // this layer's backward: ours kept
  model_states += layer.model_states;
  activations += layer.activations;
  transient = std::max(transient, layer.transient);
  gathered = std::max(gathered, layer.gathered);
  layer_headroom = std::max(layer_headroom, layer.layer_headroom);
  return *this;
}

StageMemory LayerTerms(int64_t model_states, int64_t activations, int64_t transient, int64_t gathered) {
  return StageMemory{.model_states = model_states,
                     .activations = activations,
                     .transient = transient,
                     .gathered = gathered,
                     .backward_peak = activations + transient + gathered,
                     .layer_headroom = transient + gathered};
}

int64_t InterleavedStagePeakBytes(const std::vector<StageMemory>& chunks, int pp, int micro_batches, int stage) {
  const int v = static_cast<int>(chunks.size());
  int64_t states = 0, headroom = 0;
  for (const StageMemory& c : chunks) {
    states += c.model_states;
    headroom = std::max(headroom, c.layer_headroom);
  }
  const int total = v * micro_batches;
  const int warmup = MicrobatchesInFlight(plan::PipelineSchedule::k1F1B, pp, micro_batches, stage, v) - 1;
  auto chunk_of = [&](int k, bool backward) {
    const int group = (k % (pp * v)) / pp;
    return static_cast<size_t>(backward ? v - 1 - group : group);
  };
  int64_t held = 0, most = 0;
  auto forward = [&](int k) { most = std::max(most, held += chunks[chunk_of(k, false)].activations); };
  auto backward = [&](int k) { held -= chunks[chunk_of(k, true)].activations; };
  for (int k = 0; k < warmup; ++k) forward(k);  // warmup < total: MicrobatchesInFlight is at most v m
  for (int i = 0; i + warmup < total; ++i) {
    forward(warmup + i);
    backward(i);
  }
  return states + most + headroom;
}

int64_t ReservedBytes(const DeviceSpec& device) { return std::max<int64_t>(device.reserved_bytes, 0); }

int64_t GalvatronReservedBytes(int64_t budget_bytes) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  const int64_t budget_mib = budget_bytes / kMiB;  // Galvatron's max_mem, MB
  const int64_t cache_mib = budget_mib / 1024 > 20 ? static_cast<int64_t>(static_cast<double>(budget_mib) * 0.2) : 0;
  return (cache_mib + 1024) * kMiB;
}

double PipelineIterationSeconds(int micro_batches, double slowest_microbatch_seconds, double sum_of_stages_seconds,
                                double slowest_optimizer_seconds) {
  return InterleavedIterationSeconds(micro_batches, 1, slowest_microbatch_seconds, sum_of_stages_seconds, 0.0,
                                     slowest_optimizer_seconds);
}

double InterleavedIterationSeconds(int micro_batches, int virtual_stages, double slowest_microbatch_seconds,
                                   double sum_of_stages_seconds, double sum_of_syncs_seconds,
                                   double slowest_optimizer_seconds) {
  const double v = virtual_stages;
  return (micro_batches - 1.0 / v) * slowest_microbatch_seconds + sum_of_stages_seconds / v + sum_of_syncs_seconds +
         slowest_optimizer_seconds;
}

double PipelineBubbleSeconds(int virtual_stages, double slowest_microbatch_seconds, double sum_of_stages_seconds) {
  return (sum_of_stages_seconds - slowest_microbatch_seconds) / virtual_stages;
}

}  // namespace kiwi::cost
