#pragma once
// The sharding strategies of one operator on an N-D device mesh (KIWI §3.1: the choices behind the
// one-hot vector s_i; Alpa's intra-operator space). Every operator is described as a loop nest
// (solve/sharding/op_indexing.h: a matmul is Y[b,m,n] = sum_k A[b,m,k] B[k,n]); a strategy assigns
// each mesh axis to at most one loop index: an index of the output splits the output, an index of an
// operand only (a contraction) leaves partial sums that a reduce-scatter or all-reduce completes
// (plan::OpSharding::reduce_axes). On a 2x4 mesh this yields Alpa's family for a matmul, e.g.
//   "S0S1 = S0R x RS1"                    rows over axis 0, columns over axis 1;
//   "RR = RS0 x S0R (all-reduce@0)"       contraction over axis 0, partial sums all-reduced.
// Costs come from the cost model alone, through the simulator's own formulas (sim/op_execution.h),
// so that a strategy costs here exactly what the simulator charges when it replays it.
//
//   std::vector<Strategy> s = EnumerateStrategies(graph, graph.node(v), cost_model, mesh, {});
//   s[0] is always the replicated strategy (output and operands R, no partial sums).
#include <cstdint>
#include <string>
#include <vector>

#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/graph.h"
#include "kiwi/ir/mesh.h"
#include "kiwi/plan/plan.h"

namespace kiwi::solve::sharding {

struct StrategyOptions {
  // Keep only splits that divide their dimension evenly, as Alpa and XLA do. false also keeps uneven
  // splits (shards round up as ir::ShardShape does); splits of a dim over more devices than it has
  // elements, and reshape splits that would not map to contiguous blocks, are always dropped.
  bool require_divisible = true;
  // Also the variants that reduce-scatter partial sums onto an output dim instead of all-reducing
  // them (a sharded result: ZeRO's gradient reduce-scatter, Megatron's sequence parallelism).
  bool reduce_scatter = true;
};

// One way to run a node, with its cost-model costs (per device; SPMD: all devices alike).
struct Strategy {
  plan::OpSharding sharding;          // output layout, required operand layouts, partial-sum axes, name
  double compute_seconds = 0.0;       // CostModel::ShardedTime(...).compute: its share of the work
  double communication_seconds = 0.0; // CostModel::ShardedTime(...).communication: completing partial sums
  int64_t output_bytes = 0;           // ir::BytesPerDevice(output tensor, output layout)
};

// All strategies of `node` (an operand layout per input is always given, so that resharding is
// explicit): first the replicated one, then every assignment of mesh axes to the indices of its loop
// nest whose splits are allowed, each followed by its reduce-scatter variants (per non-empty subset
// of its reduce axes, those axes also split the first output dim they divide), in a stable order
// without duplicates. Mesh axes of size 1 are never split over. Kinds without a loop-nest
// description (opaque, collective, unknown ops) and nodes whose shapes do not fit their description
// get the replicated strategy only. The optimizer gets the replicated update plus, per non-empty set
// of mesh axes, the update sharded over those axes (each operand split along its first dim the group
// divides, or replicated when none does; its scalar output all-reduced). Limitation: the optimizer
// is one node whose output is a scalar, so writing a sharded update back into replicated parameters
// (an all-gather) is charged neither here nor by the simulator.
// Cost: (1 + indices)^(mesh axes of size > 1) candidate assignments, each O(inputs x rank).
std::vector<Strategy> EnumerateStrategies(const ir::Graph& graph, const ir::Node& node,
                                          const cost::CostModel& cost_model, const ir::DeviceMesh& mesh,
                                          const StrategyOptions& options);

// Alpa-style name of a sharding: "S0R = S0R x RR", "RR = RS0 x S0R (all-reduce@0)",
// "S0R = RR x RR (reduce-scatter@0)"; a node without inputs is named by its output layout alone.
std::string StrategyName(const plan::OpSharding& sharding);

}  // namespace kiwi::solve::sharding
