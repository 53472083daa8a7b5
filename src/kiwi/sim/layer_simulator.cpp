// Galvatron-BMW's cost estimator (§V) replayed on a layer-level plan, every term priced by cost/ (a
// layer on its stage: cost/layer_cost.h; the stages combined: cost/pipeline.h). Per stage and micro-batch:
//  - compute: forward + backward seconds per sample x per-device micro-batch / tp (§V: time = batch x
//    per-sample time; Megatron TP splits each layer's work tp ways);
//  - recompute: one more forward for checkpointed layers (§V), with its 2 TP all-reduces (§III-A.3);
//  - communication: TP all-reduces (2 forward + 2 backward; the embeddings' and head's own), or with
//    sequence parallelism their all-gather + reduce-scatter pairs, SDP
//    parameter all-gathers (forward and backward, §III-A.2) and gradient reduce-scatter (every
//    micro-batch, as DeepSpeed ZeRO-3), point-to-point sends of boundary activations between stages;
//  - resharding: Galvatron's Slice-Gather between neighbouring layers of different layouts (§VI);
//  - the DP all-reduce of gradients runs once, in the last micro-batch, overlapped with its backward
//    pass and slowed down by the overlap factor (§V), so only its unhidden part counts (the SDP
//    reduce-scatter is overlapped the same way, in every micro-batch).
// The iteration time is Eq. 8 and the memory of a stage follows Eq. 1 with 1F1B/GPipe micro-batches
// in flight (cost/pipeline.h); interleaved 1F1B (virtual_stages v > 1) runs v model chunks per stage,
// each sending its boundary activations, with the bubble shrunk v-fold.
#include "kiwi/sim/layer_simulator.h"

#include <fmt/format.h>

#include <algorithm>

#include "kiwi/cost/layer_cost.h"
#include "kiwi/cost/pipeline.h"

