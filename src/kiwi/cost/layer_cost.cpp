#include "kiwi/cost/layer_cost.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiwi/cost/activation_memory.h"

namespace kiwi::cost {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Megatron TP all-reduces the layer's activations twice in the forward pass (the g operators after
// attention and MLP) and twice in the backward pass (the f operators); recomputation repeats the
// forward ones (Galvatron-BMW §III-A.3: "CKPT requires extra all-reduce operations").
constexpr int kTpAllReducesForward = 2;
constexpr int kTpAllReducesBackward = 2;
// ZeRO-3 gathers a layer's parameters before its forward and again before its backward (§III-A.2);
// the backward gather also serves the recomputation of a checkpointed layer.
constexpr int kSdpAllGathers = 2;
// Expert parallelism's all-to-alls per micro-batch (Lepikhin et al. 2021 §2.2; Megatron-LM's
// MoEAlltoAllTokenDispatcher): dispatch and combine forward, and their gradients backward.
constexpr int kAllToAllsForward = 2;
constexpr int kAllToAllsBackward = 2;
// Ring attention's sends per pass and CP rank (Liu et al. 2023 §3; PyTorch's context_parallel): the
// keys and values pass cp - 1 hops forward; backward they pass again with their gradients.
constexpr int kRingSendsForward = 1;
constexpr int kRingSendsBackward = 2;

// A collective over the axes `mask` of `mesh`; nothing when no axis or no bytes.
double CollectiveSeconds(const CostModel& cost_model, Collective c, int64_t bytes, const ir::DeviceMesh& mesh,
                         ir::AxisMask mask) {
  if (mask == 0 || bytes <= 0) return 0.0;
  return cost_model.CollectiveTime(c, bytes, mesh, mask);
}

double CollectiveSeconds(const CostModel& cost_model, Collective c, int64_t bytes, const StageMesh& mesh,
                         int axis) {
  return CollectiveSeconds(cost_model, c, bytes, mesh.mesh, mesh.masks[static_cast<size_t>(axis)]);
}

// The layer's parameters within one TP (and EP) shard (what DP replicates and ZeRO shards further).
int64_t TpShardParameterBytes(const PlacedLayer& l) { return TpShardParameterBytes(l.profile, l.strategy.tp, l.strategy.ep); }

// Under EP (ep > 1) the two parts of a shard that sync over different groups: the experts' weights
// (over the dp / ep ranks holding the same experts) and the rest (over all dp).
bool ExpertParallel(const PlacedLayer& l) { return l.strategy.ep > 1 && l.mesh.experts.group != 0; }
int64_t ExpertShardBytes(const PlacedLayer& l) {
  return CeilDiv(l.profile.expert_parameter_bytes, int64_t{l.strategy.tp} * l.strategy.ep);
}
int64_t DenseShardBytes(const PlacedLayer& l) { return TpShardParameterBytes(l) - ExpertShardBytes(l); }

// One ring attention send of a context-parallel layer per device: its tokens' keys and values, the
// heads split over TP (0 without a ring or attention). Under USP a device holds u times its own tokens
// for 1 / u of the heads after the all-to-alls: as many bytes as its own tokens' keys and values.
int64_t RingBytes(const PlacedLayer& l) {
  if (l.strategy.RingDegree() <= 1 || l.mesh.ring == 0) return 0;
  return CeilDiv(l.PerDevice(l.profile.attention_kv_bytes_per_sample), l.strategy.tp);
}

// The TP shard's parameters but the experts' as tp times a TP shard (the replicated part counted tp
// times), so that dividing by tp (and by dp where ZeRO shards) gives one device's share; the experts'
// as tp x ep times one device's TP x EP shard (divided by dp / ep where ZeRO shards).
double TpWholeDenseBytes(const PlacedLayer& l) {
  const LayerProfile& p = l.profile;
  return static_cast<double>(p.parameter_bytes - p.replicated_parameter_bytes - p.expert_parameter_bytes) +
         static_cast<double>(p.replicated_parameter_bytes) * l.strategy.tp;
}
double ExpertBytes(const PlacedLayer& l) { return static_cast<double>(l.profile.expert_parameter_bytes); }

// Bytes of model states per parameter byte of one DP replica, by kind, `dp` ranks sharding what the
// ZeRO stage shards; offloaded optimizer states are in host memory.
struct StateRatios {
  double parameters = 0.0, gradients = 0.0, optimizer_states = 0.0;
  double Total() const { return parameters + gradients + optimizer_states; }
};
// FSDP2 wraps a layer of more than one DP rank (kiwi.torch.parallelize): it all-gathers a whole copy of
// its parameters, kept beside their shard unless ZeRO-3 reshards after the forward pass.
bool Fsdp2GathersCopy(const LayerModel& model, int dp) { return model.zero_runtime == ZeroRuntime::kFsdp2 && dp > 1; }

// PyTorch makes each parameter's gradient in the backward pass, as the layer's activations go: in a step of
// one micro-batch under kiwi.torch.parallelize (runtime fsdp2) none exists at the start of the backward
// pass, where such a step peaks, so a layer holds the larger of its activations and its gradient, not both
// (LayerMemory): a ZeRO-3 layer's gradient shard, a layer FSDP2 does not wrap (no DP) its whole gradient.
// A DP, ZeRO-1 or ZeRO-2 layer's reduced gradient takes the place of the copy FSDP2 frees (StateRatiosOf).
// More micro-batches find the gradients of the first there. (GPipe's stages, whose first backward also
// follows every forward, are not priced so: tried, GPT-2's PP4 stages came within 5% of the measured peak
// but Llama's and Mistral's went 6-27% below it; docs/distributed.md.) A layer without DP keeps its whole
// gradient counted under fp32 master weights: their optimizer step holds every gradient, 16-bit and fp32,
// and a bf16 Llama step measured 2.8% above the count that left them out (python/tests/test_master_weights.py).
bool GradientsComeAsActivationsGo(const LayerModel& model, int micro_batches) {
  return model.zero_runtime == ZeroRuntime::kFsdp2 && micro_batches == 1;
}
bool WholeGradientComesAsActivationsGo(const LayerModel& model, int micro_batches) {
  return GradientsComeAsActivationsGo(model, micro_batches) && !model.master_weights;
}

StateRatios StateRatiosOf(const plan::LayerStrategy& s, int dp, const LayerModel& model, int micro_batches) {
  const double n = static_cast<double>(dp);
  const double gradients = model.GradientBytesPerParameterByte();
  const double states = s.offload ? 0.0 : model.OptimizerStateBytesPerParameterByte();
  const double sharded_states = s.Shards(plan::Zero::kOptimizerStates) ? states / n : states;
  const bool made_in_backward = GradientsComeAsActivationsGo(model, micro_batches);
  if (s.Shards(plan::Zero::kParameters)) return {1.0 / n, made_in_backward ? 0.0 : gradients / n, sharded_states};
  if (Fsdp2GathersCopy(model, dp)) {
    // FSDP2 (DP as shards of one rank) keeps each parameter's shard (its nn.Parameter, 1 / s of it) beside
    // the whole copy it all-gathers at the first forward pass; in the last backward pass each layer's
    // copy is freed as its reduced gradient shard comes, so one micro-batch holds the larger of the two.
    // With more, DP and ZeRO-1 accumulate whole gradients until the last, ZeRO-2 gradient shards.
    // Measured op by op (torch.profiler's memory timeline, 4 gloo ranks): docs/distributed.md.
    const double shard = s.Shards(plan::Zero::kOptimizerStates) ? n : 1.0;
    const double reduced = gradients / (s.Shards(plan::Zero::kGradients) ? n : shard);
    if (micro_batches == 1) return {1.0 + 1.0 / shard, std::max(reduced - 1.0, 0.0), sharded_states};
    return {1.0 + 1.0 / shard, s.Shards(plan::Zero::kGradients) ? reduced : gradients, sharded_states};
  }
  if (WholeGradientComesAsActivationsGo(model, micro_batches)) return {1.0, 0.0, sharded_states};
  return {1.0, s.Shards(plan::Zero::kGradients) ? gradients / n : gradients, sharded_states};
}

// One device's bytes at `per_byte(dp)` bytes per parameter byte, dp the ranks its DP shards are over:
// split by TP (but the replicated part); the experts' also by EP, their DP shards over dp / ep.
template <typename PerByte>
double DeviceBytes(const PlacedLayer& l, PerByte per_byte) {
  const plan::LayerStrategy& s = l.strategy;
  return (TpWholeDenseBytes(l) * per_byte(s.dp) + ExpertBytes(l) / s.ep * per_byte(s.ExpertDataParallel())) / s.tp;
}

// One device's bytes of a kind of model state, `of` picking the kind's ratio, by DP what the layer's
// ZeRO stage shards (ZeRO §5.1-5.3: P_os, P_os+g, P_os+g+p).
template <typename Of>
double StateBytes(const PlacedLayer& l, const LayerModel& model, Of of) {
  return DeviceBytes(l, [&](int dp) { return of(StateRatiosOf(l.strategy, dp, model, l.micro_batches)); });
}

// One device's gradient bytes of a layer StateRatiosOf counts none of in a one-micro-batch step (its
// backward pass makes them as its activations go): a ZeRO-3 layer's reduced shard, a layer FSDP2 does not
// wrap its whole gradient; 0 for those whose reduced gradient takes the place of FSDP2's copy.
int64_t MadeGradientBytes(const PlacedLayer& l, const LayerModel& model) {
  const plan::LayerStrategy& s = l.strategy;
  if (!s.Shards(plan::Zero::kParameters) && (Fsdp2GathersCopy(model, s.dp) || model.master_weights)) return 0;
  const double g = model.GradientBytesPerParameterByte();
  const bool sharded = s.Shards(plan::Zero::kGradients);
  return static_cast<int64_t>(std::ceil(DeviceBytes(l, [&](int dp) { return sharded ? g / dp : g; })));
}

// Parameters + gradients + optimizer states per device.
int64_t ModelStateBytes(const PlacedLayer& l, const LayerModel& model) {
  return static_cast<int64_t>(std::ceil(StateBytes(l, model, [](const StateRatios& r) { return r.Total(); })));
}

// The parameters whose optimizer step one device runs: all of its TP shard, or the DP shard of it
// under any ZeRO stage (each rank steps the parameters whose optimizer states it holds; the experts'
// over dp / ep).
double SteppedParameterBytes(const PlacedLayer& l) {
  const plan::LayerStrategy& s = l.strategy;
  const bool sharded = s.Shards(plan::Zero::kOptimizerStates);
  const double dense = TpWholeDenseBytes(l) / (sharded ? s.dp : 1);
  const double experts = ExpertBytes(l) / s.ep / (sharded ? s.ExpertDataParallel() : 1);
  return (dense + experts) / s.tp;
}

// The model states that step passes over: the parameters with their gradients and optimizer states.
int64_t SteppedStateBytes(const PlacedLayer& l, const LayerModel& model) {
  return static_cast<int64_t>(std::ceil(SteppedParameterBytes(l) * (1.0 + model.state_bytes_per_parameter_byte)));
}

}  // namespace

