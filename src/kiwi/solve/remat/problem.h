#pragma once
// The rematerialization problem (Checkmate): execute a training graph in its order within a memory
// budget, choosing which tensors to keep and which to recompute, at the least total compute cost.
// Costs come from the cost model, sizes from the graph; a schedule is a plan::Step sequence
// (CONTRACT.md `kiwi remat`: a tensor is resident from its compute until its free, the peak is
// counted right after each compute). Every solver's schedule is replayed by the simulator, whose
// cost and peak are the ones reported.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/graph.h"
#include "kiwi/plan/plan.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::remat {

struct RematProblem {
  const ir::Graph* graph = nullptr;
  std::vector<ir::NodeId> order;    // the execution order (graph.order()); stage t computes order[t] first
  std::vector<int32_t> position;    // position[node id] = index in order
  std::vector<double> cost;         // per node id: one execution's cost (cost model)
  std::vector<int64_t> memory;      // per node id: bytes of its output on one device
  std::vector<bool> persistent;     // per node id: parameters/optimizer state: computed once, never freed
  std::vector<std::vector<ir::NodeId>> consumers;  // per node id
  int64_t budget = 0;               // bytes
  double baseline_cost = 0.0;       // every node once: the cost without rematerialization
  int64_t checkpoint_all_peak = 0;  // CONTRACT.md's checkpoint-all peak

  int32_t size() const { return static_cast<int32_t>(order.size()); }
};

// Builds the problem (runs the checkpoint-all schedule through the simulator for its peak).
Result<RematProblem> MakeRematProblem(const ir::Graph& graph, const cost::CostModel& cost_model, int64_t budget);

// Per position t of the order: the bytes resident right after order[t]'s first compute in every
// schedule: its output, its inputs and the persistent tensors computed so far.
std::vector<int64_t> FrontierComputeBytes(const RematProblem& problem);

// The smallest peak any schedule can have is at least this: the largest FrontierComputeBytes.
int64_t MemoryLowerBound(const RematProblem& problem);

struct RematResult {
  std::string solver;
  bool feasible = false;               // a schedule within the budget was found
  std::vector<plan::Step> schedule;    // empty when infeasible
  double cost = 0.0;                   // simulator: total compute cost including recomputation
  int64_t peak_memory = 0;             // simulator: peak of the schedule
  std::optional<double> lower_bound;   // proven lower bound on the optimal cost, if any
  bool optimal = false;                // proven optimal (within the solver's gap)
  double solve_seconds = 0.0;
  std::string note;                    // e.g. "time limit: best of 3 incumbents", for humans
  int64_t smallest_known_budget = 0;   // when infeasible: the smallest peak kiwi has a schedule for (SolveRemat fills it)

  // (cost - lower_bound) / cost, when a lower bound exists.
  std::optional<double> gap() const;
};

// Replays `schedule` with the simulator and fills cost and peak from it; feasible iff it replays
// and peaks within the budget. Fails (kInternal) if the schedule does not replay: a solver bug.
Result<RematResult> FinishResult(const RematProblem& problem, const cost::CostModel& cost_model,
                                 std::vector<plan::Step> schedule, RematResult partial);

}  // namespace kiwi::solve::remat