namespace kiwi::sim {
namespace {

using plan::LayerPlan;
using plan::LayerStrategy;

// A stage's layers [first, first + count), or with interleaved 1F1B one of its model chunks'.
struct StageSpan {
  int first = 0;
  int count = 0;
};

// The chunks of stage s in model order (one without interleaving).
std::vector<StageSpan> ChunksOf(const LayerPlan& plan, const std::vector<StageSpan>& chunks, int s) {
  std::vector<StageSpan> out;
  for (int c = s; c < static_cast<int>(chunks.size()); c += plan.pp_degree) out.push_back(chunks[static_cast<size_t>(c)]);
  return out;
}

// Interleaved 1F1B as Megatron-LM runs it: v chunks per stage on the 1F1B schedule, micro-batches in
// groups of pp (its schedule's condition).
Status CheckInterleaving(const LayerPlan& plan) {
  const int v = plan.virtual_stages;
  if (v < 1) return BadInput(fmt::format("layer plan: virtual_stages: must be at least 1, got {}", v));
  if (v == 1) return Status::Ok();
  if (plan.pipeline != plan::PipelineSchedule::k1F1B)
    return BadInput(fmt::format("layer plan: virtual_stages: {} model chunks per stage need the 1f1b schedule "
                                "(interleaved 1F1B), the plan's pipeline is gpipe", v));
  if (plan.pp_degree < 2)
    return BadInput(fmt::format("layer plan: virtual_stages: {} model chunks per stage need pp_degree >= 2, got {}", v,
                                plan.pp_degree));
  if (plan.micro_batches % plan.pp_degree != 0)
    return BadInput(fmt::format("layer plan: micro_batches: {} is not a multiple of pp_degree {}, which interleaved "
                                "1F1B needs (virtual_stages {})", plan.micro_batches, plan.pp_degree, v));
  return Status::Ok();
}

// EP splits a layer's experts over groups of its DP ranks (plan::LayerStrategy::ep).
Status CheckExpertParallelism(const cost::LayerProfile& layer, const LayerStrategy& s, size_t i) {
  if (s.ep == 1) return Status::Ok();
  const std::string at = fmt::format("layer plan: layers[{}]: ep", i);
  if (s.ep < 1 || s.dp % s.ep != 0) return BadInput(fmt::format("{}: {} does not divide dp {}", at, s.ep, s.dp));
  if (layer.experts == 0) return BadInput(fmt::format("{}: {}, but layer {} has no experts", at, s.ep, layer.name));
  if (layer.experts % s.ep != 0)
    return BadInput(fmt::format("{}: {} does not divide the {} experts of layer {}", at, s.ep, layer.experts, layer.name));
  if (s.ZeroStage() == plan::Zero::kParameters)
    return BadInput(fmt::format("{}: expert parallelism with ZeRO-3 is not modelled (zero 0, 1 or 2)", at));
  return Status::Ok();
}

// CP splits each sample's sequence over groups of a layer's DP ranks (plan::LayerStrategy::cp); ring
// attention needs every layer's attention to be ring-splittable over one sequence length, which
// load-balanced causal sharding (two chunks per rank) divides into 2 cp pieces.
Status CheckContextParallelism(const cost::LayerModel& model, const LayerStrategy& s, size_t i) {
  if (s.ulysses < 1 || (s.ulysses > 1 && (s.cp < 2 || s.tp != 1)))
    return BadInput(fmt::format("layer plan: layers[{}]: ulysses: {} needs cp above 1 and tp 1 (cp {}, tp {})", i,
                                s.ulysses, s.cp, s.tp));
  if (s.cp == 1) return Status::Ok();
  const std::string at = fmt::format("layer plan: layers[{}]: cp", i);
  if (s.cp < 1 || s.dp % s.cp != 0) return BadInput(fmt::format("{}: {} does not divide dp {}", at, s.cp, s.dp));
  if (s.cp % s.UlyssesDegree() != 0)
    return BadInput(fmt::format("layer plan: layers[{}]: ulysses: {} does not divide cp {}", i, s.ulysses, s.cp));
  if (s.Ulysses()) {  // all-to-alls of the hidden states, any attention whose sequence cp divides
    const cost::LayerProfile& layer = model.layers[i];
    if (layer.tp_comm_bytes_per_sample <= 0)
      return BadInput(fmt::format("{}: {} with ulysses, but layer {} has no hidden states to exchange", at, s.cp, layer.name));
    if (layer.attention_sequence > 0 && layer.attention_sequence % s.cp != 0)
      return BadInput(fmt::format("{}: {} ranks cannot split the sequence of {} tokens", at, s.cp, layer.attention_sequence));
    if (s.ep > 1) return BadInput(fmt::format("{}: context parallelism beside expert parallelism is not modelled", at));
    if (s.RingDegree() == 1) return Status::Ok();  // no ring (else USP: a ring after the all-to-alls)
  }
  const int64_t sequence = model.ContextParallelSequence();
  if (sequence == 0)
    return BadInput(fmt::format("{}: {}, but the attention of model {} cannot be split by ring attention (a score "
                                "bias, unequal query and key lengths, or no attention)", at, s.cp, model.name));
  if (sequence % (2 * s.cp) != 0)
    return BadInput(fmt::format("{}: {} ranks cannot split the sequence of {} tokens into 2 x {} equal chunks", at,
                                s.cp, sequence, s.cp));
  if (s.ep > 1) return BadInput(fmt::format("{}: context parallelism beside expert parallelism is not modelled", at));
  return Status::Ok();
}

// Offloading needs the device's way to its host (cost::DeviceSpec::host_*) and an optimizer step to move there.
Status CheckOffload(const cost::LayerModel& model, const LayerStrategy& s, const cost::Cluster& cluster, size_t i) {
  if (!s.offload) return Status::Ok();
  const std::string at = fmt::format("layer plan: layers[{}]: offload", i);
  if (!cluster.device.HasHost())
    return BadInput(fmt::format("{}: cluster {} gives its device no host link or host memory bandwidth "
                                "(device host_link_bandwidth_gbps, host_memory_bandwidth_gbps)", at, cluster.name));
  if (model.optimizer.empty())
    return BadInput(fmt::format("{}: model {} has no optimizer step to offload", at, model.name));
  return Status::Ok();
}

// A recompute set names ops of its layer's menu (cost/recompute_set.h) that can be recomputed.
Status CheckRecomputeSet(const cost::LayerProfile& layer, const LayerStrategy& s, size_t i) {
  if (s.recompute.empty()) return Status::Ok();
  const std::string at = fmt::format("layer plan: layers[{}]: recompute", i);
  if (s.selective_recompute)
    return BadInput(fmt::format("{}: a recompute set beside selective_recompute: give one of them", at));
  if (!layer.recompute_menu.menu)
    return BadInput(fmt::format("{}: layer {} has no operator graph to recompute ops of (a model read from "
                                "profiles)", at, layer.name));
  Result<cost::RecomputeCost> priced = cost::PriceRecomputeSet(*layer.recompute_menu.menu, s.recompute);
  if (!priced) return BadInput(fmt::format("{}: layer {}: {}", at, layer.name, priced.error().message));
  return Status::Ok();
}

Status CheckDegrees(const cost::LayerModel& model, const LayerPlan& plan, const cost::Cluster& cluster) {
  if (model.layers.empty()) return BadInput(fmt::format("layer model {}: has no layers", model.name));
  if (plan.layers.size() != model.layers.size())
    return BadInput(fmt::format("layer plan: layers: has {} strategies, the model {} has {} layers", plan.layers.size(),
                                model.name, model.layers.size()));
  if (plan.pp_degree < 1 || cluster.NumDevices() % plan.pp_degree != 0)
    return BadInput(fmt::format("layer plan: pp_degree: {} does not divide the {} devices of cluster {}",
                                plan.pp_degree, cluster.NumDevices(), cluster.name));
  const int devices = cluster.NumDevices() / plan.pp_degree;
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerStrategy& s = plan.layers[i];
    if (s.tp < 1 || s.dp < 1 || s.tp * s.dp != devices)
      return BadInput(fmt::format("layer plan: layers[{}]: tp {} x dp {} must equal the {} devices of a stage", i,
                                  s.tp, s.dp, devices));
    KIWI_RETURN_IF_ERROR(CheckExpertParallelism(model.layers[i], s, i));
    KIWI_RETURN_IF_ERROR(CheckContextParallelism(model, s, i));
    KIWI_RETURN_IF_ERROR(CheckOffload(model, s, cluster, i));
    KIWI_RETURN_IF_ERROR(CheckRecomputeSet(model.layers[i], s, i));
  }
  return Status::Ok();
}

// The stages' layers, or with interleaved 1F1B the chunks' (pp_degree x virtual_stages, in model order).
Result<std::vector<StageSpan>> CheckPartition(const LayerPlan& plan) {
  const int num_layers = static_cast<int>(plan.layers.size());
  KIWI_RETURN_IF_ERROR(CheckInterleaving(plan));
  if (plan.pp_partition.empty()) {
    if (plan.pp_degree != 1)
      return BadInput(fmt::format("layer plan: pp_partition: empty, but pp_degree is {}", plan.pp_degree));
    return std::vector<StageSpan>{{0, num_layers}};
  }
  if (static_cast<int64_t>(plan.pp_partition.size()) != plan.NumChunks())
    return BadInput("layer plan: pp_partition: " + plan::PartitionLengthError(plan));
  std::vector<StageSpan> stages;
  int first = 0;
  for (size_t s = 0; s < plan.pp_partition.size(); ++s) {
    const int count = plan.pp_partition[s];
    if (count < 1) return BadInput(fmt::format("layer plan: pp_partition[{}]: must be positive, got {}", s, count));
    stages.push_back({first, count});
    first += count;
  }
  if (first != num_layers)
    return BadInput(fmt::format("layer plan: pp_partition: covers {} layers, the plan has {}", first, num_layers));
  return stages;
}

Status CheckBatch(const LayerPlan& plan) {
  if (plan.global_batch < 1 || plan.micro_batches < 1 || plan.global_batch % plan.micro_batches != 0)
    return BadInput(fmt::format("layer plan: global_batch: {} is not divisible into {} micro-batches",
                                plan.global_batch, plan.micro_batches));
  const int64_t microbatch = plan.global_batch / plan.micro_batches;
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerStrategy& s = plan.layers[i];
    if (microbatch % s.Replicas() == 0) continue;
    if (s.cp > 1)
      return BadInput(fmt::format("layer plan: layers[{}]: micro-batch of {} samples is not divisible by the dp {} / "
                                  "cp {} replicas", i, microbatch, s.dp, s.cp));
    return BadInput(fmt::format("layer plan: layers[{}]: micro-batch of {} samples is not divisible by dp {}", i,
                                microbatch, s.dp));
  }
  return Status::Ok();
}

