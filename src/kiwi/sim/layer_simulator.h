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

// Semantics, in full (Galvatron-BMW §III-A, §V, Eq. 1 and 8; details in layer_stage.cpp):
//  - Stage s runs the layers of pp_partition[s] on NumDevices / pp devices; a layer's mesh is
//    MakeMesh({pp, dp, tp}): TP innermost (fastest links), DP outside it, stages outermost. The
//    per-device micro-batch of a layer is global_batch / (micro_batches * dp).
//  - Embeddings/head/loss ("other") run on the first stage with the first layer's tp/dp/sdp.
//  - Memory per device of a stage: model states parameter_bytes / tp * (1 + state ratio), / dp under
//    SDP; activations (boundary only when checkpointed) * micro-batch / tp, times the micro-batches in
//    flight (1F1B: min(pp - s, m); GPipe: m); plus the largest recomputed (activation - boundary) of
//    one checkpointed layer and the largest parameters one SDP layer gathers (parameter_bytes / tp).
//  - Time of one micro-batch C_s: compute (forward + backward per sample * micro-batch / tp),
//    recompute (one more forward + its 2 TP all-reduces per checkpointed layer), communication (2 + 2
//    TP all-reduces of tp_comm_bytes_per_sample / 2 * micro-batch over the TP axis, 2 SDP all-gathers
//    of parameter_bytes / tp over the DP axis, p2p sends of the boundary to/from neighbouring stages),
//    resharding (Slice-Gather: an all-gather of the boundary when the DP degree shrinks between
//    neighbouring layers). Gradient sync G_s (DP all-reduce / SDP reduce-scatter of parameter_bytes /
//    tp) happens in the last micro-batch, overlapped per layer with its backward (+ recomputation)
//    through CostModel::OverlappedTime; only the excess over that compute counts.
//  - iteration = (m - 1) max_s C_s + sum_s (C_s + G_s) (Eq. 8, for 1F1B and GPipe alike); the time
//    buckets use the same decomposition (G_s goes to communication) and add up to it.
//  - summary.peak_memory_per_device[d] is the peak of d's stage (d / devices per stage); timeline is
//    empty and recomputations counts checkpointed layer forwards run again (layers * micro-batches).
// Errors (kBadInput): degrees that do not multiply to the devices of a stage, a partition that does
// not cover the layers, a batch not divisible into micro-batches and DP shards, a strategy count
// that differs from the model's layers.
Result<LayerSimResult> SimulateLayerPlan(const LayerModel& model, const plan::LayerPlan& plan,
                                         const cost::Cluster& cluster, const cost::CostModel& cost_model);

}  // namespace kiwi::sim
