#pragma once
// The layer simulator's terms (cost/layer_cost.h, Galvatron-BMW §V) tabulated per layer type and
// strategy for one pipeline degree and micro-batch size, so the search prices millions of candidate
// assignments with table look-ups and still agrees with SimulateLayerPlan (the judge). Identical
// layers share one type: a 48-layer BERT has one row per strategy, not 48.
//
//   LayerTypes types = GroupLayerTypes(model);
//   Result<CostTables> t = CostTables::Build({model, types, cluster, cost_model}, /*pp=*/2, /*microbatch=*/8, {});
//   PipelineEstimate e = EstimatePipeline(*t, {2, 16, 2, k1F1B}, {12, 12}, strategy_indices);
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/cost/layer_cost.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/cost/pipeline.h"
#include "kiwi/plan/plan.h"
#include "kiwi/solve/hybrid/stage_terms.h"
#include "kiwi/solve/hybrid/strategy_space.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::hybrid {

// Layers with equal profiles share a type (the paper's "layer types": encoder/decoder, Swin stages).
struct LayerTypes {
  std::vector<int> type_of;                 // per model layer
  std::vector<cost::LayerProfile> profiles;  // per type, first occurrence order
  int num_types() const { return static_cast<int>(profiles.size()); }
};
LayerTypes GroupLayerTypes(const cost::LayerModel& model);

// Interleaved 1F1B over v rounds of R = L / v layers: round layer i stands for model layers i, i + R,
// ..., i + (v - 1) R, and its type for their v types (the tuple; its profile is the first copy's).
LayerTypes RoundTypes(const LayerTypes& model_types, int virtual_stages);

// One layer under one strategy, one micro-batch: the simulator's terms (cost/layer_cost.cpp).
struct StrategyCost {
  cost::StageMemory memory;       // its terms of Eq. 1 per device (cost::LayerMemory)
  double microbatch_seconds = 0;  // compute + recompute + communication of one micro-batch
  double sync_seconds = 0;        // gradient sync left unhidden by the backward pass, once per iteration
  // The optimizer step over the layer's model states on one device, once per iteration. Stages step at
  // once after the flush: the pipeline adds the slowest stage's (EstimatePipeline); the per-stage
  // searches leave it out of their objective (a term no larger than this keeps their bounds valid).
  double optimizer_seconds = 0;
};

// What a cost table is built from; all pointers must outlive the tables.
struct CostInputs {
  const cost::LayerModel* model = nullptr;
  const LayerTypes* types = nullptr;
  const cost::Cluster* cluster = nullptr;
  const cost::CostModel* cost_model = nullptr;
};

// Meshes {pp, dp, tp} reused across tables (building one lays the mesh over the cluster).
class MeshCache {
 public:
  Result<const cost::StageMesh*> Get(const cost::Cluster& cluster, int pp, const plan::LayerStrategy& s);

 private:
  std::map<std::tuple<int, int, int, int>, cost::StageMesh> meshes_;  // by (pp, dp, ep, cp); tp = stage devices / dp
};

class CostTables {
 public:
  // Tables for stages of NumDevices / pp devices running micro-batches of `microbatch` samples.
  // Strategies whose replicas (dp / cp) do not divide the micro-batch are left out (the simulator rejects them).
  // `micro_batches` per step: FSDP2's memory depends on whether there is more than one (cost::PlacedLayer).
  static Result<CostTables> Build(const CostInputs& in, int pp, int64_t microbatch, const StrategySpaceOptions& space,
                                  MeshCache& meshes, int micro_batches = 1);
  // Interleaved 1F1B with v model chunks per stage, each stage's chunks alike: the tables of one round
  // (`round_types`, from RoundTypes), where a round layer stands for its v copies: the sum of their
  // model states, times and sends, the largest of their activations (each in-flight unit is one
  // chunk's micro-batch: the DP's memory is an upper bound on the schedule's, equal only when every
  // chunk keeps the same, MemoryExact()). The embeddings and the head stay once, on the first and last
  // round layer. `base` and `round_types` must outlive the tables.
  static CostTables Interleaved(const CostTables& base, int virtual_stages, const LayerTypes& round_types);

