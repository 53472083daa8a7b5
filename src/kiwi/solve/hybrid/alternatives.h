#pragma once
// `kiwi plan`'s search over everything kiwi knows, at the user's global batch: kiwi's per-layer search
// and, on the same cost model and simulator, the best plan of each named alternative a practitioner
// would otherwise pick:
//  - "Megatron-LM": its 3D grid, every layer the same: TP (within a node; with or without sequence
//    parallelism) x PP x DP (plain or the distributed optimizer, ZeRO-1) x micro-batches x interleaving,
//    full / selective / no recomputation, and EP / CP where the model has experts / ring attention,
//    searched exhaustively;
//  - "FSDP (ZeRO-3)" and "FSDP (ZeRO-3) + CKPT": every layer ZeRO-3 over all devices, micro-batches
//    searched;
//  - "Galvatron-BMW" and "DeepSpeed 3D": hybrid::Method::kBmw and k3d (Table II's rows);
//  - "uniform": kiwi's uniform plans (every layer one strategy of kiwi's space).
// Each candidate's plan is verified by the simulator (SimulateLayerPlan): its numbers are the
// simulator's, and the best plan is the fastest that fits.
//
//   Result<PlanAllResult> r = PlanAll(model, cluster, cost_model, {.memory_budget_bytes = b, .global_batch = 8});
//   if (r && r->best >= 0) Use(r->candidates[r->best].plan);
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/plan/plan.h"
#include "kiwi/sim/layer_simulator.h"
#include "kiwi/solve/hybrid/search.h"
#include "kiwi/solve/hybrid/uniform_plans.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::hybrid {

struct PlanCandidate {
  std::string name;   // "kiwi (per-layer)", "Megatron-LM", ...
  std::string space;  // what it searched, one line
  bool found = false;  // a plan fits (plan and simulated are set)
  plan::LayerPlan plan = {};
  sim::LayerSimResult simulated = {};
  bool proven = false;    // optimal in its space (an exhaustive grid that ran to its end, or a proven search)
  bool timed_out = false;
  int64_t plans_evaluated = 0;  // grids: plans simulated; searches: configurations searched
  double seconds = 0.0;
  // When none fits: the smallest per-device peak among its plans (grids) or the smallest budget its
  // search knows to work (0: unknown).
  int64_t smallest_peak_bytes = 0;
};

struct PlanAllOptions {
  int64_t memory_budget_bytes = 0;
  int64_t global_batch = 1;  // kept: a training hyperparameter
  double time_limit_seconds = 60.0;  // for everything; kiwi's search gets what the alternatives leave
  std::function<void(const std::string&)> progress = {};  // one line per finished candidate; may be empty
};

struct PlanAllResult {
  std::vector<PlanCandidate> candidates;  // kiwi's first, then the alternatives in the order above
  int best = -1;                          // the fastest that fits, kiwi's on ties; -1: none fits
};

// kiwi's uniform space for `model` on `cluster` at `batch`: compact plans, TP within a node (as kiwi's
// search), EP where every layer has the same experts, CP where the model's attention has a ring, the
// model's common recompute sets.
UniformPlanOptions UniformSpace(const cost::LayerModel& model, const cost::Cluster& cluster, int64_t batch);

// kBadInput as SearchHybridPlan's, and for a batch no plan divides.
Result<PlanAllResult> PlanAll(const cost::LayerModel& model, const cost::Cluster& cluster,
                              const cost::CostModel& cost_model, const PlanAllOptions& options);

}  // namespace kiwi::solve::hybrid
