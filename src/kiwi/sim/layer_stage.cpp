#include "kiwi/sim/layer_stage.h"

#include <algorithm>
#include <cmath>

namespace kiwi::sim {
namespace {

using cost::Collective;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Megatron TP all-reduces the layer's activations twice in the forward pass (the g operators after
// attention and MLP) and twice in the backward pass (the f operators); recomputation repeats the
// forward ones (Galvatron-BMW §III-A.3: "CKPT requires extra all-reduce operations").
constexpr int kTpAllReducesForward = 2;
constexpr int kTpAllReducesBackward = 2;
// ZeRO-3 gathers a layer's parameters before its forward and again before its backward (§III-A.2);
// the backward gather also serves the recomputation of a checkpointed layer.
constexpr int kSdpAllGathers = 2;

double CollectiveSeconds(const cost::CostModel& cost_model, Collective c, int64_t bytes, const StageMesh& mesh,
                         int axis) {
  const ir::AxisMask mask = mesh.masks[static_cast<size_t>(axis)];
  if (mask == 0 || bytes <= 0) return 0.0;
  return cost_model.CollectiveTime(c, bytes, mesh.mesh, mask);
}

// The layer's parameters within one TP shard (what DP replicates and SDP shards further).
int64_t TpShardParameterBytes(const PlacedLayer& l) { return CeilDiv(l.profile.parameter_bytes, l.strategy.tp); }

// Parameters + gradients + optimizer states per device: split by TP, and by DP too under SDP (ZeRO-3).
int64_t ModelStateBytes(const PlacedLayer& l, double state_bytes_per_parameter_byte) {
  const double shards = static_cast<double>(l.strategy.tp) * (l.strategy.sdp ? l.strategy.dp : 1);
  return static_cast<int64_t>(
      std::ceil(static_cast<double>(l.profile.parameter_bytes) * (1.0 + state_bytes_per_parameter_byte) / shards));
}

// Activations of one micro-batch per device. Dividing by tp treats every saved tensor as split by
// Megatron TP; the layernorm/dropout/residual tensors Megatron keeps replicated (10 of 34 sbh in
// Korthikanti et al. 2022, eq. 2) are underestimated by this approximation.
int64_t MicrobatchBytes(const PlacedLayer& l, int64_t bytes_per_sample) {
  return CeilDiv(bytes_per_sample * l.microbatch, l.strategy.tp);
}

}  // namespace

Result<StageMesh> MakeStageMesh(const cost::Cluster& cluster, const std::vector<int>& sizes) {
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

// Galvatron-BMW Eq. 1 for one stage: all model states, the forward activations of every micro-batch
// in flight (boundary only for checkpointed layers, c(f) = c(bnd)), plus the largest transient of one
// layer: the intermediates a checkpointed layer recomputes (c(b) = c(int)) and the full parameters
// SDP gathers. Both transients are counted at once, an upper bound when different layers cause them.
int64_t StagePeakMemory(const std::vector<const PlacedLayer*>& layers, int in_flight,
                        double state_bytes_per_parameter_byte) {
  int64_t states = 0, activations = 0, recomputed = 0, gathered = 0;
  for (const PlacedLayer* l : layers) {
    states += ModelStateBytes(*l, state_bytes_per_parameter_byte);
    const LayerProfile& p = l->profile;
    if (l->strategy.checkpoint) {
      activations += MicrobatchBytes(*l, p.boundary_bytes_per_sample);
      const int64_t intermediate = std::max<int64_t>(p.activation_bytes_per_sample - p.boundary_bytes_per_sample, 0);
      recomputed = std::max(recomputed, MicrobatchBytes(*l, intermediate));
    } else {
      activations += MicrobatchBytes(*l, p.activation_bytes_per_sample);
    }
    if (l->strategy.sdp && l->strategy.dp > 1) gathered = std::max(gathered, TpShardParameterBytes(*l));
  }
  return states + static_cast<int64_t>(in_flight) * activations + recomputed + gathered;
}

void AddLayerCost(const PlacedLayer& l, const cost::CostModel& cost_model, StageCost& cost) {
  const LayerProfile& p = l.profile;
  // §V: compute time = batch x per-sample time; TP splits the layer's work tp ways.
  const double share = static_cast<double>(l.microbatch) / l.strategy.tp;
  const double forward = p.forward_seconds_per_sample * share;
  const double backward = p.backward_seconds_per_sample * share;
  const int64_t all_reduce_bytes = p.tp_comm_bytes_per_sample / 2 * l.microbatch;
  const double all_reduce = CollectiveSeconds(cost_model, Collective::kAllReduce, all_reduce_bytes, l.mesh, kTpAxis);
  cost.compute += forward + backward;
  cost.communication += (kTpAllReducesForward + kTpAllReducesBackward) * all_reduce;
  double backward_compute = backward;
  if (l.strategy.checkpoint) {  // §V: one extra forward propagation
    cost.recompute += forward + kTpAllReducesForward * all_reduce;
    backward_compute += forward;
  }
  const int64_t shard = TpShardParameterBytes(l);
  if (l.strategy.sdp)
    cost.communication += kSdpAllGathers * CollectiveSeconds(cost_model, Collective::kAllGather, shard, l.mesh, kDpAxis);
  // Gradient sync (DP all-reduce, SDP reduce-scatter) overlapped with the layer's backward computation
  // in the last micro-batch, both slowed down while they overlap (§V); only the excess counts.
  const Collective sync_kind = l.strategy.sdp ? Collective::kReduceScatter : Collective::kAllReduce;
  const double sync = CollectiveSeconds(cost_model, sync_kind, shard, l.mesh, kDpAxis);
  if (sync > 0.0) cost.gradient_sync += std::max(cost_model.OverlappedTime(backward_compute, sync) - backward_compute, 0.0);
}

// Under Megatron TP a layer's output is replicated in its TP group and split over DP, so layouts only
// differ in the DP degree. Going to a larger DP degree is a free local slice; going to a smaller one,
// each device all-gathers the dp_prev / dp_next shards its new batch slice is made of. Those sit in
// its new TP group at stride tp_prev: mesh {pp, dp_next, dp_prev / dp_next, tp_prev}, gather over
// axis 2. If the degrees do not divide, the gather is charged over the whole new TP group (a bound).
// The backward pass only slices the (TP-replicated) input gradient: free.
Result<double> SliceGatherSeconds(const PlacedLayer& prev, const PlacedLayer& next, const cost::Cluster& cluster,
                                  const cost::CostModel& cost_model) {
  const int dp_prev = prev.strategy.dp, dp_next = next.strategy.dp;
  if (dp_next >= dp_prev) return 0.0;
  const int64_t gathered = prev.profile.boundary_bytes_per_sample * next.microbatch;
  if (dp_prev % dp_next != 0)
    return CollectiveSeconds(cost_model, Collective::kAllGather, gathered, next.mesh, kTpAxis);
  const int pp = next.mesh.sizes[kPpAxis];
  Result<StageMesh> mesh = MakeStageMesh(cluster, {pp, dp_next, dp_prev / dp_next, prev.strategy.tp});
  if (!mesh) return mesh.error();
  return CollectiveSeconds(cost_model, Collective::kAllGather, gathered, *mesh, 2);
}

// Each device sends the boundary activation of its own samples (replicated over its TP group).
double PointToPointSeconds(const PlacedLayer& sender, const cost::CostModel& cost_model) {
  const int64_t bytes = sender.profile.boundary_bytes_per_sample * sender.microbatch;
  return CollectiveSeconds(cost_model, Collective::kPointToPoint, bytes, sender.mesh, kPpAxis);
}

}  // namespace kiwi::sim