double OptimizerSeconds(const PlacedLayer& layer, const LayerModel& model, const CostModel& cost_model) {
  if (layer.strategy.offload) {  // ZeRO-Offload: gradients down, the CPU's step, parameters back up
    const double parameters = SteppedParameterBytes(layer);
    return cost_model.HostTransferTime(parameters * model.GradientBytesPerParameterByte()) +
           cost_model.HostOptimizerStepTime(model.optimizer, static_cast<double>(SteppedStateBytes(layer, model))) +
           cost_model.HostTransferTime(parameters);
  }
  const bool flat_shard = layer.strategy.Shards(plan::Zero::kOptimizerStates);  // DeepSpeed: one flat shard
  const double tensors = model.optimizer_tensors_per_parameter * (flat_shard ? 1.0 : layer.profile.parameter_tensors);
  return cost_model.OptimizerStepTime(model.optimizer, static_cast<double>(SteppedStateBytes(layer, model)), tensors);
}

double ParameterGatherSeconds(const PlacedLayer& layer, const CostModel& cost_model) {
  const LayerCommunication comm = LayerCommunicationOf(layer);
  return CollectiveSeconds(cost_model, Collective::kAllGather, comm.step_all_gather_bytes, layer.mesh, kDpAxis) +
         CollectiveSeconds(cost_model, Collective::kAllGather, comm.expert_step_all_gather_bytes,
                           layer.mesh.experts.mesh, layer.mesh.experts.across);
}