  int pp() const { return pp_; }
  int64_t microbatch() const { return microbatch_; }
  const std::vector<plan::LayerStrategy>& strategies() const { return strategies_; }
  int num_strategies() const { return static_cast<int>(strategies_.size()); }
  // The layouts of a layer's boundary activation: by DP degree (1, 2, 4, ... stage devices) and CP
  // degree (1 unless some strategy has CP), each whole or split over the sequence in its TP group
  // (cost::SameLayout); resharding depends on these only.
  int num_layouts() const { return 2 * num_dp_ * num_cp_; }
  int LayoutIndex(int strategy) const { return layout_index_[static_cast<size_t>(strategy)]; }
  const StrategyCost& Cost(int type, int strategy) const;
  // The embeddings on the first stage, run with the first layer's strategy, and the head + loss on the
  // last stage with the last layer's (never checkpointed; zero when the model has none).
  const StrategyCost& Embedding(int strategy) const { return embedding_[static_cast<size_t>(strategy)]; }
  const StrategyCost& Head(int strategy) const { return head_[static_cast<size_t>(strategy)]; }
  // The costs layer `layer` carries under `strategy`: its own, plus the embeddings' if it is the first
  // layer and the head's if it is the last (what the DP and the partitioners add per layer).
  StrategyCost LayerCost(int layer, int strategy) const;
  // Whether `strategy` can place `layer`: expert parallelism only where the layer has experts it divides
  // (elsewhere an EP strategy prices as its ep 1 twin, which the DP keeps instead).
  bool Places(int layer, int strategy) const;
  // Slice-Gather from a layer of `prev_type` in layout `prev_layout` into a layer in `next_layout`.
  double SliceGather(int prev_type, int prev_layout, int next_layout) const;
  // Sending the boundary activation of a layer of `type` in `layout` to the next stage.
  double PointToPoint(int type, int layout) const;
  const LayerTypes& types() const { return *types_; }
  // The per-model-layer tables an interleaved one was made from (itself otherwise).
  const CostTables& base() const { return base_ ? *base_ : *this; }
  // A layer's `memory` as a stage with `in_flight` micro-batches adds it up. Round tables (Interleaved)
  // price a stage as cost::InterleavedStagePeakBytes does: no activations freed before a backward pass,
  // the largest layer's headroom (StageMemory::layer_headroom).
  StageTerms StageTermsOf(const cost::StageMemory& memory, int in_flight) const;
  // The DP's memory per stage equals the simulator's (false: an upper bound; interleaved stages whose
  // chunks keep different activations: the embeddings', the head's, a last layer with the final norm).
  bool MemoryExact() const { return memory_exact_; }

 private:
  Status Fill(const CostInputs& in, MeshCache& meshes);

  int pp_ = 1;
  int64_t microbatch_ = 1;
  int micro_batches_ = 1;
  const CostTables* base_ = nullptr;
  bool memory_exact_ = true;
  const LayerTypes* types_ = nullptr;
  std::vector<plan::LayerStrategy> strategies_;
  int num_dp_ = 1;  // DP degrees
  int num_cp_ = 1;  // CP degrees
  std::vector<int> layout_index_;
  std::vector<StrategyCost> costs_;        // [type][strategy]
  std::vector<StrategyCost> embedding_;    // [strategy]
  std::vector<StrategyCost> head_;         // [strategy]
  std::vector<double> slice_gather_;       // [prev_type][prev_layout][next_layout]
  std::vector<double> point_to_point_;     // [type][layout]
};

// A pipeline configuration the search tries (Galvatron-BMW Algorithm 1: P, B, m).
struct PipelineConfig {
  int pp = 1;
  int64_t global_batch = 1;
  int micro_batches = 1;
  plan::PipelineSchedule schedule = plan::PipelineSchedule::k1F1B;
  int virtual_stages = 1;  // > 1: interleaved 1F1B over tables of one round (CostTables::Interleaved)
  int64_t Microbatch() const { return global_batch / micro_batches; }
};

// Micro-batches whose activations stage s holds at once (cost::MicrobatchesInFlight).
int InFlight(const PipelineConfig& config, int stage);

// The simulator's answer for an assignment, computed from the tables: per-stage micro-batch time C_s,
// unhidden gradient sync G_s, peak memory (Eq. 1), and Eq. 8's iteration time. Interleaved (the
// tables of one round): C_s also has the sends and resharding where a round wraps from the last stage
// to the first, which the layer DP leaves out (they make its objective a lower bound).
struct PipelineEstimate {
  std::vector<double> stage_seconds;  // C_s
  std::vector<double> sync_seconds;   // G_s
  std::vector<double> optimizer_seconds;  // O_s: the stage's optimizer step, once per iteration
  std::vector<int64_t> stage_memory;
  double iteration_seconds = 0.0;
  int64_t peak_memory_bytes = 0;
  int SlowestStage() const;         // the stage with the largest C_s
  int SlowestOptimizerStage() const;  // the stage with the largest O_s
};
PipelineEstimate EstimatePipeline(const CostTables& tables, const PipelineConfig& config,
                                  const std::vector<int>& partition, const std::vector<int>& strategies);

// The layer plan of an assignment (strategy indices into tables.strategies()); interleaved, the
// round's strategies and partition repeated for each of the v chunks of a stage.
plan::LayerPlan MakeLayerPlan(const CostTables& tables, const PipelineConfig& config, const std::vector<int>& partition,
                              const std::vector<int>& strategies);

}  // namespace kiwi::solve::hybrid
