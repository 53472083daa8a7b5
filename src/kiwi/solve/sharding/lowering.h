#pragma once
// Lowers a training graph on a device mesh to the sharding problem (ir/sharding_problem.h; KIWI §3.1
// and appendix 7.1.4): one problem node per graph node whose strategies are the node's sharding
// strategies (strategies.h), with cost s_i^T (c_i + d_i) = compute + partial-sum communication and
// usage = bytes of its output shard per device; one edge per (producer, consumer operand) whose
// matrix R_ji holds the resharding time from each producer layout to each layout the consumer
// requires (CostModel::ReshardTime); live intervals and the usage limit from the checkpoint-all
// schedule. The problem agrees with the simulator by construction: for every solution s,
//   ir::Evaluate(problem, s).cost * seconds_per_unit == SimulateOperatorPlan(ToOperatorPlan(s)).iteration_seconds
// up to rounding each cost to whole units, and Evaluate's peak_usage == the simulator's peak memory.
//
//   Result<LoweredSharding> l = LowerToShardingProblem(graph, cost_model, mesh, {});
//   Result<ShardingResult> r = SolveSharding(l->problem, ShardingSolverKind::kAuto, {});  // solver.h
//   Result<plan::OperatorPlan> plan = ToOperatorPlan(*l, r->solution, mesh);
#include <cstdint>
#include <vector>

#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/graph.h"
#include "kiwi/ir/mesh.h"
#include "kiwi/ir/sharding_problem.h"
#include "kiwi/plan/plan.h"
#include "kiwi/solve/sharding/strategies.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::sharding {

struct LoweringOptions {
  StrategyOptions strategies = {};
  // Seconds per integer cost unit: picoseconds by default, fine enough for sub-nanosecond kernels of
  // small models and far from ir::kForbiddenCost (10^18 ps = 10^6 s) for any single op or transfer.
  double seconds_per_unit = 1e-12;
  int64_t memory_limit_bytes = ir::kNoUsageLimit;  // per device: the problem's usage_limit
};

struct LoweredSharding {
  // Node i = graph node i, its strategy k = strategies[i][k]; edges in order of consumer id, then
  // operand: one per input i of node v, from inputs[i] to v (a node reading a tensor twice has two).
  ir::ShardingProblem problem;
  std::vector<std::vector<Strategy>> strategies;  // per graph node; [0] is the replicated strategy
  std::vector<plan::Step> schedule;               // plan::CheckpointAllSchedule(graph): the live intervals
  std::vector<int> mesh_shape;                    // the mesh lowered for
  double seconds_per_unit = 1e-12;

  double Seconds(int64_t cost) const { return static_cast<double>(cost) * seconds_per_unit; }
};

// Errors (kBadInput, one line naming the field): a graph that fails ir::VerifyGraph; a mesh with more
// than 8 axes, an axis of size < 1, or an axis of several devices without a positive finite bandwidth
// or with a negative or non-finite latency; seconds_per_unit not positive and finite; a negative
// memory limit; a strategy or resharding cost that is not finite or reaches ir::kForbiddenCost units.
// Time and memory: O(sum over edges of |distinct producer layouts| x |distinct operand layouts|)
// ReshardTime calls; a 4-layer GPT training graph on a 2x4 mesh lowers in well under a second.
Result<LoweredSharding> LowerToShardingProblem(const ir::Graph& graph, const cost::CostModel& cost_model,
                                               const ir::DeviceMesh& mesh, const LoweringOptions& options);

// The operator plan of a solution: mesh_shape, every node's chosen OpSharding (replicated ones
// included: they require replicated operands) and the checkpoint-all schedule. kBadInput when
// `mesh` is not the mesh lowered for or the solution is not one valid strategy index per node.
Result<plan::OperatorPlan> ToOperatorPlan(const LoweredSharding& lowered, const ir::Solution& solution,
                                          const ir::DeviceMesh& mesh);

}  // namespace kiwi::solve::sharding