namespace {

// Megatron's conjugate operators on `bytes` of activation: g (after a row-parallel linear, or the
// vocabulary-parallel embedding) all-reduces forward, f (before a column-parallel linear or the head)
// backward; with sequence parallelism that pass reduce-scatters and the other all-gathers. f's linear
// keeps only its input's sequence block and all-gathers it again backward for its weight gradient
// (Korthikanti et al. 2023 §4.2.2; Megatron overlaps it with the input-gradient GEMM, kiwi does not).
enum class TpOperator : uint8_t { kF, kG };
void AddTpOperator(TpOperator op, int64_t bytes, bool sequence_parallel, LayerCommunication& c) {
  TpCollectives& reducing = op == TpOperator::kG ? c.tp_forward : c.tp_backward;
  TpCollectives& gathering = op == TpOperator::kG ? c.tp_backward : c.tp_forward;
  if (!sequence_parallel) {
    reducing.all_reduces.push_back(bytes);
    return;
  }
  reducing.reduce_scatters.push_back(bytes);
  gathering.all_gathers.push_back(bytes);
  if (op == TpOperator::kF) c.tp_backward.all_gathers.push_back(bytes);
}

// The layer's TP collectives of one micro-batch (none when TP is 1).
void FillTpCollectives(const PlacedLayer& l, LayerCommunication& c) {
  if (l.mesh.masks[kTpAxis] == 0) return;
  const LayerProfile& p = l.profile;
  const bool sp = l.strategy.SequenceParallel();
  c.tp_recomputed = l.strategy.checkpoint;
  const auto& forward = p.tp_forward_all_reduce_bytes_per_sample;
  const auto& backward = p.tp_backward_all_reduce_bytes_per_sample;
  if (forward.empty() && backward.empty()) {  // a transformer layer: f, g before and after attention and MLP
    if (p.experts > 0 && sp) {  // Megatron's expert TP (LayerProfile::gathered_activation_bytes_per_sample)
      const int64_t dense = l.PerDevice(p.boundary_bytes_per_sample), routed = l.PerDevice(p.routed_bytes_per_sample);
      for (int i = 0; i < p.row_parallel_linears; ++i) {
        AddTpOperator(TpOperator::kG, dense, sp, c);
        AddTpOperator(TpOperator::kF, dense, sp, c);
      }
      // The dispatcher's all-gather of the routed rows and reduce-scatter of the experts' outputs, forward
      // and (as each other's gradients) backward; the gathered rows are kept, not gathered again.
      c.tp_forward.all_gathers.push_back(routed);
      c.tp_forward.reduce_scatters.push_back(routed);
      c.tp_backward.reduce_scatters.push_back(routed);
      c.tp_backward.all_gathers.push_back(routed);
      return;
    }
    const int64_t bytes = l.PerDevice(p.tp_comm_bytes_per_sample / 2);
    if (bytes <= 0) return;
    for (int i = 0; i < kTpAllReducesForward; ++i) AddTpOperator(TpOperator::kG, bytes, sp, c);
    for (int i = 0; i < kTpAllReducesBackward; ++i) AddTpOperator(TpOperator::kF, bytes, sp, c);
    return;
  }
  for (size_t i = 0; i < forward.size(); ++i) {
    if (static_cast<int>(i) < p.tp_forward_g_operators) AddTpOperator(TpOperator::kG, l.PerDevice(forward[i]), sp, c);
    else c.tp_forward.all_reduces.push_back(l.PerDevice(forward[i]));
  }
  for (size_t i = 0; i < backward.size(); ++i) {
    if (static_cast<int>(i) < p.tp_backward_f_operators) AddTpOperator(TpOperator::kF, l.PerDevice(backward[i]), sp, c);
    else c.tp_backward.all_reduces.push_back(l.PerDevice(backward[i]));
  }
}

// Seconds of one collective per entry; runs of one size are priced once and multiplied.
double RunSeconds(const CostModel& cost_model, Collective kind, const std::vector<int64_t>& bytes, const StageMesh& mesh) {
  double seconds = 0.0;
  for (size_t i = 0; i < bytes.size();) {
    size_t j = i;
    while (j < bytes.size() && bytes[j] == bytes[i]) ++j;
    seconds += static_cast<double>(j - i) * CollectiveSeconds(cost_model, kind, bytes[i], mesh, kTpAxis);
    i = j;
  }
  return seconds;
}

double TpSeconds(const CostModel& cost_model, const TpCollectives& c, const StageMesh& mesh) {
  return RunSeconds(cost_model, Collective::kAllReduce, c.all_reduces, mesh) +
         RunSeconds(cost_model, Collective::kAllGather, c.all_gathers, mesh) +
         RunSeconds(cost_model, Collective::kReduceScatter, c.reduce_scatters, mesh);
}

// Activations of one micro-batch per device of `bytes_per_sample`, of which `whole_per_sample` Megatron
// TP keeps on every rank without sequence parallelism (TpRankActivationBytes, Korthikanti et al. 2023
// eq. 2 and 4) and `gathered_per_sample` (the experts' rows, LayerProfile::gathered_activation_bytes_per_sample)
// with it too.
int64_t MicrobatchBytes(const PlacedLayer& l, int64_t bytes_per_sample, int64_t whole_per_sample,
                        int64_t gathered_per_sample = 0) {
  const int64_t whole = std::min(whole_per_sample, bytes_per_sample);
  const int64_t split = l.PerDevice(bytes_per_sample - whole);
  if (!l.strategy.SequenceParallel()) return TpRankActivationBytes(split, l.PerDevice(whole), l.strategy.tp);
  const int64_t gathered = std::clamp<int64_t>(gathered_per_sample, 0, whole);
  return TpRankActivationBytes(split, l.PerDevice(whole - gathered), l.strategy.tp, true) + l.PerDevice(gathered);
}

// Of a layer's saved activations, what stays whole on every TP rank even with sequence parallelism: the
// experts' rows, and where the runtime saves them gathered, the column-parallel linears' inputs
// (LayerProfile::column_input_bytes_per_sample).
int64_t GatheredPerSample(const LayerProfile& p) {
  return p.gathered_activation_bytes_per_sample +
         (p.sequence_parallel_saves_gathered_inputs ? p.column_input_bytes_per_sample : 0);
}

}  // namespace

