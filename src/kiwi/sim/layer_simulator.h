#pragma once
// Replays a layer-level plan (per-layer DP/SDP/TP/checkpoint, pipeline partition, micro-batches) on
// a cluster: per-stage peak memory per device and iteration time, with Galvatron-BMW's estimator
// (§V): compute scaled by the per-device batch, TP all-reduces (again in recomputation), SDP
// all-gathers and reduce-scatter, DP gradient all-reduce overlapped with the backward pass (overlap
// slowdown), 1F1B-flush / GPipe pipeline time (Eq. 8) with the last micro-batch's gradient sync.
#include <cstdint>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/plan/plan.h"
#include "kiwi/sim/layer_model.h"
#include "kiwi/sim/simulator.h"
#include "kiwi/util/result.h"

namespace kiwi::sim {

struct StageResult {
  std::vector<int> layers;             // layer indices of the stage
  int64_t peak_memory_bytes = 0;       // per device of the stage
  double microbatch_seconds = 0.0;     // forward + backward of one micro-batch, no gradient sync
  double gradient_sync_seconds = 0.0;  // DP/SDP gradient communication, not hidden by compute
};

struct LayerSimResult {
  SimResult summary;                   // peak (largest stage), per-device peaks, time breakdown, iteration time
  std::vector<StageResult> stages;
  double throughput_samples_per_second = 0.0;
};

// Errors (kBadInput): degrees that do not multiply to the devices of a stage, a partition that does
// not cover the layers, a batch not divisible into micro-batches and DP shards, a strategy count
// that differs from the model's layers.
Result<LayerSimResult> SimulateLayerPlan(const LayerModel& model, const plan::LayerPlan& plan,
                                         const cost::Cluster& cluster, const cost::CostModel& cost_model);

}  // namespace kiwi::sim