// The embeddings run with the first layer's tp/dp/sdp on the first stage, the head + loss with the
// last layer's on the last stage (Megatron's vocabulary-parallel embedding and cross-entropy on that
// layer's TP group); never checkpointed. Empty parts are left out.
bool IsEmpty(const cost::LayerProfile& p) { return cost::SameButName(p, cost::LayerProfile{}); }

cost::PlacedLayer PlaceOther(const cost::LayerProfile& profile, const cost::PlacedLayer& beside) {
  cost::PlacedLayer other = beside;
  other.profile = profile;
  other.tied_copy_bytes = 0;
  other.strategy.checkpoint = false;
  return other;
}

// The embeddings beside the first layer and the head beside the last, as a pipeline of `pp` stages
// holds them: the head with a tied embedding's copy, both ends summing its gradient (cost::PipelinedHead).
cost::PlacedLayer PlaceEmbedding(const cost::LayerModel& model, int pp, const cost::PlacedLayer& first) {
  cost::PlacedLayer e = PlaceOther(model.embedding, first);
  e.tied_copy_bytes = cost::TiedCopyBytes(model, pp);
  return e;
}
cost::PlacedLayer PlaceHead(const cost::LayerModel& model, int pp, const cost::PlacedLayer& last) {
  cost::PlacedLayer h = PlaceOther(cost::PipelinedHead(model, pp), last);
  h.tied_copy_bytes = cost::TiedCopyBytes(model, pp);
  return h;
}

