#pragma once
// A plan's throughput in the units practitioners compare: samples/s, tokens/s per device and model
// FLOPs utilization (MFU: the model's FLOPs per iteration over what the devices' peak could do in that
// time, Chowdhery et al. 2022 (PaLM) App. B; recomputation is not model FLOPs, so it lowers MFU).
#include <cstdint>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/ir/dtype.h"

namespace kiwi::cost {

struct TrainingThroughput {
  double samples_per_second = 0.0;
  double tokens_per_second_per_device = 0.0;
  double model_flops_per_iteration = 0.0;  // 0 when the model's FLOPs are unknown
  double mfu = 0.0;                        // in [0, 1]; 0 when the FLOPs or the device's peak are unknown
};

// One iteration of `global_batch` samples of `tokens_per_sample` tokens each (1 for models without a
// sequence) taking `iteration_seconds` on every device of `cluster`, computing in `dtype`.
TrainingThroughput ThroughputOf(const LayerModel& model, int64_t global_batch, int64_t tokens_per_sample,
                                double iteration_seconds, const Cluster& cluster, ir::DType dtype);

}  // namespace kiwi::cost