Result<StageMesh> MakeStageMesh(const Cluster& cluster, const std::vector<int>& sizes) {
  StageMesh m;
  m.sizes = sizes;
  std::vector<int> shape;
  for (int size : sizes) {
    // Axes are kept in order, so the mask of an axis is the bit of its position among the kept ones.
    m.masks.push_back(size > 1 ? ir::AxisBit(static_cast<int>(shape.size())) : 0);
    if (size > 1) shape.push_back(size);
  }
  if (shape.empty()) shape.push_back(1);
  Result<ir::DeviceMesh> mesh = cluster.MakeMesh(shape);
  if (!mesh) return mesh.error();
  m.mesh = std::move(*mesh);
  return m;
}

Result<StageMesh> MakeLayerMesh(const Cluster& cluster, int pp, const plan::LayerStrategy& s) {
  Result<StageMesh> m = MakeStageMesh(cluster, {pp, s.dp, s.tp});
  if (!m) return m;
  for (auto [g, groups] : {std::pair{s.ep, &m->experts}, std::pair{s.cp, &m->context}}) {
    if (g <= 1 || s.dp % g != 0) continue;
    Result<StageMesh> split = MakeStageMesh(cluster, {pp, s.dp / g, g, s.tp});
    if (!split) return split.error();
    *groups = {std::move(split->mesh), split->masks[2], split->masks[1]};
  }
  const int u = s.UlyssesDegree(), ring = s.RingDegree();
  if (u > 1 && ring > 1 && s.dp % s.cp == 0) {  // USP: the ring's ranks u apart, the all-to-alls' consecutive
    Result<StageMesh> split = MakeStageMesh(cluster, {pp, s.dp / s.cp, ring, u, s.tp});
    if (!split) return split.error();
    m->context = {std::move(split->mesh), split->masks[2] | split->masks[3], split->masks[1]};
    m->ring = split->masks[2];
    m->ulysses = split->masks[3];
  } else {
    (u > 1 ? m->ulysses : m->ring) = m->context.group;
  }
  return m;
}

// What the layer's recompute set costs (none without one). A plan's set is checked against the layer's
// menu where the plan is placed (sim/layer_simulator.cpp) and the search offers only the sets of its
// layers' menus, so a name the menu lacks does not reach here.
namespace {
RecomputeCost SetCostOf(const PlacedLayer& l) {
  if (!l.strategy.RecomputesSet() || !l.profile.recompute_menu.menu) return {};
  Result<RecomputeCost> c = PriceRecomputeSet(*l.profile.recompute_menu.menu, l.strategy.recompute);
  return c ? *c : RecomputeCost{};
}
}  // namespace

// A checkpointed layer's kept input (its boundary: Megatron keeps it whole on every TP rank without
// sequence parallelism, split over the sequence with it) stays; the rest of its activations come back
// for its backward pass. Selective recomputation brings back the attention core's (split over TP), a
// recompute set its ops' outputs.
int64_t RecomputedBytes(const PlacedLayer& l) {
  const LayerProfile& p = l.profile;
  if (l.strategy.SelectiveRecompute()) return MicrobatchBytes(l, p.attention_core_bytes_per_sample, 0);
  if (l.strategy.RecomputesSet()) {
    const RecomputeCost set = SetCostOf(l);
    return MicrobatchBytes(l, set.recomputed_bytes_per_sample, set.recomputed_replicated_bytes_per_sample,
                           set.recomputed_gathered_bytes_per_sample);
  }
  if (!l.strategy.checkpoint) return 0;
  const int64_t intermediate = std::max<int64_t>(p.activation_bytes_per_sample - p.boundary_bytes_per_sample, 0);
  const int64_t whole = std::max<int64_t>(p.replicated_activation_bytes_per_sample - p.boundary_bytes_per_sample, 0);
  return MicrobatchBytes(l, intermediate, whole, GatheredPerSample(p));
}

// The gradients in flight are split over TP like the tensors they belong to (the head's: over the
// vocabulary-parallel logits), so the whole transient is divided by t. Under CP the ring's backward
// also holds another rank's keys and values and their gradients.
int64_t TransientBytes(const PlacedLayer& l) {
  return RecomputedBytes(l) + MicrobatchBytes(l, l.profile.backward_transient_bytes_per_sample, 0) +
         kRingSendsBackward * RingBytes(l);
}

