#pragma once
// Per-layer memory and time on a pipeline stage, following Galvatron-BMW's cost estimator (§III-A,
// §V): what the layer simulator (sim/layer_simulator.cpp) replays and the hybrid search tabulates
// (solve/hybrid/layer_costs.cpp), so both price a layer with the same terms.
#include <cstdint>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/cost/pipeline.h"
#include "kiwi/ir/mesh.h"
#include "kiwi/plan/plan.h"
#include "kiwi/util/result.h"

namespace kiwi::cost {

// A layer mesh {pp, dp, tp} with its DP axis split into {dp / g, g}, the g ranks of a group consecutive
// (the faster links): expert parallelism's (g = ep: the all-to-alls run over `group`, the expert
// weights' gradient sync over `across`, the ranks holding the same experts) and context parallelism's
// (g = cp: the ring attention runs over `group`). Masks 0 without the split.
struct DpGroups {
  ir::DeviceMesh mesh;
  ir::AxisMask group = 0;
  ir::AxisMask across = 0;
};

// A mesh laid over the cluster (Cluster::MakeMesh, innermost axis fastest) with the mask of each
// requested axis; axes of size 1 are left out of the mesh and get mask 0 (no communication).
struct StageMesh {
  std::vector<int> sizes;           // as requested, outermost first
  ir::DeviceMesh mesh;
  std::vector<ir::AxisMask> masks;  // one per requested axis
  DpGroups experts;                 // layer meshes (MakeLayerMesh) with ep > 1: g = ep
  DpGroups context;                 // layer meshes with cp > 1: g = cp
  // The groups in context.mesh of ring attention's sends and of Ulysses' all-to-alls
  // (plan::LayerStrategy::ulysses): each context.group when it spans the CP group, 0 when absent. Under
  // USP context.mesh is {pp, dp / cp, cp / u, u, tp}: the ring over its cp / u ranks u apart, the
  // all-to-alls over the u consecutive ones, context.group both axes.
  ir::AxisMask ring = 0;
  ir::AxisMask ulysses = 0;
};

// Layer meshes are {pp, dp, tp}: TP on the innermost (fastest) links, DP outside it, stages outermost.
inline constexpr int kPpAxis = 0;
inline constexpr int kDpAxis = 1;
inline constexpr int kTpAxis = 2;

Result<StageMesh> MakeStageMesh(const Cluster& cluster, const std::vector<int>& sizes);
// The mesh of a layer placed with `s` on a stage of a pp-stage pipeline: {pp, s.dp, s.tp}, with its
// DpGroups {pp, dp / ep, ep, tp} when s.ep > 1 and {pp, dp / cp, cp, tp} when s.cp > 1 ({pp, dp / cp,
// cp / u, u, tp} under USP, StageMesh::ulysses).
Result<StageMesh> MakeLayerMesh(const Cluster& cluster, int pp, const plan::LayerStrategy& s);

struct PlacedLayer {
  LayerProfile profile;
  plan::LayerStrategy strategy;
  StageMesh mesh;          // {pp, dp, tp}
  // Samples per data-parallel replica in one micro-batch: global_batch / (m * dp / cp). Without CP a
  // replica is one device; with it cp devices, each holding 1 / cp of every sample's tokens.
  int64_t microbatch = 0;
  // One device's share of `per_sample` bytes of each sample of the micro-batch.
  int64_t PerDevice(int64_t per_sample) const { return (per_sample * microbatch + strategy.cp - 1) / strategy.cp; }
  // The samples one device's work amounts to: microbatch / cp.
  double Samples() const { return static_cast<double>(microbatch) / strategy.cp; }
  // The embeddings on a pipeline's first stage, or the head on its last: the tied embedding weight's
  // bytes (LayerModel::tied_embedding_bytes) whose gradient this end sums with the other end's copy once
  // per step (0: no such weight, or one stage).
  int64_t tied_copy_bytes = 0;
  // Micro-batches per step: FSDP2 holds a DP or ZeRO-1 layer's whole gradient across them (StateRatiosOf in
  // layer_cost.cpp); only whether there is more than one matters.
  int micro_batches = 1;
};

// Communication seconds by parallelism: a split of StageCost's communication (or gradient_sync) term
// into the collectives' kinds, adding up to it (what a report shows as "communication by kind").
struct CommunicationByKind {
  double tensor_parallel = 0.0;   // TP all-reduces; SP all-gathers, reduce-scatters, its gradient all-reduce
  double data_parallel = 0.0;     // ZeRO-3 parameter gathers, the unhidden DP / ZeRO (and experts') gradient
                                  // sync, ZeRO-1/2's parameter gather after the step
  double expert_parallel = 0.0;   // the routed rows' all-to-alls
  double context_parallel = 0.0;  // ring attention's sends
  double pipeline = 0.0;          // activations and gradients sent between stages
  double Total() const { return tensor_parallel + data_parallel + expert_parallel + context_parallel + pipeline; }
  CommunicationByKind& operator+=(const CommunicationByKind& o) {
    tensor_parallel += o.tensor_parallel;
    data_parallel += o.data_parallel;
    expert_parallel += o.expert_parallel;
    context_parallel += o.context_parallel;
    pipeline += o.pipeline;
    return *this;
  }
};

struct StageCost {
  double compute = 0.0;        // one micro-batch: forward + backward
  double recompute = 0.0;      // one micro-batch: checkpointed forwards and their TP all-reduces, attention cores
  double communication = 0.0;  // one micro-batch: TP all-reduces, SDP all-gathers, p2p sends
  double resharding = 0.0;     // one micro-batch: Slice-Gather between layers of different layouts
  double gradient_sync = 0.0;  // once per iteration: DP/SDP gradient sync not hidden by the backward
  double optimizer = 0.0;      // once per iteration: the optimizer step over the device's model states
  double parameter_gather = 0.0;  // once per iteration, after the step: ZeRO-1/2's all-gather of the updated shards
  CommunicationByKind communication_kinds;  // `communication` by kind (one micro-batch)
  CommunicationByKind gradient_sync_kinds;  // `gradient_sync` by kind (parameter_gather is all data parallel)
  // Of one micro-batch's compute + communication, the forward pass's: its kernels and the collectives it
  // waits for (TP/SP, all-to-alls, ring sends, a ZeRO-3 gather); the rest of MicrobatchSeconds is the
  // backward pass's (with recomputation, gradient collectives, sends and resharding). A timeline's split.
  double forward = 0.0;
  int64_t peak_memory_bytes = 0;
  double MicrobatchSeconds() const { return compute + recompute + communication + resharding; }
};

// The optimizer step of one layer on one device: a pass over the model states it updates there
// (parameters, gradients, optimizer states: TP-sharded, and DP-sharded under every ZeRO stage), priced
// by the cost model, plus the per-tensor work of every parameter tensor (one flat shard under ZeRO).
// Offloaded (ZeRO-Offload, Ren et al. 2021 §4.2): the stepped parameters' gradients copied to the host,
// the same states stepped by the host's CPUs, the updated parameters copied back, one after another
// (ZeRO-Offload without its one-step delay; the gradients' copy overlapping the backward pass is not
// credited: an upper bound).
double OptimizerSeconds(const PlacedLayer& layer, const LayerModel& model, const CostModel& cost_model);

// ZeRO-1/2's all-gather of the layer's updated parameter shards after the optimizer step (0 otherwise).
double ParameterGatherSeconds(const PlacedLayer& layer, const CostModel& cost_model);

// Bytes a layer's recomputation (whole layer, or selective: the attention core) brings back per
// device for its backward pass; 0 without either.
int64_t RecomputedBytes(const PlacedLayer& layer);

// The most a layer's backward pass holds per device beyond the activations kept for it: what its
// recomputation brings back (RecomputedBytes) and its gradients in flight.
int64_t TransientBytes(const PlacedLayer& layer);

// A layer's model states per device by kind (what LayerMemory counts as StageMemory::model_states,
// to the byte): what a report splits a stage's memory into.
struct ModelStateSplit {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_states = 0;  // and fp32 master weights; 0 where offloaded to the host
  int64_t Total() const { return parameters + gradients + optimizer_states; }
  ModelStateSplit& operator+=(const ModelStateSplit& o) {
    parameters += o.parameters;
    gradients += o.gradients;
    optimizer_states += o.optimizer_states;
    return *this;
  }
};
ModelStateSplit ModelStatesOf(const PlacedLayer& layer, const LayerModel& model);

// One layer's terms of a stage's memory (Galvatron-BMW Eq. 1) per device; `model` gives the bytes of
// gradients and optimizer states per parameter byte.
StageMemory LayerMemory(const PlacedLayer& layer, const LayerModel& model);

// Megatron TP's collectives in one pass of one micro-batch over the layer's TP group, the per-device
// `bytes` of each. Without sequence parallelism a transformer layer's f and g operators are all-reduces
// (Shoeybi et al. 2019, Fig. 3); with it each becomes an all-gather of the sequence shards before a
// column-parallel linear and a reduce-scatter into them after a row-parallel one (Korthikanti et al.
// 2023 §4.2.2, Fig. 5): the same bytes on a ring; the backward gathers a column-parallel linear's input
// once more for its weight gradient (the linear keeps only its block).
struct TpCollectives {
  std::vector<int64_t> all_reduces;
  std::vector<int64_t> all_gathers;
  std::vector<int64_t> reduce_scatters;
  int Count() const {
    return static_cast<int>(all_reduces.size() + all_gathers.size() + reduce_scatters.size());
  }
};

// The collectives AddLayerCost prices for one layer, as the per-device `bytes` of CollectiveTime
// (all-reduce: the buffer; all-gather: the gathered result; reduce-scatter: the input). A collective
// over an axis of size 1 is not run: it is left out. What a runtime passes to its collectives per
// device (python/kiwi/torch/distributed checks its measured traffic against these).
struct LayerCommunication {
  // Per micro-batch: a transformer layer's 2 forward (g) + 2 backward (f) all-reduces, or their
  // sequence-parallel pairs; the embeddings' and head's own (LayerProfile); the forward ones run again
  // when checkpointed.
  TpCollectives tp_forward;
  TpCollectives tp_backward;
  bool tp_recomputed = false;
  int64_t sdp_all_gather_bytes = 0; // one ZeRO-3 all-gather of the TP shard's parameters
  int sdp_all_gathers = 0;          // per micro-batch: before the forward and before the backward
  int64_t step_all_gather_bytes = 0;  // ZeRO-1/2: once per iteration, the updated parameters after the step
  int64_t gradient_sync_bytes = 0;  // one DP all-reduce / ZeRO reduce-scatter of the TP shard's gradients
  Collective gradient_sync = Collective::kAllReduce;
  // DP and ZeRO-1 sync once per iteration (DDP: the last micro-batch; ZeRO-1 accumulates whole
  // gradients); ZeRO-2/3 reduce-scatter every micro-batch's gradients (DeepSpeed: full-size gradients
  // are never kept).
  bool gradient_sync_every_microbatch = false;
  // Sequence parallelism: the TP all-reduce of the gradients of the parameters TP replicates
  // (layernorms, row-parallel biases), each rank having seen only its sequence shard: once per
  // iteration (Megatron's finalize_model_grads), or every micro-batch under ZeRO-2/3, whose
  // reduce-scatter takes each micro-batch's gradients whole.
  int64_t sp_gradient_all_reduce_bytes = 0;
  bool sp_gradient_every_microbatch = false;
  // Expert parallelism (ep > 1): per micro-batch, the all-to-alls of the routed rows over the EP group
  // (Megatron-LM's token dispatcher: dispatch and combine forward, their gradients backward, the forward
  // pair again when checkpointed), each of `all_to_all_bytes` per device; and the expert weights' share
  // of the gradient sync and of ZeRO-1/2's all-gather, over the dp / ep ranks holding the same experts
  // (gradient_sync_bytes and step_all_gather_bytes then count the rest of the layer).
  int64_t all_to_all_bytes = 0;
  int all_to_alls = 0;
  int all_to_alls_recomputed = 0;
  int64_t expert_gradient_sync_bytes = 0;
  int64_t expert_step_all_gather_bytes = 0;
  // Context parallelism (cp > 1): per micro-batch, the ring attention's sends to the next rank of the CP
  // group, each of `ring_bytes` per device (its keys and values, split over TP by heads): cp - 1 forward,
  // 2 (cp - 1) backward (the keys and values again, and their gradients), the forward ones again when
  // the layer or its attention core (selective) is recomputed.
  int64_t ring_bytes = 0;
  int ring_sends = 0;
  int ring_sends_recomputed = 0;
  // DeepSpeed-Ulysses in place of the ring (plan::LayerStrategy::Ulysses; Jacobs et al. 2023 §3.1):
  // per micro-batch, the all-to-alls over the CP group of the queries, keys and values (to a block of
  // the heads) and of the attention's output (back to the sequence block), forward, and of their
  // gradients, backward, per device `ulysses_qkv_bytes` and `ulysses_out_bytes` (a device's sequence
  // block); the forward pair again when the layer, or its attention core, is recomputed.
  int64_t ulysses_qkv_bytes = 0;
  int64_t ulysses_out_bytes = 0;
  bool ulysses_recomputed = false;
  // A tied embedding's two copies on a pipeline's first and last stage (PlacedLayer::tied_copy_bytes):
  // once per step each end all-reduces its gradient, as this end holds it (split over TP, and over DP
  // under ZeRO, as FSDP2 shards it), with the other end's rank at its (dp, tp) position.
  int64_t tied_all_reduce_bytes = 0;
  // Per micro-batch, recomputation included: TP all-reduces; sequence-parallel all-gathers and
  // reduce-scatters (their calls and bytes).
  int TpAllReduces() const;
  int64_t TpAllReduceBytes() const;
  int SequenceCollectives() const;
  int64_t SequenceAllGatherBytes() const;
  int64_t SequenceReduceScatterBytes() const;
};
LayerCommunication LayerCommunicationOf(const PlacedLayer& layer);

// The parameters of `profile` one TP rank holds under TP degree `tp` (Megatron: the replicated part
// whole), and of those the experts' under EP degree `ep`.
int64_t TpShardParameterBytes(const LayerProfile& profile, int tp, int ep = 1);

// Per-device bytes of Slice-Gather's forward all-gather from `prev`'s layout into `next`'s (0: a local
// slice), and of its backward all-gather of the input gradient (when the forward only sliced).
int64_t SliceGatherBytes(const PlacedLayer& prev, const PlacedLayer& next);
int64_t SliceGatherBackwardBytes(const PlacedLayer& prev, const PlacedLayer& next);
// Per-device bytes of the TP all-gather that makes a sequence-parallel layer's output whole for a next
// layer of another layout (forward), and of the one that makes a sequence-parallel next layer's input
// gradient whole for a previous layer of another layout (backward); 0 when neither side needs it.
int64_t SequenceGatherBytes(const PlacedLayer& prev, const PlacedLayer& next);
int64_t SequenceGatherBackwardBytes(const PlacedLayer& prev, const PlacedLayer& next);
// Per-device bytes of the all-to-all that redistributes the boundary activation between neighbouring
// layers of different CP degrees (each sample's tokens over the other group), forward, and of its
// gradient backward; 0 for equal degrees.
int64_t ContextReshardBytes(const PlacedLayer& prev, const PlacedLayer& next);
// Whether two neighbouring layers lay out the boundary activation alike (no resharding between them):
// the same DP and CP degrees and, under TP, both or neither sequence-parallel.
bool SameLayout(const PlacedLayer& prev, const PlacedLayer& next);

// Per-device bytes `sender` sends to the neighbouring stage per micro-batch (each direction).
int64_t PointToPointBytes(const PlacedLayer& sender);

// Adds one layer's per-micro-batch times and its unhidden gradient sync to `cost`.
void AddLayerCost(const PlacedLayer& layer, const CostModel& cost_model, StageCost& cost);

// Slice-Gather (Galvatron-BMW §VI) of `prev`'s output into the layout `next` needs: a forward all-gather
// when the DP degree shrinks, a backward all-gather of the gradient when it grows; around it, the
// sequence gathers (SequenceGatherBytes) when a sequence-parallel side changes layout, and the CP
// all-to-alls (ContextReshardBytes) when the CP degree changes.
Result<double> SliceGatherSeconds(const PlacedLayer& prev, const PlacedLayer& next, const Cluster& cluster,
                                  const CostModel& cost_model);

// Sending `sender`'s boundary activation (or, backwards, its gradient) to the neighbouring stage.
double PointToPointSeconds(const PlacedLayer& sender, const CostModel& cost_model);

}  // namespace kiwi::cost