Result<std::vector<cost::PlacedLayer>> PlaceLayers(const cost::LayerModel& model, const LayerPlan& plan,
                                             const cost::Cluster& cluster) {
  const int64_t microbatch = plan.global_batch / plan.micro_batches;
  std::vector<cost::PlacedLayer> placed;
  placed.reserve(model.layers.size());
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const LayerStrategy& s = plan.layers[i];
    Result<cost::StageMesh> mesh = cost::MakeLayerMesh(cluster, plan.pp_degree, s);
    if (!mesh) return mesh.error();
    placed.push_back({model.layers[i], s, std::move(*mesh), microbatch / s.Replicas(), 0, plan.micro_batches});
  }
  return placed;
}

// A plan checked against the model and cluster: its stages' (or chunks') layers and every layer on its
// stage mesh.
struct CheckedPlan {
  std::vector<StageSpan> stages;
  std::vector<cost::PlacedLayer> placed;
};

Result<CheckedPlan> CheckAndPlace(const cost::LayerModel& model, const LayerPlan& plan, const cost::Cluster& cluster) {
  KIWI_RETURN_IF_ERROR(CheckDegrees(model, plan, cluster));
  Result<std::vector<StageSpan>> stages = CheckPartition(plan);
  if (!stages) return stages.error();
  KIWI_RETURN_IF_ERROR(CheckBatch(plan));
  Result<std::vector<cost::PlacedLayer>> placed = PlaceLayers(model, plan, cluster);
  if (!placed) return placed.error();
  return CheckedPlan{*std::move(stages), *std::move(placed)};
}

