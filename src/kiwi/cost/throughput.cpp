#include "kiwi/cost/throughput.h"

namespace kiwi::cost {

TrainingThroughput ThroughputOf(const LayerModel& model, int64_t global_batch, int64_t tokens_per_sample,
                                double iteration_seconds, const Cluster& cluster, ir::DType dtype) {
  TrainingThroughput t;
  if (iteration_seconds <= 0.0) return t;
  const double batch = static_cast<double>(global_batch);
  const double devices = static_cast<double>(cluster.NumDevices());
  t.samples_per_second = batch / iteration_seconds;
  t.tokens_per_second_per_device = t.samples_per_second * static_cast<double>(tokens_per_sample) / devices;
  t.model_flops_per_iteration = model.TrainingFlopsPerSample() * batch;
  const double peak = cluster.device.PeakFlops(dtype) * devices;
  if (peak > 0.0) t.mfu = t.model_flops_per_iteration / (iteration_seconds * peak);
  return t;
}

}  // namespace kiwi::cost
