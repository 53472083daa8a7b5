#include "kiwi/sim/simulator.h"

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "kiwi/sim/op_execution.h"

namespace kiwi::sim {
namespace {

std::string Label(const ir::Node& node) { return fmt::format("node {} '{}'", node.id, node.name); }

// The state of one replay: which tensors are resident, how often each node ran, what it cost.
class Replay {
 public:
  Replay(const ir::Graph& graph, const NodeLayouts& layouts, std::vector<OpTime> op_times, int num_devices)
      : graph_(graph),
        layouts_(layouts),
        op_times_(std::move(op_times)),
        resident_(static_cast<size_t>(graph.size()), false),
        computes_(static_cast<size_t>(graph.size()), 0),
        num_devices_(num_devices) {}

  Status Run(const std::vector<plan::Step>& schedule);
  SimResult Finish() &&;

 private:
  Status Compute(int32_t step, const ir::Node& node);
  Status Free(int32_t step, const ir::Node& node);
  void Record(int32_t step, const ir::Node& node, plan::StepKind kind);

  const ir::Graph& graph_;
  const NodeLayouts& layouts_;
  std::vector<OpTime> op_times_;  // one execution of each node
  std::vector<bool> resident_;
  std::vector<int32_t> computes_;
  int num_devices_;
  int64_t live_bytes_ = 0;  // per device
  SimResult result_;
};

Status Replay::Run(const std::vector<plan::Step>& schedule) {
  result_.timeline.reserve(schedule.size());
  for (size_t i = 0; i < schedule.size(); ++i) {
    const auto step = static_cast<int32_t>(i);
    const plan::Step& s = schedule[i];
    if (s.node < 0 || s.node >= graph_.size())
      return BadInput(fmt::format("schedule[{}]: node {} does not exist (the graph has {} nodes)", step, s.node,
                                  graph_.size()));
    const ir::Node& node = graph_.node(s.node);
    if (s.kind == plan::StepKind::kCompute) {
      KIWI_RETURN_IF_ERROR(Compute(step, node));
    } else if (s.kind == plan::StepKind::kFree) {
      KIWI_RETURN_IF_ERROR(Free(step, node));
    } else {
      return BadInput(fmt::format("schedule[{}]: unknown step kind {}", step, static_cast<int>(s.kind)));
    }
  }
  for (const ir::Node& node : graph_.nodes())
    if (computes_[static_cast<size_t>(node.id)] == 0)
      return BadInput(fmt::format("schedule: {} is never computed", Label(node)));
  return Status::Ok();
}

Status Replay::Compute(int32_t step, const ir::Node& node) {
  const auto v = static_cast<size_t>(node.id);
  for (ir::NodeId in : node.inputs)
    if (!resident_[static_cast<size_t>(in)])
      return BadInput(fmt::format("schedule[{}]: compute {} but its input {} '{}' is not resident", step,
                                  Label(node), in, graph_.node(in).name));
  // Recomputing a tensor that is still resident wastes time and would double-count its memory.
  if (resident_[v])
    return BadInput(fmt::format("schedule[{}]: compute {} but it is already resident (free it first)", step,
                                Label(node)));
  const OpTime& t = op_times_[v];
  if (computes_[v] == 0) {
    result_.time.compute += t.compute;
    result_.time.communication += t.communication;
    result_.time.resharding += t.resharding;
  } else {
    result_.time.recompute += t.total();
    ++result_.recomputations;
  }
  ++computes_[v];
  resident_[v] = true;
  live_bytes_ += layouts_.bytes_per_device[v];
  Record(step, node, plan::StepKind::kCompute);
  // CONTRACT.md: the peak is taken right after each computation.
  if (live_bytes_ > result_.peak_memory_bytes || result_.peak_step < 0) {
    result_.peak_memory_bytes = live_bytes_;
    result_.peak_step = step;
  }
  return Status::Ok();
}

Status Replay::Free(int32_t step, const ir::Node& node) {
  const auto v = static_cast<size_t>(node.id);
  if (!resident_[v])
    return BadInput(fmt::format("schedule[{}]: free {} but it is not resident", step, Label(node)));
  resident_[v] = false;
  live_bytes_ -= layouts_.bytes_per_device[v];
  Record(step, node, plan::StepKind::kFree);
  return Status::Ok();
}

void Replay::Record(int32_t step, const ir::Node& node, plan::StepKind kind) {
  result_.timeline.push_back({.step = step, .node = node.id, .kind = kind, .bytes_after = live_bytes_});
}

SimResult Replay::Finish() && {
  // SPMD: every device holds its shard of every resident tensor, so all devices peak alike.
  result_.peak_memory_per_device.assign(static_cast<size_t>(num_devices_), result_.peak_memory_bytes);
  result_.iteration_seconds = result_.time.total();
  return std::move(result_);
}

// CheckpointAllSchedule indexes by the graph's order: a verified graph's order is a permutation of its
// nodes; checked anyway so that an unverified one gives an error, not a crash.
Status CheckOrder(const ir::Graph& graph) {
  const std::vector<ir::NodeId> order = graph.order();
  std::vector<bool> seen(static_cast<size_t>(graph.size()), false);
  for (ir::NodeId v : order) {
    if (v < 0 || v >= graph.size() || seen[static_cast<size_t>(v)])
      return BadInput(fmt::format("graph: order: node {} is out of range or listed twice", v));
    seen[static_cast<size_t>(v)] = true;
  }
  if (order.size() != seen.size())
    return BadInput(fmt::format("graph: order lists {} of the {} nodes", order.size(), seen.size()));
  return Status::Ok();
}

}  // namespace

Result<SimResult> SimulateOperatorPlan(const ir::Graph& graph, const plan::OperatorPlan& plan,
                                       const cost::CostModel& cost_model, const ir::DeviceMesh& mesh) {
  Result<NodeLayouts> layouts = ResolveLayouts(graph, plan, mesh);
  if (!layouts) return layouts.error();
  std::vector<OpTime> op_times;
  op_times.reserve(static_cast<size_t>(graph.size()));
  for (const ir::Node& node : graph.nodes()) op_times.push_back(ExecutionTime(graph, *layouts, node, cost_model, mesh));

  if (plan.schedule.empty()) KIWI_RETURN_IF_ERROR(CheckOrder(graph));
  const std::vector<plan::Step> checkpoint_all =
      plan.schedule.empty() ? plan::CheckpointAllSchedule(graph) : std::vector<plan::Step>{};
  Replay replay(graph, *layouts, std::move(op_times), mesh.NumDevices());
  KIWI_RETURN_IF_ERROR(replay.Run(plan.schedule.empty() ? checkpoint_all : plan.schedule));
  return std::move(replay).Finish();
}

}  // namespace kiwi::sim