// Per-micro-batch costs and peak memory of stage s, over its chunks (`chunks`: every stage's or chunk's
// span in model order). The embeddings ride with the first chunk, the head with the last.
struct PricedStage {
  cost::StageCost cost;
  StageMemorySplit memory;
  std::vector<double> chunk_forward, chunk_backward;
};

Result<PricedStage> CostStage(const cost::LayerModel& model, const LayerPlan& plan, const cost::Cluster& cluster,
                              const cost::CostModel& cost_model, const std::vector<cost::PlacedLayer>& placed,
                              const std::vector<StageSpan>& chunks, int s) {
  const int last_chunk = static_cast<int>(chunks.size()) - 1;
  cost::StageCost c;
  std::vector<cost::StageMemory> chunk_memory;
  int64_t headroom = 0;  // interleaved: the most one layer's backward holds beyond the activations
  cost::ModelStateSplit states;
  std::vector<double> chunk_forward, chunk_backward;
  cost::PlacedLayer embedding, head;
  for (int k = s; k <= last_chunk; k += plan.pp_degree) {
    const StageSpan span = chunks[static_cast<size_t>(k)];
    const cost::StageCost before = c;
    std::vector<const cost::PlacedLayer*> layers;
    if (k == 0 && !IsEmpty(model.embedding)) {
      embedding = PlaceEmbedding(model, plan.pp_degree, placed.front());
      layers.push_back(&embedding);
    }
    for (int i = span.first; i < span.first + span.count; ++i) layers.push_back(&placed[static_cast<size_t>(i)]);
    if (k == last_chunk && !IsEmpty(model.head)) {
      head = PlaceHead(model, plan.pp_degree, placed.back());
      layers.push_back(&head);
    }
    cost::StageMemory memory;
    for (const cost::PlacedLayer* layer : layers) {
      memory += cost::LayerMemory(*layer, model);
      states += cost::ModelStatesOf(*layer, model);
      cost::AddLayerCost(*layer, cost_model, c);
      c.optimizer += cost::OptimizerSeconds(*layer, model, cost_model);
      c.parameter_gather += cost::ParameterGatherSeconds(*layer, cost_model);
    }
    chunk_memory.push_back(memory);
    headroom = std::max(headroom, memory.layer_headroom);
    for (int i = std::max(span.first, 1); i < span.first + span.count; ++i) {
      Result<double> reshard = cost::SliceGatherSeconds(placed[static_cast<size_t>(i) - 1], placed[static_cast<size_t>(i)],
                                                        cluster, cost_model);
      if (!reshard) return reshard.error();
      c.resharding += *reshard;
    }
    // Boundary activations: the chunk sends its output forward and its input gradient backward.
    double sends = 0.0;
    if (k < last_chunk) sends += cost::PointToPointSeconds(placed[static_cast<size_t>(span.first + span.count) - 1], cost_model);
    if (k > 0) sends += cost::PointToPointSeconds(placed[static_cast<size_t>(span.first) - 1], cost_model);
    c.communication += sends;
    c.communication_kinds.pipeline += sends;
    chunk_forward.push_back(c.forward - before.forward);
    chunk_backward.push_back(c.MicrobatchSeconds() - before.MicrobatchSeconds() - chunk_forward.back());
  }
  if (plan.virtual_stages > 1) {
    c.peak_memory_bytes = cost::InterleavedStagePeakBytes(chunk_memory, plan.pp_degree, plan.micro_batches, s);
  } else {
    const int in_flight = cost::MicrobatchesInFlight(plan.pipeline, plan.pp_degree, plan.micro_batches, s);
    c.peak_memory_bytes = chunk_memory.front().PeakBytes(in_flight);
  }
  c.peak_memory_bytes += cost::ReservedBytes(cluster.device);
  StageMemorySplit split{.parameters = states.parameters,
                         .gradients = states.gradients,
                         .optimizer_states = states.optimizer_states,
                         .buffers = plan.virtual_stages > 1 ? headroom : chunk_memory.front().Headroom(),
                         .reserved = cost::ReservedBytes(cluster.device)};
  split.activations = c.peak_memory_bytes - split.Total();  // the micro-batches in flight (Eq. 1's rest)
  return PricedStage{c, split, std::move(chunk_forward), std::move(chunk_backward)};
}