// A layer's memory terms (StageMemory, Galvatron-BMW Eq. 1's): its model states, the forward activations of
// one micro-batch (boundary only when checkpointed, c(f) = c(bnd)), the transient of its backward pass
// (the intermediates a checkpointed layer recomputes, c(b) = c(int), with its gradients in flight:
// LayerProfile::backward_transient_bytes_per_sample), and the whole (TP-shard) parameters or gradient
// a ZeRO-3 or ZeRO-2 layer holds at once. Selective recomputation keeps all but the attention core's
// activations (Korthikanti et al. 2023 eq. 6: 34sbh/t of a GPT layer's 34sbh/t + 5as^2b/t under SP),
// and brings those back as its transient.
StageMemory LayerMemory(const PlacedLayer& l, const LayerModel& model) {
  const LayerProfile& p = l.profile;
  StageMemory m;
  m.model_states = ModelStateBytes(l, model);
  const RecomputeCost set = SetCostOf(l);  // a recompute set's dropped bytes (some of them whole under TP)
  const int64_t dropped =
      (l.strategy.SelectiveRecompute() ? p.attention_core_bytes_per_sample : 0) + set.dropped_bytes_per_sample;
  m.activations = l.strategy.checkpoint
                      ? MicrobatchBytes(l, p.boundary_bytes_per_sample, p.boundary_bytes_per_sample)
                      : MicrobatchBytes(l, std::max<int64_t>(p.activation_bytes_per_sample - dropped, 0),
                                        std::max<int64_t>(p.replicated_activation_bytes_per_sample -
                                                              set.dropped_replicated_bytes_per_sample, 0),
                                        std::max<int64_t>(GatheredPerSample(p) -
                                                              set.dropped_gathered_bytes_per_sample, 0));
  m.transient = TransientBytes(l);
  // ZeRO-3 holds a layer's whole parameters while it runs, then its whole gradient until the
  // reduce-scatter (the gathered copy freed first); ZeRO-2 that gradient only. FSDP2 also holds the
  // next layer's prefetched parameters and the previous layer's reduce-scatter input (ZeroRuntime).
  const int64_t whole_gradient = static_cast<int64_t>(
      std::ceil(static_cast<double>(TpShardParameterBytes(l)) * model.GradientBytesPerParameterByte()));
  if (l.strategy.Shards(plan::Zero::kParameters) && Fsdp2GathersCopy(model, l.strategy.dp)) {
    // FSDP2's ZeRO-3, measured op by op (docs/distributed.md): the running layer's copy and the next
    // one's prefetched, and the running layer's whole gradient. The previous layer's reduce-scatter input
    // (its whole gradient, held until this layer's is made) takes the place of that layer's activations,
    // gone by then: not counted (short by the difference where a layer's activations of one micro-batch
    // are less than its gradient).
    m.gathered = 2 * TpShardParameterBytes(l) + whole_gradient;
  } else if (l.strategy.Shards(plan::Zero::kParameters))
    m.gathered = std::max(TpShardParameterBytes(l), whole_gradient);
  else if (l.strategy.Shards(plan::Zero::kGradients))
    m.gathered = whole_gradient;
  else if (Fsdp2GathersCopy(model, l.strategy.dp) && l.micro_batches == 1)
    m.gathered = whole_gradient;  // its whole gradient beside its copy (more micro-batches: among the whole ones)
  if (GradientsComeAsActivationsGo(model, l.micro_batches))
    m.activations = std::max(m.activations, MadeGradientBytes(l, model));
  return LayerTerms(m.model_states, m.activations, m.transient, m.gathered);
}

ModelStateSplit ModelStatesOf(const PlacedLayer& l, const LayerModel& model) {
  ModelStateSplit split;
  split.parameters = static_cast<int64_t>(StateBytes(l, model, [](const StateRatios& r) { return r.parameters; }));
  split.gradients = static_cast<int64_t>(StateBytes(l, model, [](const StateRatios& r) { return r.gradients; }));
  // the rest of ModelStateBytes' rounded total, so that the kinds add up to it exactly
  split.optimizer_states = ModelStateBytes(l, model) - split.parameters - split.gradients;
  return split;
}

int64_t TpShardParameterBytes(const LayerProfile& p, int tp, int ep) {
  if (ep <= 1) return CeilDiv(p.parameter_bytes - p.replicated_parameter_bytes, tp) + p.replicated_parameter_bytes;
  return CeilDiv(p.parameter_bytes - p.replicated_parameter_bytes - p.expert_parameter_bytes, tp) +
         p.replicated_parameter_bytes + CeilDiv(p.expert_parameter_bytes, int64_t{tp} * ep);
}

namespace {

// A total over one micro-batch's TP collectives, `of` one pass: the forward's counted again when the
// layer is recomputed.
template <typename Of>
auto WithRecomputation(const LayerCommunication& c, Of of) {
  return of(c.tp_forward) * (c.tp_recomputed ? 2 : 1) + of(c.tp_backward);
}

int64_t Sum(const std::vector<int64_t>& bytes) { return std::accumulate(bytes.begin(), bytes.end(), int64_t{0}); }

}  // namespace

int LayerCommunication::TpAllReduces() const {
  return WithRecomputation(*this, [](const TpCollectives& t) { return static_cast<int>(t.all_reduces.size()); });
}

int64_t LayerCommunication::TpAllReduceBytes() const {
  return WithRecomputation(*this, [](const TpCollectives& t) { return Sum(t.all_reduces); });
}

int LayerCommunication::SequenceCollectives() const {
  return WithRecomputation(*this, [](const TpCollectives& t) { return t.Count() - static_cast<int>(t.all_reduces.size()); });
}

int64_t LayerCommunication::SequenceAllGatherBytes() const {
  return WithRecomputation(*this, [](const TpCollectives& t) { return Sum(t.all_gathers); });
}

int64_t LayerCommunication::SequenceReduceScatterBytes() const {
  return WithRecomputation(*this, [](const TpCollectives& t) { return Sum(t.reduce_scatters); });
}

