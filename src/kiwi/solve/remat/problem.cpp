#include "kiwi/solve/remat/problem.h"

#include <fmt/format.h>

#include <algorithm>

#include "kiwi/sim/simulator.h"

namespace kiwi::solve::remat {
namespace {

const ir::DeviceMesh& OneDevice() {
  static const ir::DeviceMesh mesh{{ir::MeshAxis{}}};
  return mesh;
}

}  // namespace

Result<RematProblem> MakeRematProblem(const ir::Graph& graph, const cost::CostModel& cost_model, int64_t budget) {
  if (budget < 0) return BadInput(fmt::format("budget: must be >= 0, got {}", budget));
  RematProblem p;
  p.graph = &graph;
  p.order = graph.order();
  p.position.assign(static_cast<size_t>(graph.size()), -1);
  for (size_t t = 0; t < p.order.size(); ++t) p.position[static_cast<size_t>(p.order[t])] = static_cast<int32_t>(t);
  p.consumers = graph.Consumers();
  for (const ir::Node& n : graph.nodes()) {
    p.cost.push_back(cost_model.ComputeTime(n));
    p.memory.push_back(n.output.Bytes());
    p.persistent.push_back(n.is_persistent());
    p.baseline_cost += p.cost.back();
  }
  p.budget = budget;
  Result<sim::SimResult> all = sim::SimulateOperatorPlan(graph, plan::OperatorPlan{}, cost_model, OneDevice());
  if (!all) return all.error();
  p.checkpoint_all_peak = all->peak_memory_bytes;
  return p;
}

std::vector<int64_t> FrontierComputeBytes(const RematProblem& p) {
  std::vector<int64_t> bytes;
  bytes.reserve(p.order.size());
  int64_t persistent = 0;
  for (ir::NodeId v : p.order) {
    const ir::Node& n = p.graph->node(v);
    if (p.persistent[static_cast<size_t>(v)]) persistent += p.memory[static_cast<size_t>(v)];
    int64_t live = p.persistent[static_cast<size_t>(v)] ? 0 : p.memory[static_cast<size_t>(v)];
    std::vector<ir::NodeId> inputs = n.inputs;
    std::sort(inputs.begin(), inputs.end());
    inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
    for (ir::NodeId in : inputs)
      if (!p.persistent[static_cast<size_t>(in)]) live += p.memory[static_cast<size_t>(in)];
    bytes.push_back(persistent + live);
  }
  return bytes;
}

int64_t MemoryLowerBound(const RematProblem& p) {
  const std::vector<int64_t> bytes = FrontierComputeBytes(p);
  return bytes.empty() ? 0 : *std::max_element(bytes.begin(), bytes.end());
}

std::optional<double> RematResult::gap() const {
  if (!lower_bound || !feasible) return std::nullopt;
  if (cost <= 0) return 0.0;
  return std::max(0.0, (cost - *lower_bound) / cost);
}

Result<RematResult> FinishResult(const RematProblem& problem, const cost::CostModel& cost_model,
                                 std::vector<plan::Step> schedule, RematResult partial) {
  plan::OperatorPlan op;
  op.schedule = std::move(schedule);
  // An empty graph's schedule is empty (nothing to compute); any other graph's cannot be.
  if (op.schedule.empty() && problem.graph->size() > 0)
    return Internal(fmt::format("{}: returned an empty schedule", partial.solver));
  Result<sim::SimResult> sim = sim::SimulateOperatorPlan(*problem.graph, op, cost_model, OneDevice());
  if (!sim) return Internal(fmt::format("{}: schedule does not replay: {}", partial.solver, sim.error().message));
  partial.cost = sim->time.total();
  partial.peak_memory = sim->peak_memory_bytes;
  partial.feasible = sim->peak_memory_bytes <= problem.budget;
  partial.schedule = std::move(op.schedule);
  if (!partial.feasible) partial.optimal = false;
  return partial;
}

}  // namespace kiwi::solve::remat
