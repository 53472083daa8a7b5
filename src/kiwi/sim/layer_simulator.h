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
#include "kiwi/cost/layer_cost.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/plan/plan.h"
#include "kiwi/sim/simulator.h"
#include "kiwi/util/result.h"

namespace kiwi::sim {

// A stage's peak memory per device by what holds it (the kinds add up to StageResult::peak_memory_bytes).
struct StageMemorySplit {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_states = 0;  // with fp32 master weights
  int64_t activations = 0;       // kept for the backward passes of the micro-batches in flight
  // At the backward pass's peak: a layer's transient and ZeRO-2/3 gathered parameters or gradient, less
  // the later layers' activations freed by then (cost::StageMemory::Headroom).
  int64_t buffers = 0;
  int64_t reserved = 0;          // the device's reserve (cost::ReservedBytes)
  int64_t Total() const { return parameters + gradients + optimizer_states + activations + buffers + reserved; }
};

struct StageResult {
  std::vector<int> layers;             // layer indices of the stage
  int64_t peak_memory_bytes = 0;       // per device of the stage
  StageMemorySplit memory;             // what holds that peak
  double microbatch_seconds = 0.0;     // forward + backward of one micro-batch, no gradient sync
  double gradient_sync_seconds = 0.0;  // DP/SDP gradient communication, not hidden by compute
  double optimizer_seconds = 0.0;      // the stage's optimizer step and ZeRO-1/2's gather after it, once
  // One micro-batch's forward and backward seconds of each of the stage's model chunks (one without
  // interleaving; cost::StageCost::forward splits them): what a timeline of the pipeline draws.
  std::vector<double> chunk_forward_seconds;
  std::vector<double> chunk_backward_seconds;
};

struct LayerSimResult {
  SimResult summary;                   // peak (largest stage), per-device peaks, time breakdown, iteration time
  std::vector<StageResult> stages;
  double throughput_samples_per_second = 0.0;
  // Of summary.iteration_seconds, what the slowest stage waits while the pipeline fills and drains
  // (cost::PipelineBubbleSeconds); the time buckets include it.
  double pipeline_bubble_seconds = 0.0;
  // summary.time.communication by kind (Eq. 8 applied to each kind's terms; they add up to it).
  cost::CommunicationByKind communication;
};

// Semantics, in full (Galvatron-BMW §III-A, §V, Eq. 1 and 8; details in cost/layer_cost.cpp):
//  - Stage s runs the layers of pp_partition[s] on NumDevices / pp devices; a layer's mesh is
//    MakeMesh({pp, dp, tp}): TP innermost (fastest links), DP outside it, stages outermost. The
//    per-device micro-batch of a layer is global_batch / (micro_batches * dp).
//  - The embeddings run on the first stage with the first layer's tp/dp/sdp, the head + loss on the
//    last stage with the last layer's (LayerModel::embedding, head; never checkpointed).
//  - Memory per device of a stage: model states of the TP shard (shard = (parameter_bytes - replicated)
//    / tp + replicated) * (1 + state ratio), / dp under SDP; activations (boundary only when
//    checkpointed) * micro-batch / tp, times the micro-batches in flight (1F1B: min(pp - s, m); GPipe:
//    m); plus the largest recomputed (activation - boundary) of one checkpointed layer and the largest
//    TP shard one SDP layer gathers.
//  - Time of one micro-batch C_s: compute (forward + backward per sample * micro-batch / tp),
//    recompute (one more forward + its forward TP all-reduces per checkpointed layer), communication
//    (TP all-reduces over the TP axis: a layer's 2 + 2 of tp_comm_bytes_per_sample / 2 * micro-batch,
//    the embeddings' and head's own; 2 SDP all-gathers of the shard over the DP axis; SDP's
//    reduce-scatter of the shard's gradients, overlapped with the layer's backward, only the excess
//    counted; p2p sends of the boundary to/from neighbouring stages), resharding (Slice-Gather).
//    Gradient sync G_s (DP all-reduce of the shard) happens in the last micro-batch, overlapped per
//    layer with its backward (+ recomputation) through CostModel::OverlappedTime; only the excess
//    over that compute counts.
//  - iteration = (m - 1) max_s C_s + sum_s (C_s + G_s) + max_s O_s (Eq. 8 with the optimizer step O_s,
//    for 1F1B and GPipe alike); the time buckets use the same decomposition (G_s goes to
//    communication) and add up to it.
//  - interleaved 1F1B (virtual_stages v > 1; pp_partition lists pp x v chunks, chunk c on stage
//    c % pp): a stage's C_s covers all its chunks, each sending and receiving its boundary; the
//    iteration is (m - 1/v) max_s C_s + sum_s C_s / v + sum_s G_s + max_s O_s
//    (cost::InterleavedIterationSeconds); memory holds the most activations Megatron-LM's op order
//    keeps at once, chunk by chunk (cost::InterleavedStagePeakBytes).
//  - every stage's peak adds the device's reserve (cost::ReservedBytes).
//  - summary.peak_memory_per_device[d] is the peak of d's stage (d / devices per stage); timeline is
//    empty and recomputations counts checkpointed layer forwards run again (layers * micro-batches).
// Errors (kBadInput): degrees that do not multiply to the devices of a stage, a partition that does
// not cover the layers or has not pp x v entries, interleaving without 1F1B, pp >= 2 and micro-batches
// a multiple of pp, a batch not divisible into micro-batches and DP shards, a strategy count
// that differs from the model's layers.
Result<LayerSimResult> SimulateLayerPlan(const cost::LayerModel& model, const plan::LayerPlan& plan,
                                         const cost::Cluster& cluster, const cost::CostModel& cost_model);

// The bytes each device of a stage passes to collectives in one iteration of `plan`, by purpose, as
// the simulator prices them (cost/layer_cost.h LayerCommunicationOf, SliceGatherBytes, PointToPointBytes):
// what a runtime of the plan should measure (python/kiwi/torch/distributed).
struct LayerTraffic {
  int64_t tp_all_reduce_bytes = 0;       // Megatron TP all-reduces, forward + backward + recomputation
  int64_t sdp_all_gather_bytes = 0;      // ZeRO-3 parameter all-gathers
  int64_t step_all_gather_bytes = 0;     // ZeRO-1/2 all-gather of the updated parameters after the step
  int64_t dp_all_reduce_bytes = 0;       // DP gradient all-reduce
  int64_t sdp_reduce_scatter_bytes = 0;  // ZeRO-1/2/3 gradient reduce-scatter
  int64_t slice_gather_bytes = 0;           // Slice-Gather into this layer's layout: forward all-gathers
  int64_t slice_gather_backward_bytes = 0;  // and backward all-gathers of the gradient
  int64_t sp_all_gather_bytes = 0;       // sequence parallelism's TP all-gathers, forward + backward + recomputation
  int64_t sp_reduce_scatter_bytes = 0;   // and reduce-scatters
  int64_t sp_gradient_all_reduce_bytes = 0;  // and its TP all-reduce of the replicated parameters' gradients
  int64_t sequence_gather_bytes = 0;           // TP all-gather of a sequence-parallel previous layer's output
  int64_t sequence_gather_backward_bytes = 0;  // and of this sequence-parallel layer's input gradient
  // Expert parallelism: the all-to-alls of the routed rows over the EP group (forward + backward +
  // recomputation), and the experts' gradient sync and post-step all-gather over the dp / ep ranks
  // holding the same experts (the fields above then count the rest of the layer).
  int64_t all_to_all_bytes = 0;
  int64_t expert_dp_all_reduce_bytes = 0;
  int64_t expert_reduce_scatter_bytes = 0;
  int64_t expert_step_all_gather_bytes = 0;
  // Context parallelism: ring attention's sends of keys and values (and, backward, their gradients)
  // to the next rank of the CP group (forward + backward + recomputation), and the all-to-alls of the
  // boundary activation from a previous layer of another CP degree (forward and its gradient backward).
  int64_t ring_bytes = 0;
  int64_t context_reshard_bytes = 0;
  int ring_sends = 0;
  // Ulysses in place of the ring: its all-to-alls (forward + backward + recomputation) and their bytes.
  int ulysses_all_to_alls = 0;
  int64_t ulysses_bytes = 0;
  // A tied embedding's gradient summed with the other pipeline end's copy, once per step (embedding, head).
  int64_t tied_all_reduce_bytes = 0;
  int tp_all_reduces = 0;                // calls per iteration
  int sp_collectives = 0;                // sequence-parallel all-gathers + reduce-scatters per iteration
  int sdp_all_gathers = 0;
  int all_to_alls = 0;
};
struct PlanTraffic {
  std::vector<LayerTraffic> layers;  // per device of the layer's stage
  LayerTraffic embedding;             // on the first stage, per device (as SimulateLayerPlan)
  LayerTraffic head;                  // head + loss, on the last stage
  std::vector<int64_t> send_forward_bytes;   // per stage, per device: activations sent to the next stage
  std::vector<int64_t> send_backward_bytes;  // per stage, per device: gradients sent to the previous stage
};
// Errors as SimulateLayerPlan's.
Result<PlanTraffic> LayerPlanTraffic(const cost::LayerModel& model, const plan::LayerPlan& plan, const cost::Cluster& cluster);

}  // namespace kiwi::sim