LayerCommunication LayerCommunicationOf(const PlacedLayer& l) {
  LayerCommunication c;
  FillTpCollectives(l, c);
  if (l.strategy.SequenceParallel() && l.mesh.masks[kTpAxis] != 0) {
    c.sp_gradient_all_reduce_bytes = l.profile.replicated_parameter_bytes;
    c.sp_gradient_every_microbatch = l.strategy.Shards(plan::Zero::kGradients);
  }
  if (l.tied_copy_bytes > 0 && l.mesh.masks[kPpAxis] != 0) {  // FSDP2 shards the copy under every ZeRO stage
    const int64_t shard = CeilDiv(l.tied_copy_bytes, int64_t{l.strategy.tp});
    c.tied_all_reduce_bytes = l.strategy.ZeroStage() == plan::Zero::kNone ? shard : CeilDiv(shard, int64_t{l.strategy.dp});
  }
  if (l.mesh.masks[kDpAxis] == 0) return c;
  const RecomputeCost set = SetCostOf(l);
  const bool experts = ExpertParallel(l);
  if (experts) {
    // Under SP each TP rank sends the routed rows of its own 1/tp of the tokens (LayerProfile::gathered_activation_bytes_per_sample).
    c.all_to_all_bytes = CeilDiv(l.PerDevice(l.profile.routed_bytes_per_sample),
                                 l.strategy.SequenceParallel() ? l.strategy.tp : 1);
    c.all_to_alls = kAllToAllsForward + kAllToAllsBackward;
    // Recomputing the layer runs its forward all-to-alls again; a recompute set, those of its routed gathers.
    c.all_to_alls_recomputed = l.strategy.checkpoint ? kAllToAllsForward : set.routed_gathers;
  }
  if (l.strategy.Ulysses() && l.mesh.ulysses != 0) {
    // The hidden states [s, h] per sample (tp_comm_bytes_per_sample: Megatron's 2 forward all-reduces of
    // them); keys and values as the attention reads them (grouped-query: fewer), else as large as them.
    const int64_t hidden = l.profile.tp_comm_bytes_per_sample / 2;
    const int64_t kv = l.profile.attention_kv_bytes_per_sample > 0 ? l.profile.attention_kv_bytes_per_sample : 2 * hidden;
    c.ulysses_qkv_bytes = l.PerDevice(hidden + kv);
    c.ulysses_out_bytes = l.PerDevice(hidden);
    // Recomputing the layer, or its attention core, runs the forward pair again (as the ring's sends).
    c.ulysses_recomputed = l.strategy.checkpoint || l.strategy.SelectiveRecompute() || set.attention;
  }
  if (RingBytes(l) > 0) {  // the ring alone, or after Ulysses' all-to-alls (USP)
    const int hops = l.strategy.RingDegree() - 1;
    c.ring_bytes = RingBytes(l);
    c.ring_sends = (kRingSendsForward + kRingSendsBackward) * hops;
    // Recomputing the layer, or its attention core (selective), runs the forward ring again.
    const bool again = l.strategy.checkpoint || l.strategy.SelectiveRecompute() || set.attention;
    c.ring_sends_recomputed = again ? kRingSendsForward * hops : 0;
  }
  const int64_t shard = experts ? DenseShardBytes(l) : TpShardParameterBytes(l);
  const int64_t expert_shard = experts && l.mesh.experts.across != 0 ? ExpertShardBytes(l) : 0;
  const plan::Zero zero = l.strategy.ZeroStage();
  if (zero == plan::Zero::kParameters) {
    c.sdp_all_gather_bytes = shard;
    c.sdp_all_gathers = kSdpAllGathers;
  }
  // ZeRO-1/2: each rank steps its shard and all-gathers the updated parameters (ZeRO §7.2.1: a
  // reduce-scatter and an all-gather, DP's all-reduce volume).
  if (zero == plan::Zero::kOptimizerStates || zero == plan::Zero::kGradients) {
    c.step_all_gather_bytes = shard;
    c.expert_step_all_gather_bytes = expert_shard;
  }
  c.gradient_sync_bytes = shard;
  c.expert_gradient_sync_bytes = expert_shard;
  c.gradient_sync = zero == plan::Zero::kNone ? Collective::kAllReduce : Collective::kReduceScatter;
  c.gradient_sync_every_microbatch = l.strategy.Shards(plan::Zero::kGradients);
  return c;
}

namespace {

// The tied embedding's all-reduce between the first and the last stage: two ranks over the pipeline's
// link (the stage axis at size 2).
double TiedAllReduceSeconds(const PlacedLayer& l, const LayerCommunication& comm, const CostModel& cost_model) {
  if (comm.tied_all_reduce_bytes == 0) return 0.0;
  ir::DeviceMesh pair = l.mesh.mesh;
  const ir::AxisMask pp = l.mesh.masks[kPpAxis];
  for (int a = 0; a < pair.Rank(); ++a)
    if (pp & ir::AxisBit(a)) pair.axes[static_cast<size_t>(a)].size = 2;
  return CollectiveSeconds(cost_model, Collective::kAllReduce, comm.tied_all_reduce_bytes, pair, pp);
}

// What ring attention adds to each pass of a context-parallel layer: each of its ring - 1 hops
// (plan::LayerStrategy::RingDegree: cp, or cp / u after Ulysses' all-to-alls) sends the next keys and
// values (backward with their gradients) while the attention block of the ones already there runs (1 /
// ring of the pass's attention, Liu et al. 2023 §3), so a hop costs what its sends take beyond that
// block; Ulysses' all-to-alls add their pair each pass, hidden by nothing.
struct RingSeconds {
  double forward = 0.0;
  double backward = 0.0;
};
RingSeconds RingSecondsOf(const PlacedLayer& l, const LayerCommunication& comm, const CostModel& cost_model) {
  RingSeconds out;
  if (comm.ulysses_out_bytes > 0) {  // Ulysses: a pair of all-to-alls each pass, not hidden by the attention
    const auto all_to_all = [&](int64_t bytes) {
      return CollectiveSeconds(cost_model, Collective::kAllToAll, bytes, l.mesh.context.mesh, l.mesh.ulysses);
    };
    const double pair = all_to_all(comm.ulysses_qkv_bytes) + all_to_all(comm.ulysses_out_bytes);
    out = {pair, pair};
  }
  if (comm.ring_sends == 0) return out;
  const int ring = l.strategy.RingDegree();
  const double send =
      CollectiveSeconds(cost_model, Collective::kPointToPoint, comm.ring_bytes, l.mesh.context.mesh, l.mesh.ring);
  // One block: a device's queries and one ring rank's keys, 1 / ring of the device's attention.
  const double share = l.Samples() / l.strategy.tp / ring;
  const double forward_block = l.profile.attention_forward_seconds_per_sample * share;
  const double backward_block = l.profile.attention_backward_seconds_per_sample * share;
  out.forward += (ring - 1) * std::max(kRingSendsForward * send - forward_block, 0.0);
  out.backward += (ring - 1) * std::max(kRingSendsBackward * send - backward_block, 0.0);
  return out;
}

}  // namespace

