#pragma once
// The layer-level planners behind `kiwi plan`, one contract: a request (the layer model, the cluster
// and its cost model, the per-device budget, the global batch, a time limit), an outcome (the best
// plan that fits with the simulator's verdict on it, or none with the smallest budget known to work;
// optimal or not, timed out or not, the work done), and a registry of them by name. Adding a planner
// is its run function in its own file and one line in LayerPlanners() (layer_planners.cpp).
//
//   for (const LayerPlanner& p : LayerPlanners()) {
//     Result<PlanCandidate> c = RunVerified(p, request);   // a claim the simulator denies: kInternal
//   }
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/plan/plan.h"
#include "kiwi/sim/layer_simulator.h"
#include "kiwi/solve/hybrid/uniform_plans.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::hybrid {

struct PlanRequest {
  const cost::LayerModel& model;
  const cost::Cluster& cluster;
  const cost::CostModel& cost_model;
  int64_t memory_budget_bytes = 0;
  int64_t global_batch = 1;
  double time_limit_seconds = 60.0;
  std::function<void(const std::string&)> progress = {};  // the search's own lines; may be empty
  // Samples/s another planner's plan reaches on this request (PlanAll: the best alternative's). A
  // search may look only for faster plans (kiwi's does: it cuts what cannot beat it); grids ignore it.
  double beat_samples_per_second = 0.0;
};

struct PlanCandidate {
  std::string name;   // the planner's: "kiwi (per-layer)", "Megatron-LM", ...
  std::string space;  // what it searched, one line
  bool found = false;  // a plan fits (plan and simulated are set)
  plan::LayerPlan plan = {};
  sim::LayerSimResult simulated = {};
  bool proven = false;    // optimal in its space (an exhaustive grid that ran to its end, or a proven search)
  bool timed_out = false;
  // Not found because nothing in its space is faster than request.beat_samples_per_second (proven
  // unless timed_out), not for want of memory.
  bool none_faster = false;
  int64_t plans_evaluated = 0;  // grids: plans simulated; searches: configurations searched
  double seconds = 0.0;
  // When none fits: the smallest per-device peak among its plans (grids) or the smallest budget its
  // search knows to work (0: unknown).
  int64_t smallest_peak_bytes = 0;
};

struct LayerPlanner {
  const char* name;
  const char* space;
  Result<PlanCandidate> (*run)(const PlanRequest& request);
};

// kiwi's own search first, then the alternatives in the order kiwi plan prints them.
const std::vector<LayerPlanner>& LayerPlanners();

// Runs `planner` and names its candidate (the planner's name and space), unchecked: for a driver that
// judges the plan itself (solve/registry.h's RunSolver).
Result<PlanCandidate> RunNamed(const LayerPlanner& planner, const PlanRequest& request);

// Runs `planner` and checks its plan with the simulator: a plan that does not fit, or whose simulated
// numbers are not the ones the planner reports, is an internal error (kInternal), not an answer.
Result<PlanCandidate> RunVerified(const LayerPlanner& planner, const PlanRequest& request);

// kiwi's uniform space for `model` on `cluster` at `batch`: compact plans, TP within a node (as kiwi's
// search), EP where every layer has the same experts, CP where the model's attention has a ring, the
// model's common recompute sets.
UniformPlanOptions UniformSpace(const cost::LayerModel& model, const cost::Cluster& cluster, int64_t batch);

// The compact uniform `plans` simulated in order until `deadline` (those whose stages would split nodes
// skipped), `visit` called with each and the simulator's result on its expanded plan; false when the
// deadline cut the list short. The loop of the exhaustive planners and of `kiwi plan --uniform`.
Result<bool> SimulateUniformPlans(
    const cost::LayerModel& model, const cost::Cluster& cluster, const cost::CostModel& cost_model,
    const std::vector<NamedLayerPlan>& plans, std::chrono::steady_clock::time_point deadline,
    const std::function<void(const NamedLayerPlan& plan, plan::LayerPlan expanded, sim::LayerSimResult result)>& visit);

// The error for a batch no uniform plan divides over its data-parallel replicas, naming --batch.
Error NoUniformPlanAtBatch(int64_t batch, const cost::Cluster& cluster);

// The planners (each in its own file): search_planners.cpp (kiwi, Galvatron-BMW, DeepSpeed 3D), grid_planners.cpp (Megatron-LM, FSDP, uniform).
Result<PlanCandidate> PlanWithKiwi(const PlanRequest& request);
Result<PlanCandidate> PlanMegatronGrid(const PlanRequest& request);
Result<PlanCandidate> PlanFsdp(const PlanRequest& request);
Result<PlanCandidate> PlanFsdpCheckpointed(const PlanRequest& request);
Result<PlanCandidate> PlanUniform(const PlanRequest& request);
Result<PlanCandidate> PlanGalvatronBmw(const PlanRequest& request);
Result<PlanCandidate> PlanDeepSpeed3d(const PlanRequest& request);

}  // namespace kiwi::solve::hybrid
