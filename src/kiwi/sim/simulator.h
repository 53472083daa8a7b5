#pragma once
// The judge every solver is tested against: replays a plan on the IR with the cost model, independent
// of how the plan was found, and reports peak memory, the memory timeline and the time breakdown.
//
//   Result<SimResult> r = SimulateOperatorPlan(graph, plan.op.value(), cost_model, mesh);
//   if (r) fmt::print("peak {} time {}\n", r->peak_memory_bytes, r->time.total());
#include <cstdint>
#include <vector>

#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/graph.h"
#include "kiwi/plan/plan.h"
#include "kiwi/util/result.h"

namespace kiwi::sim {

struct TimeBreakdown {
  double compute = 0.0;        // first execution of every op (its share of the work on one device)
  double recompute = 0.0;      // every later execution of an op: its compute, collectives and resharding
  double communication = 0.0;  // collectives inside ops (partial-sum reductions), first executions
  double resharding = 0.0;     // layout conversions of operands, first executions
  double total() const { return compute + recompute + communication + resharding; }
};

struct MemoryEvent {
  int32_t step = 0;            // index into the schedule
  ir::NodeId node = ir::kNoNode;
  plan::StepKind kind = plan::StepKind::kCompute;
  int64_t bytes_after = 0;     // resident bytes per device after the step
};

struct SimResult {
  int64_t peak_memory_bytes = 0;              // max over devices and steps
  std::vector<int64_t> peak_memory_per_device;
  int32_t peak_step = -1;                     // first step (schedule index) reaching the peak
  std::vector<MemoryEvent> timeline;          // one event per step
  TimeBreakdown time;
  double iteration_seconds = 0.0;             // wall time of one training iteration
  int64_t recomputations = 0;                 // computes beyond the first of each node
};

// Replays an operator-level plan. Memory is counted per device (SPMD: every device holds its shard
// of each resident tensor), right after each compute, as in CONTRACT.md. Errors (kBadInput) name the
// step at fault: computing a node whose input is not resident, freeing a tensor that is not resident,
// a node never computed, a sharding whose rank does not match its tensor, a node id out of range.
//
// Semantics, in full:
//  - Mesh: a non-empty plan.mesh_shape must equal mesh.Shape(). An empty mesh_shape is a one-device
//    plan: it runs on the given mesh with every op replicated, and its shardings may use no mesh axis.
//  - Shardings: ops without an entry are replicated (output all R, operands as produced, no partial
//    sums). An entry is checked against its node: output rank = tensor rank (an empty spec means
//    replicated), operands empty or one per input with matching ranks, axes and reduce_axes < the
//    plan's mesh rank, no axis splitting two dims.
//  - Schedule: an empty one is plan::CheckpointAllSchedule(graph). Compute v needs every input of v
//    resident and v itself not resident (recomputing a resident tensor is rejected); it adds
//    BytesPerDevice(v's output, its output spec) and the peak is read right after it. Free v needs v
//    resident. Every node must be computed at least once; tensors may stay resident at the end.
//    Persistent nodes and inputs are scheduled like any node (a compute loads them, at cost 0).
//  - Transient buffers (resharded operand copies, partial sums) are not counted in memory.
//  - One execution of v costs ComputeTime(v, 1 / GroupSize(output axes | reduce_axes)), plus the
//    partial-sum reduction (a reduce-scatter over reduce_axes & output axes on the partial per-device
//    buffer, then an all-reduce over the remaining reduce axes on the final output shard), plus
//    ReshardTime(input type, producer's output spec, operands[i]) for each operand whose required
//    layout differs from how it was produced. The first execution of v goes to compute /
//    communication / resharding, every later one wholly to recompute; iteration_seconds = total().
//  - The graph should be verified; dangling inputs and an order that is not a permutation of the
//    nodes are still reported as kBadInput rather than crashing.
Result<SimResult> SimulateOperatorPlan(const ir::Graph& graph, const plan::OperatorPlan& plan,
                                       const cost::CostModel& cost_model, const ir::DeviceMesh& mesh);

}  // namespace kiwi::sim