void AddLayerCost(const PlacedLayer& l, const CostModel& cost_model, StageCost& cost) {
  const LayerProfile& p = l.profile;
  const LayerCommunication comm = LayerCommunicationOf(l);
  // §V: compute time = batch x per-sample time; TP splits the layer's work tp ways, not its per-op
  // overhead (LayerProfile::forward_overhead_seconds: every rank runs every op) nor, without SP, the
  // work it keeps whole (LayerProfile::replicated_forward_seconds_per_sample). Megatron's TP
  // all-reduces run on the compute stream between the layer's kernels. Each TP rank launches all of
  // the layer's kernels and its all-reduces, and a pass takes at least those launches
  // (CostModel::LaunchBoundTime): launch time beyond the device's work counts as compute.
  const double share = l.Samples() / l.strategy.tp;
  // What TP keeps whole without SP runs on all of the micro-batch's samples on each rank.
  const double whole_share = l.strategy.tp > 1 && !l.strategy.SequenceParallel() ? l.Samples() - share : 0.0;
  const double tp_forward = TpSeconds(cost_model, comm.tp_forward, l.mesh);
  const double tp_backward = TpSeconds(cost_model, comm.tp_backward, l.mesh);
  const bool split = l.strategy.tp > 1;  // a head's loss is then Megatron's vocabulary-parallel one
  const double forward_per_sample = p.forward_seconds_per_sample + (split ? p.tp_loss_forward_seconds_per_sample : 0.0);
  const double backward_per_sample = p.backward_seconds_per_sample + (split ? p.tp_loss_backward_seconds_per_sample : 0.0);
  const int64_t forward_kernels = p.forward_kernels + (split ? p.tp_loss_forward_kernels : 0) +
                                  static_cast<int64_t>(comm.tp_forward.Count());
  const int64_t backward_kernels = p.backward_kernels + (split ? p.tp_loss_backward_kernels : 0) +
                                   static_cast<int64_t>(comm.tp_backward.Count());
  const double forward_overhead = p.forward_overhead_seconds + (split ? p.tp_loss_forward_overhead_seconds : 0.0);
  const double backward_overhead = p.backward_overhead_seconds + (split ? p.tp_loss_backward_overhead_seconds : 0.0);
  // Megatron's expert TP under SP sorts the TP group's gathered rows by local expert and back on each
  // rank (when it holds more than one expert): a routed gather's work each, on all the micro-batch's rows.
  const double sort_share = l.strategy.SequenceParallel() && p.experts > l.strategy.ep ? l.Samples() : 0.0;
  // The embeddings' lookups stay whole with SP too (without it they are among the replicated work).
  const double lookup_share = l.strategy.SequenceParallel() ? l.Samples() - share : 0.0;
  const double forward_work = forward_per_sample * share + p.replicated_forward_seconds_per_sample * whole_share +
                              p.routed_gather_forward_seconds_per_sample * sort_share +
                              p.lookup_forward_seconds_per_sample * lookup_share;
  const double backward_work = backward_per_sample * share + p.replicated_backward_seconds_per_sample * whole_share +
                               p.routed_gather_backward_seconds_per_sample * sort_share +
                               p.lookup_backward_seconds_per_sample * lookup_share;
  const double forward =
      cost_model.LaunchBoundTime(forward_work + forward_overhead + tp_forward, forward_kernels) - tp_forward;
  const double backward =
      cost_model.LaunchBoundTime(backward_work + backward_overhead + tp_backward, backward_kernels) - tp_backward;
  cost.compute += forward + backward;
  // Expert parallelism's all-to-alls run between the layer's kernels, as the TP collectives do.
  const double all_to_all = CollectiveSeconds(cost_model, Collective::kAllToAll, comm.all_to_all_bytes,
                                              l.mesh.experts.mesh, l.mesh.experts.group);
  const RingSeconds ring = RingSecondsOf(l, comm, cost_model);
  cost.communication += tp_forward + tp_backward + comm.all_to_alls * all_to_all + ring.forward + ring.backward;
  cost.communication_kinds.tensor_parallel += tp_forward + tp_backward;
  cost.communication_kinds.expert_parallel += comm.all_to_alls * all_to_all;
  cost.communication_kinds.context_parallel += ring.forward + ring.backward;
  double backward_compute = backward;
  if (l.strategy.checkpoint) {  // §V: one extra forward propagation
    cost.recompute += forward + (comm.tp_recomputed ? tp_forward : 0.0) + comm.all_to_alls_recomputed * all_to_all +
                      ring.forward;
    backward_compute += forward;
  } else if (l.strategy.SelectiveRecompute()) {  // the attention core's forward, split over TP by heads (and its ring)
    const double core = cost_model.LaunchBoundTime(
        p.attention_core_seconds_per_sample * share + p.attention_core_overhead_seconds, p.attention_core_kernels);
    cost.recompute += core + ring.forward;
    backward_compute += core;
  } else if (l.strategy.RecomputesSet()) {  // the set's forward ops, split over TP as the pass's (and the ring with its attention)
    const RecomputeCost set = SetCostOf(l);
    const double again = cost_model.LaunchBoundTime(set.seconds_per_sample * share + set.replicated_seconds_per_sample * whole_share +
                                                        set.routed_seconds_per_sample * sort_share + set.overhead_seconds,
                                                    set.kernels);
    // Under SP a recomputed routed gather runs its TP collective of the routed rows again too.
    const double routed_tp = l.strategy.SequenceParallel()
                                 ? CollectiveSeconds(cost_model, Collective::kAllGather,
                                                     l.PerDevice(p.routed_bytes_per_sample), l.mesh, kTpAxis)
                                 : 0.0;
    cost.recompute += again + (set.attention ? ring.forward : 0.0) + comm.all_to_alls_recomputed * all_to_all +
                      set.routed_gathers * routed_tp;
    backward_compute += again;
  }
  // Sequence parallelism's all-reduce of the replicated parameters' gradients: after the flush, beside
  // the DP sync (not overlapped: Megatron's finalize_model_grads); under ZeRO-2/3 in every micro-batch.
  const double sp_gradient =
      CollectiveSeconds(cost_model, Collective::kAllReduce, comm.sp_gradient_all_reduce_bytes, l.mesh, kTpAxis);
  (comm.sp_gradient_every_microbatch ? cost.communication : cost.gradient_sync) += sp_gradient;
  (comm.sp_gradient_every_microbatch ? cost.communication_kinds : cost.gradient_sync_kinds).tensor_parallel += sp_gradient;
  const double gather =
      CollectiveSeconds(cost_model, Collective::kAllGather, comm.sdp_all_gather_bytes, l.mesh, kDpAxis);
  cost.communication += comm.sdp_all_gathers * gather;
  cost.communication_kinds.data_parallel += comm.sdp_all_gathers * gather;
  cost.forward += forward + tp_forward + (comm.all_to_alls > 0 ? kAllToAllsForward * all_to_all : 0.0) + ring.forward +
                  (comm.sdp_all_gathers > 0 ? gather : 0.0);
  // Gradient sync overlapped with the layer's backward computation, both slowed down while they
  // overlap (§V); only the excess counts. The DP all-reduce runs in the last micro-batch (once per
  // iteration); ZeRO-3's reduce-scatter after every micro-batch's backward (part of C_s).
  const double tied = TiedAllReduceSeconds(l, comm, cost_model);  // after the last backward pass, not hidden
  cost.gradient_sync += tied;
  cost.gradient_sync_kinds.data_parallel += tied;
  const double sync = CollectiveSeconds(cost_model, comm.gradient_sync, comm.gradient_sync_bytes, l.mesh, kDpAxis) +
                      CollectiveSeconds(cost_model, comm.gradient_sync, comm.expert_gradient_sync_bytes,
                                        l.mesh.experts.mesh, l.mesh.experts.across);
  if (sync <= 0.0) return;
  const double unhidden = std::max(cost_model.OverlappedTime(backward_compute, sync) - backward_compute, 0.0);
  (comm.gradient_sync_every_microbatch ? cost.communication : cost.gradient_sync) += unhidden;
  (comm.gradient_sync_every_microbatch ? cost.communication_kinds : cost.gradient_sync_kinds).data_parallel += unhidden;
}

