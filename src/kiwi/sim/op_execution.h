#pragma once
// Internal to the operator-level simulator (sim/simulator.h): the layout every node runs with and
// what one execution of a node costs, both resolved once per node from the plan and the cost model.
//
//   Result<NodeLayouts> layouts = ResolveLayouts(graph, plan, mesh);
//   OpTime t = ExecutionTime(graph, *layouts, graph.node(v), cost_model, mesh);
#include <cstdint>
#include <vector>

#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/graph.h"
#include "kiwi/ir/mesh.h"
#include "kiwi/ir/sharding.h"
#include "kiwi/plan/plan.h"
#include "kiwi/util/result.h"

namespace kiwi::sim {

// Per node: its OpSharding from the plan, or none (replicated output, operands as produced, no
// partial sums).
struct NodeLayouts {
  std::vector<ir::ShardingSpec> output;            // layout of each node's output
  std::vector<const plan::OpSharding*> sharding;   // the plan's entry, nullptr when not listed
  std::vector<int64_t> bytes_per_device;           // each node's output shard, in bytes
};

// Checks the plan's mesh_shape against `mesh` and every OpSharding against its node and the mesh
// (kBadInput naming the node): node id in range, output rank = tensor rank (or empty = replicated),
// operands empty or one per input with each rank = that input's rank, every axis and reduce axis
// < the plan's mesh rank, no axis splitting two dims of one tensor. A plan with an empty mesh_shape
// is a one-device plan: it runs replicated on any mesh and may not use mesh axes.
Result<NodeLayouts> ResolveLayouts(const ir::Graph& graph, const plan::OperatorPlan& plan,
                                   const ir::DeviceMesh& mesh);

// Seconds of one execution of a node, per device (SPMD: every device does the same).
struct OpTime {
  double compute = 0.0;        // its share of the work
  double communication = 0.0;  // partial-sum reduction of the output
  double resharding = 0.0;     // converting operands to the layouts the op requires
  double total() const { return compute + communication + resharding; }
};

OpTime ExecutionTime(const ir::Graph& graph, const NodeLayouts& layouts, const ir::Node& node,
                     const cost::CostModel& cost_model, const ir::DeviceMesh& mesh);

}  // namespace kiwi::sim