// Galvatron-BMW Eq. 8 with the optimizer step (cost::InterleavedIterationSeconds, v = 1 without
// interleaving), applied to each time bucket: the slowest stage's micro-batch (without its gradient
// sync) m - 1/v more times, every stage's micro-batch 1/v times and unhidden sync once, the slowest
// optimizer step once. Linear in its terms, so the buckets add up to the iteration time.
void FillPipelineTime(const LayerPlan& plan, const std::vector<cost::StageCost>& costs, LayerSimResult& result) {
  size_t slowest = 0;
  for (size_t s = 1; s < costs.size(); ++s)
    if (costs[s].MicrobatchSeconds() > costs[slowest].MicrobatchSeconds()) slowest = s;
  cost::StageCost sum;
  double syncs = 0.0;
  size_t last_to_step = 0;  // the stage whose optimizer step and ZeRO-1/2 parameter gather end last
  for (size_t s = 0; s < costs.size(); ++s) {
    const cost::StageCost& c = costs[s];
    sum.compute += c.compute;
    sum.recompute += c.recompute;
    sum.communication += c.communication;
    sum.communication_kinds += c.communication_kinds;
    syncs += c.gradient_sync;
    sum.gradient_sync_kinds += c.gradient_sync_kinds;
    sum.resharding += c.resharding;
    const cost::StageCost& l = costs[last_to_step];
    if (c.optimizer + c.parameter_gather > l.optimizer + l.parameter_gather) last_to_step = s;
  }
  const int m = plan.micro_batches, v = plan.virtual_stages;
  const cost::StageCost& top = costs[slowest];
  const cost::StageCost& step = costs[last_to_step];
  TimeBreakdown& t = result.summary.time;
  t.compute = cost::InterleavedIterationSeconds(m, v, top.compute, sum.compute, 0.0, step.optimizer);
  t.recompute = cost::InterleavedIterationSeconds(m, v, top.recompute, sum.recompute, 0.0, 0.0);
  t.communication =
      cost::InterleavedIterationSeconds(m, v, top.communication, sum.communication, syncs, step.parameter_gather);
  t.resharding = cost::InterleavedIterationSeconds(m, v, top.resharding, sum.resharding, 0.0, 0.0);
  // The communication bucket by kind: the same Eq. 8 terms per kind, the parameter gather data parallel.
  const auto kind = [&](double cost::CommunicationByKind::*k, double step_gather) {
    return cost::InterleavedIterationSeconds(m, v, top.communication_kinds.*k, sum.communication_kinds.*k,
                                             sum.gradient_sync_kinds.*k, step_gather);
  };
  result.communication = {.tensor_parallel = kind(&cost::CommunicationByKind::tensor_parallel, 0.0),
                          .data_parallel = kind(&cost::CommunicationByKind::data_parallel, step.parameter_gather),
                          .expert_parallel = kind(&cost::CommunicationByKind::expert_parallel, 0.0),
                          .context_parallel = kind(&cost::CommunicationByKind::context_parallel, 0.0),
                          .pipeline = kind(&cost::CommunicationByKind::pipeline, 0.0)};
  result.summary.iteration_seconds = t.total();
  result.pipeline_bubble_seconds = cost::PipelineBubbleSeconds(v, top.MicrobatchSeconds(), sum.MicrobatchSeconds());
  result.throughput_samples_per_second = static_cast<double>(plan.global_batch) / result.summary.iteration_seconds;
}

