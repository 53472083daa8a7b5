#pragma once
// The joint sharding + rematerialization problem (KIWI, Liu et al. 2023, §3): for every operator of a
// training graph on a device mesh, a sharding strategy s_i and, for forward activations, whether the
// output is kept or recomputed in the backward pass, minimizing the simulated iteration time within
// a per-device memory budget.
//
// The schedule family is the paper's reduced one (§3.2), stated in the simulator's semantics:
//  - the graph runs in its order (forward, then backward); step t computes order[t];
//  - a recomputed forward tensor v (r_v = 1) is freed after its last forward use f_v, recomputed in
//    the step of its first backward consumer H_v (before that consumer), and then stays resident until
//    its last use (simplification 2);
//  - the inputs of a recomputed node are never recomputed (simplification 1, eq. 9); a kept tensor
//    stays resident until h_v = max(its last use, H_w of every recomputed consumer w) (eq. 10);
//  - every other tensor is freed right after its last consumer (simplification 3); parameters and
//    optimizer state are never freed; frees happen at the end of a step, after its computes.
// Memory is counted per device, right after every compute (the simulator's peak); within a step it
// only grows until the step's own compute, so the step's peak is read after order[t]:
//   U_t = sum over tensors resident in step t of s_x^T mem_x            (eq. 3-8, see docs/joint.md)
// Time is the simulator's: sum_i (1 + r_i) [s_i^T (c_i + d_i) + sum_j e_ji^T R_ji] (eq. 2), with the
// cost model's costs in whole units of LoweredSharding::seconds_per_unit.
//
//   Result<JointProblem> p = MakeJointProblem(graph, cost_model, mesh, budget, {});
//   JointSolution s = WithoutRecompute(strategies);        // any strategies, no recomputation
//   JointEvaluation e = EvaluateJoint(*p, s);              // the formulation's own time and peak
//   Result<plan::OperatorPlan> plan = JointPlan(*p, s);    // replayed by sim::SimulateOperatorPlan
#include <cstdint>
#include <string>
#include <vector>

#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/graph.h"
#include "kiwi/ir/mesh.h"
#include "kiwi/plan/plan.h"
#include "kiwi/solve/sharding/lowering.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::joint {

struct JointProblemOptions {
  sharding::LoweringOptions lowering = {};
  // Drop strategies another strategy of the same node dominates (no more cost, memory or resharding
  // to or from any neighbour strategy): the optimum is unchanged (joint_problem_test.cpp).
  bool prune_dominated = true;
  bool allow_recompute = true;  // false: no candidates (sharding only)
};

// Where a node's tensor is needed, by position in the order (positions, not ids).
struct NodeTiming {
  int32_t position = 0;
  int32_t last_forward_use = 0;     // f_i: last consumer before the boundary, or position if none
  int32_t first_backward_use = -1;  // H_i: first consumer at or after the boundary, -1 if none
  int32_t last_use = 0;             // live_i: last consumer, or position if none
  bool persistent = false;          // parameters and optimizer state: resident from their compute on
  bool candidate = false;           // may be recomputed: a forward activation read by the backward pass
};

struct JointProblem {
  const ir::Graph* graph = nullptr;
  const cost::CostModel* cost_model = nullptr;
  ir::DeviceMesh mesh;
  sharding::LoweredSharding lowered;          // strategies, costs (units) and resharding edges
  std::vector<std::vector<int32_t>> allowed;  // per node: strategy indices kept after pruning, ascending
  std::vector<std::vector<int32_t>> in_edges; // per node: indices of lowered.problem.edges into it
  std::vector<ir::NodeId> order;
  std::vector<int32_t> position;              // by node id
  int32_t boundary = 0;                       // position of the first backward node (size() if none)
  std::vector<NodeTiming> timing;             // by node id
  std::vector<std::vector<ir::NodeId>> consumers;
  int64_t budget = 0;                         // bytes per device

  int32_t size() const { return static_cast<int32_t>(order.size()); }
  int64_t Memory(ir::NodeId v, int32_t strategy) const {
    return lowered.problem.nodes[static_cast<size_t>(v)].usage[static_cast<size_t>(strategy)];
  }
  double Seconds(int64_t units) const { return lowered.Seconds(units); }
};

// Errors: those of sharding::LowerToShardingProblem (bad graph, mesh or options) and a negative budget.
Result<JointProblem> MakeJointProblem(const ir::Graph& graph, const cost::CostModel& cost_model,
                                      const ir::DeviceMesh& mesh, int64_t budget, const JointProblemOptions& options);

// One decision per node: its strategy (an index into lowered.strategies[v]) and whether it is
// recomputed (only candidates may be).
struct JointSolution {
  ir::Solution strategy;
  std::vector<uint8_t> recompute;
  bool operator==(const JointSolution&) const = default;
};

// The given strategies with nothing recomputed (Alpa's plans).
JointSolution WithoutRecompute(const ir::Solution& strategy);

// A residency interval [begin, end] of positions (inclusive): resident right after the step at
// `begin` computes, freed at the end of step `end`.
struct Residency {
  int32_t begin = 0;
  int32_t end = 0;
};
// Per node id, its intervals in the reduced schedule of `recompute` (1 or 2).
std::vector<std::vector<Residency>> ResidencyIntervals(const JointProblem& problem,
                                                       const std::vector<uint8_t>& recompute);

struct JointEvaluation {
  bool valid = false;            // strategies in range and allowed, recomputation only of candidates, eq. 9
  bool feasible = false;         // valid and the peak within the budget
  std::string violation;         // why not, for humans
  int64_t cost = 0;              // eq. 2 in units (saturating at ir::kForbiddenCost)
  int64_t peak = 0;              // bytes per device, max over steps
  int32_t peak_position = -1;    // first step reaching it
  std::vector<int64_t> memory;   // per position: bytes right after the step's own compute
  int32_t recomputed = 0;
};

// The formulation's accounting, independent of any solver: equals the simulator on JointPlan().
JointEvaluation EvaluateJoint(const JointProblem& problem, const JointSolution& solution);

// The compute/free sequence of the reduced schedule (see the header comment).
std::vector<plan::Step> JointSchedule(const JointProblem& problem, const std::vector<uint8_t>& recompute);

// Shardings of every node plus JointSchedule(): what the simulator replays.
Result<plan::OperatorPlan> JointPlan(const JointProblem& problem, const JointSolution& solution);

}  // namespace kiwi::solve::joint
