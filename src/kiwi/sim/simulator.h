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
Result<SimResult> SimulateOperatorPlan(const ir::Graph& graph, const plan::OperatorPlan& plan,
                                       const cost::CostModel& cost_model, const ir::DeviceMesh& mesh);

}  // namespace kiwi::sim