void FillMemory(const cost::Cluster& cluster, const std::vector<cost::StageCost>& costs, LayerSimResult& result) {
  const size_t per_stage = static_cast<size_t>(cluster.NumDevices()) / costs.size();
  result.summary.peak_memory_per_device.assign(static_cast<size_t>(cluster.NumDevices()), 0);
  for (size_t d = 0; d < result.summary.peak_memory_per_device.size(); ++d)
    result.summary.peak_memory_per_device[d] = costs[d / per_stage].peak_memory_bytes;
  for (const cost::StageCost& c : costs)
    result.summary.peak_memory_bytes = std::max(result.summary.peak_memory_bytes, c.peak_memory_bytes);
}

}  // namespace

Result<LayerSimResult> SimulateLayerPlan(const cost::LayerModel& model, const LayerPlan& plan, const cost::Cluster& cluster,
                                         const cost::CostModel& cost_model) {
  Result<CheckedPlan> checked = CheckAndPlace(model, plan, cluster);
  if (!checked) return checked.error();
  const std::vector<StageSpan>& stages = checked->stages;
  const std::vector<cost::PlacedLayer>& placed = checked->placed;

  LayerSimResult result;
  std::vector<cost::StageCost> costs;
  for (int s = 0; s < plan.pp_degree; ++s) {
    Result<PricedStage> priced = CostStage(model, plan, cluster, cost_model, placed, stages, s);
    if (!priced) return priced.error();
    const cost::StageCost* cost = &costs.emplace_back(priced->cost);
    StageResult stage;
    stage.memory = priced->memory;
    for (const StageSpan& span : ChunksOf(plan, stages, s))
      for (int i = span.first; i < span.first + span.count; ++i) stage.layers.push_back(i);
    stage.peak_memory_bytes = cost->peak_memory_bytes;
    stage.microbatch_seconds = cost->MicrobatchSeconds();
    stage.gradient_sync_seconds = cost->gradient_sync;
    stage.optimizer_seconds = cost->optimizer + cost->parameter_gather;
    stage.chunk_forward_seconds = std::move(priced->chunk_forward);
    stage.chunk_backward_seconds = std::move(priced->chunk_backward);
    result.stages.push_back(std::move(stage));
  }
  FillPipelineTime(plan, costs, result);
  FillMemory(cluster, costs, result);
  // A checkpointed layer's forward runs again in every micro-batch's backward pass.
  for (const LayerStrategy& s : plan.layers)
    if (s.checkpoint) result.summary.recomputations += plan.micro_batches;
  return result;
}

