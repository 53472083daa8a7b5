#pragma once
// Operator-level refinement inside a layer-level plan (KIWI within Galvatron-BMW's layers): for each
// distinct strategy of a plan, one layer of it, cut out of the model's training graph at the strategy's
// micro-batch (ir/layer_subgraph.h), is planned on the devices of one data-parallel replica (a mesh of
// its tp devices, or cp x tp with context parallelism, where sharding the sequence over the cp axis is
// one of the operator strategies) twice, both replayed by the operator-level simulator:
//  - "as planned": the strategy's own recomputation as an operator schedule (its recompute set's ops,
//    every forward op of a checkpointed layer, Megatron's attention core under selective recomputation,
//    recomputed before the backward pass as Chen et al.'s checkpointing does; nothing otherwise) with the
//    best operator sharding of those devices for that schedule (joint::SolveFixedSchedule, Alpa's
//    sharding MILP): Megatron's column/row split is one of the shardings searched;
//  - KIWI's joint sharding + recomputation (joint/kiwi through the solver registry, warm-started from the
//    plan as planned) within its peak memory: never slower, and what it gains is what deciding sharding
//    and recomputation per operator, together, adds inside the layer strategy.
// The refinement is reported beside the plan, in the operator-level simulator's seconds; the layer
// plan's predicted step time stays the layer model's (the two models price a layer differently).
//
//   Result<std::vector<LayerRefinement>> r = RefineLayerPlan(spec, plan, cluster, cost_model, {});
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/graph.h"
#include "kiwi/models/presets.h"
#include "kiwi/plan/plan.h"
#include "kiwi/solve/joint/joint.h"
#include "kiwi/util/result.h"

namespace kiwi::solve {

struct LayerRefinementOptions {
  double time_limit_seconds = 10.0;  // for all the plan's strategies together
  int threads = 0;                   // 0 = all cores
  std::function<void(const std::string&)> progress = {};
};

struct LayerRefinement {
  int first_layer = 0;             // the layer refined: the first with this strategy
  int layers = 0;                  // how many of the plan's layers have it
  plan::LayerStrategy strategy;
  std::string skipped;             // why it was not refined ("" when refined): outside KIWI's space
  int64_t micro_batch = 0;         // samples per micro-batch per data-parallel replica
  std::vector<int> mesh_shape;     // the devices of one replica: {tp}, or {cp, tp} with context parallelism
  ir::Graph graph;                 // the layer's operator graph (ir::LayerSubgraph) the plans below are for
  joint::JointResult baseline;     // as planned: the strategy's recomputation, the best sharding for it
  joint::JointResult refined;      // KIWI within the baseline's peak

  // baseline / refined seconds (>= 1: KIWI is warm-started from the baseline and never slower).
  double Speedup() const { return refined.seconds() > 0.0 ? baseline.seconds() / refined.seconds() : 1.0; }
};

// One entry per distinct strategy of `plan`, in the order of their first layer. Strategies with expert
// parallelism are listed with `skipped` set (KIWI's operator graphs route no tokens to experts); so is
// every strategy once the time limit is spent, and one whose layer's operator problem is refused as bad
// input (a profile's op time beyond what the MILPs take, which the layer model still prices). Errors: a plan whose layers the model's graph does not have or
// whose batch does not split into its micro-batches and replicas (kBadInput), the solvers' errors.
Result<std::vector<LayerRefinement>> RefineLayerPlan(const models::ModelSpec& spec, const plan::LayerPlan& plan,
                                                     const cost::Cluster& cluster, const cost::CostModel& cost_model,
                                                     const LayerRefinementOptions& options);

}  // namespace kiwi::solve