int64_t SliceGatherBytes(const PlacedLayer& prev, const PlacedLayer& next) {
  if (next.strategy.dp >= prev.strategy.dp) return 0;
  return next.PerDevice(prev.profile.boundary_bytes_per_sample);
}

int64_t SliceGatherBackwardBytes(const PlacedLayer& prev, const PlacedLayer& next) {
  if (next.strategy.dp <= prev.strategy.dp) return 0;
  return prev.PerDevice(prev.profile.boundary_bytes_per_sample);
}

int64_t ContextReshardBytes(const PlacedLayer& prev, const PlacedLayer& next) {
  if (prev.strategy.cp == next.strategy.cp) return 0;
  return prev.PerDevice(prev.profile.boundary_bytes_per_sample);
}

bool SameLayout(const PlacedLayer& prev, const PlacedLayer& next) {
  return prev.strategy.dp == next.strategy.dp && prev.strategy.cp == next.strategy.cp &&
         prev.strategy.SequenceParallel() == next.strategy.SequenceParallel();
}

int64_t SequenceGatherBytes(const PlacedLayer& prev, const PlacedLayer& next) {
  if (!prev.strategy.SequenceParallel() || SameLayout(prev, next)) return 0;
  return prev.PerDevice(prev.profile.boundary_bytes_per_sample);
}

int64_t SequenceGatherBackwardBytes(const PlacedLayer& prev, const PlacedLayer& next) {
  if (!next.strategy.SequenceParallel() || SameLayout(prev, next)) return 0;
  return next.PerDevice(prev.profile.boundary_bytes_per_sample);
}

// Under sequence parallelism each TP rank sends its sequence shard (Megatron sends the [s/t, b, h] tensor).
int64_t PointToPointBytes(const PlacedLayer& sender) {
  if (sender.mesh.masks[kPpAxis] == 0) return 0;
  const int64_t bytes = sender.PerDevice(sender.profile.boundary_bytes_per_sample);
  return sender.strategy.SequenceParallel() ? CeilDiv(bytes, sender.strategy.tp) : bytes;
}

// Under Megatron TP a layer's output is replicated in its TP group and split over DP, so layouts only
// differ in the DP degree. Going to a smaller DP degree, each device all-gathers the dp_prev / dp_next
// shards its new batch slice is made of. Those sit in its new TP group at stride tp_prev: mesh
// {pp, dp_next, dp_prev / dp_next, tp_prev}, gather over axis 2; the backward pass slices the
// (TP-replicated) input gradient: free. Going to a larger DP degree is the transpose: a free slice
// forward, and backward each device all-gathers the gradient of its old batch slice from the
// dp_next / dp_prev devices that computed its pieces (the TP ranks of `prev` all need the whole
// gradient), mesh {pp, dp_prev, dp_next / dp_prev, tp_next}, axis 2 (Megatron's split/gather pair). If
// the degrees do not divide, the gather is charged over the whole TP group of the smaller DP degree.
// A sequence-parallel side first makes the boundary whole over its TP group (prev: its output forward;
// next: its input gradient backward); slicing it back into sequence shards is free.
Result<double> SliceGatherSeconds(const PlacedLayer& prev, const PlacedLayer& next, const Cluster& cluster,
                                  const CostModel& cost_model) {
  // Between CP degrees each sample's tokens move to the other group's ranks: an all-to-all over the
  // larger group, forward and (the gradient) backward.
  const PlacedLayer& wider = prev.strategy.cp >= next.strategy.cp ? prev : next;
  const double sequence =
      CollectiveSeconds(cost_model, Collective::kAllGather, SequenceGatherBytes(prev, next), prev.mesh, kTpAxis) +
      CollectiveSeconds(cost_model, Collective::kAllGather, SequenceGatherBackwardBytes(prev, next), next.mesh, kTpAxis) +
      2 * CollectiveSeconds(cost_model, Collective::kAllToAll, ContextReshardBytes(prev, next), wider.mesh.context.mesh,
                            wider.mesh.context.group);
  const bool shrinks = next.strategy.dp < prev.strategy.dp;
  if (next.strategy.dp == prev.strategy.dp) return sequence;
  const PlacedLayer& small = shrinks ? next : prev;  // the layout of the smaller DP degree (the gather's result)
  const PlacedLayer& large = shrinks ? prev : next;
  const int64_t gathered = shrinks ? SliceGatherBytes(prev, next) : SliceGatherBackwardBytes(prev, next);
  if (large.strategy.dp % small.strategy.dp != 0)
    return sequence + CollectiveSeconds(cost_model, Collective::kAllGather, gathered, small.mesh, kTpAxis);
  const int pp = next.mesh.sizes[kPpAxis];
  Result<StageMesh> mesh =
      MakeStageMesh(cluster, {pp, small.strategy.dp, large.strategy.dp / small.strategy.dp, large.strategy.tp});
  if (!mesh) return mesh.error();
  return sequence + CollectiveSeconds(cost_model, Collective::kAllGather, gathered, *mesh, 2);
}

// Each device sends the boundary activation of its own samples (replicated over its TP group).
double PointToPointSeconds(const PlacedLayer& sender, const CostModel& cost_model) {
  return CollectiveSeconds(cost_model, Collective::kPointToPoint, PointToPointBytes(sender), sender.mesh, kPpAxis);
}

}  // namespace kiwi::cost