namespace {

LayerTraffic TrafficOf(const cost::PlacedLayer& layer, int micro_batches) {
  const cost::LayerCommunication c = cost::LayerCommunicationOf(layer);
  LayerTraffic t;
  t.tp_all_reduces = c.TpAllReduces() * micro_batches;
  t.tp_all_reduce_bytes = c.TpAllReduceBytes() * micro_batches;
  t.sp_collectives = c.SequenceCollectives() * micro_batches;
  t.sp_all_gather_bytes = c.SequenceAllGatherBytes() * micro_batches;
  t.sp_reduce_scatter_bytes = c.SequenceReduceScatterBytes() * micro_batches;
  t.sp_gradient_all_reduce_bytes = c.sp_gradient_all_reduce_bytes * (c.sp_gradient_every_microbatch ? micro_batches : 1);
  t.sdp_all_gathers = c.sdp_all_gathers * micro_batches;
  t.sdp_all_gather_bytes = c.sdp_all_gather_bytes * t.sdp_all_gathers;
  t.step_all_gather_bytes = c.step_all_gather_bytes;
  const int syncs = c.gradient_sync_every_microbatch ? micro_batches : 1;
  const bool scatters = c.gradient_sync == cost::Collective::kReduceScatter;
  (scatters ? t.sdp_reduce_scatter_bytes : t.dp_all_reduce_bytes) = c.gradient_sync_bytes * syncs;
  (scatters ? t.expert_reduce_scatter_bytes : t.expert_dp_all_reduce_bytes) = c.expert_gradient_sync_bytes * syncs;
  t.expert_step_all_gather_bytes = c.expert_step_all_gather_bytes;
  t.all_to_alls = (c.all_to_alls + c.all_to_alls_recomputed) * micro_batches;
  t.all_to_all_bytes = c.all_to_all_bytes * t.all_to_alls;
  t.ring_sends = (c.ring_sends + c.ring_sends_recomputed) * micro_batches;
  t.ring_bytes = c.ring_bytes * t.ring_sends;
  t.tied_all_reduce_bytes = c.tied_all_reduce_bytes;
  if (c.ulysses_out_bytes > 0) {  // a pair each pass (the forward's again when recomputed)
    const int pairs = (2 + (c.ulysses_recomputed ? 1 : 0)) * micro_batches;
    t.ulysses_all_to_alls = 2 * pairs;
    t.ulysses_bytes = (c.ulysses_qkv_bytes + c.ulysses_out_bytes) * pairs;
  }
  return t;
}

}  // namespace

Result<PlanTraffic> LayerPlanTraffic(const cost::LayerModel& model, const LayerPlan& plan, const cost::Cluster& cluster) {
  Result<CheckedPlan> checked = CheckAndPlace(model, plan, cluster);
  if (!checked) return checked.error();
  const std::vector<StageSpan>& stages = checked->stages;
  const std::vector<cost::PlacedLayer>& placed = checked->placed;
  const int m = plan.micro_batches;
  PlanTraffic traffic;
  for (size_t i = 0; i < placed.size(); ++i) {
    traffic.layers.push_back(TrafficOf(placed[i], m));
    if (i == 0) continue;
    traffic.layers.back().slice_gather_bytes = m * cost::SliceGatherBytes(placed[i - 1], placed[i]);
    traffic.layers.back().slice_gather_backward_bytes = m * cost::SliceGatherBackwardBytes(placed[i - 1], placed[i]);
    traffic.layers.back().sequence_gather_bytes = m * cost::SequenceGatherBytes(placed[i - 1], placed[i]);
    traffic.layers.back().sequence_gather_backward_bytes = m * cost::SequenceGatherBackwardBytes(placed[i - 1], placed[i]);
    traffic.layers.back().context_reshard_bytes = 2 * m * cost::ContextReshardBytes(placed[i - 1], placed[i]);
  }
  // as CostStage places them: the first layer's strategy, the last layer's; never checkpointed
  if (!IsEmpty(model.embedding)) traffic.embedding = TrafficOf(PlaceEmbedding(model, plan.pp_degree, placed.front()), m);
  if (!IsEmpty(model.head)) traffic.head = TrafficOf(PlaceHead(model, plan.pp_degree, placed.back()), m);
  for (int s = 0; s < plan.pp_degree; ++s) {
    int64_t forward = 0, backward = 0;
    for (const StageSpan& span : ChunksOf(plan, stages, s)) {
      const bool last = span.first + span.count == static_cast<int>(placed.size());
      if (!last) forward += m * cost::PointToPointBytes(placed[static_cast<size_t>(span.first + span.count - 1)]);
      if (span.first > 0) backward += m * cost::PointToPointBytes(placed[static_cast<size_t>(span.first - 1)]);
    }
    traffic.send_forward_bytes.push_back(forward);
    traffic.send_backward_bytes.push_back(backward);
  }
  return traffic;
}

}  // namespace kiwi::sim
