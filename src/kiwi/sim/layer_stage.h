#pragma once
// Internal to the layer simulator (layer_simulator.cpp): per-layer memory and time on a pipeline
// stage, following Galvatron-BMW's cost estimator (§III-A, §V).
#include <cstdint>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/mesh.h"
#include "kiwi/plan/plan.h"
#include "kiwi/sim/layer_model.h"
#include "kiwi/util/result.h"

namespace kiwi::sim {

// A mesh laid over the cluster (Cluster::MakeMesh, innermost axis fastest) with the mask of each
// requested axis; axes of size 1 are left out of the mesh and get mask 0 (no communication).
struct StageMesh {
  std::vector<int> sizes;           // as requested, outermost first
  ir::DeviceMesh mesh;
  std::vector<ir::AxisMask> masks;  // one per requested axis
};

// Layer meshes are {pp, dp, tp}: TP on the innermost (fastest) links, DP outside it, stages outermost.
inline constexpr int kPpAxis = 0;
inline constexpr int kDpAxis = 1;
inline constexpr int kTpAxis = 2;

Result<StageMesh> MakeStageMesh(const cost::Cluster& cluster, const std::vector<int>& sizes);

struct PlacedLayer {
  LayerProfile profile;
  plan::LayerStrategy strategy;
  StageMesh mesh;          // {pp, dp, tp}
  int64_t microbatch = 0;  // samples per device in one micro-batch: global_batch / (m * dp)
};

struct StageCost {
  double compute = 0.0;        // one micro-batch: forward + backward
  double recompute = 0.0;      // one micro-batch: checkpointed forwards and their TP all-reduces
  double communication = 0.0;  // one micro-batch: TP all-reduces, SDP all-gathers, p2p sends
  double resharding = 0.0;     // one micro-batch: Slice-Gather between layers of different layouts
  double gradient_sync = 0.0;  // once per iteration: DP/SDP gradient sync not hidden by the backward
  int64_t peak_memory_bytes = 0;
  double MicrobatchSeconds() const { return compute + recompute + communication + resharding; }
};

// Peak bytes per device of a stage holding `in_flight` micro-batches' activations (Eq. 1).
int64_t StagePeakMemory(const std::vector<const PlacedLayer*>& layers, int in_flight, double state_bytes_per_parameter_byte);

// Adds one layer's per-micro-batch times and its unhidden gradient sync to `cost`.
void AddLayerCost(const PlacedLayer& layer, const cost::CostModel& cost_model, StageCost& cost);

// Slice-Gather (Galvatron-BMW §VI) of `prev`'s output into the layout `next` needs.
Result<double> SliceGatherSeconds(const PlacedLayer& prev, const PlacedLayer& next, const cost::Cluster& cluster,
                                  const cost::CostModel& cost_model);

// Sending `sender`'s boundary activation (or, backwards, its gradient) to the neighbouring stage.
double PointToPointSeconds(const PlacedLayer& sender, const cost::CostModel& cost_model);

}  // namespace kiwi::sim
