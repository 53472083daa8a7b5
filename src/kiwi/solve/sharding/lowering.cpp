// Graph + mesh -> sharding problem (lowering.h): strategies per node, resharding matrices per edge,
// live intervals from the checkpoint-all schedule.
#include "kiwi/solve/sharding/lowering.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <string>
#include <utility>

#include "kiwi/ir/verify.h"

namespace kiwi::solve::sharding {
namespace {

constexpr int kMaxMeshAxes = 8;

Status CheckMesh(const ir::DeviceMesh& mesh) {
  if (mesh.Rank() > kMaxMeshAxes)
    return BadInput(fmt::format("mesh: {} axes, at most {} are supported", mesh.Rank(), kMaxMeshAxes));
  for (int a = 0; a < mesh.Rank(); ++a) {
    const ir::MeshAxis& axis = mesh.axes[static_cast<size_t>(a)];
    if (axis.size < 1) return BadInput(fmt::format("mesh: axes[{}].size: must be at least 1, got {}", a, axis.size));
    if (axis.size == 1) continue;  // never split over: its links are never used
    if (!(std::isfinite(axis.bandwidth) && axis.bandwidth > 0.0))
      return BadInput(fmt::format("mesh: axes[{}].bandwidth: must be positive and finite for an axis of {} devices, got {}",
                                  a, axis.size, axis.bandwidth));
    if (!(std::isfinite(axis.latency) && axis.latency >= 0.0))
      return BadInput(fmt::format("mesh: axes[{}].latency: must be finite and >= 0, got {}", a, axis.latency));
  }
  return Status::Ok();
}

Status CheckOptions(const LoweringOptions& options) {
  if (!(std::isfinite(options.seconds_per_unit) && options.seconds_per_unit > 0.0))
    return BadInput(fmt::format("lowering options: seconds_per_unit: must be positive and finite, got {}",
                                options.seconds_per_unit));
  if (options.memory_limit_bytes < 0)
    return BadInput(fmt::format("lowering options: memory_limit_bytes: must be >= 0, got {}", options.memory_limit_bytes));
  return Status::Ok();
}

// Whole units of `seconds` (rounded to nearest), or an error naming what() when the time is not finite
// or reaches the forbidden-cost mark.
template <typename What>
Result<int64_t> ToUnits(double seconds, double unit, What what) {
  const double units = seconds / unit;
  if (!(units >= 0.0 && units < static_cast<double>(ir::kForbiddenCost)))
    return BadInput(fmt::format("{}: costs {:g} s, which kiwi cannot plan with (times must be finite, >= 0 and "
                                "under {:g} s); check the profile or cluster that priced it",
                                what(), seconds, static_cast<double>(ir::kForbiddenCost) * unit));
  return static_cast<int64_t>(std::llround(units));
}

// KIWI eq. 1: the sharding cost s_i^T (c_i + d_i) and memory s_i^T mem_i of every strategy.
Result<ir::ShardingNode> ProblemNode(const ir::Node& node, const std::vector<Strategy>& strategies, double unit) {
  ir::ShardingNode p;
  for (size_t k = 0; k < strategies.size(); ++k) {
    const Strategy& s = strategies[k];
    Result<int64_t> cost = ToUnits(s.compute_seconds + s.communication_seconds, unit, [&] {
      return fmt::format("graph: node {} '{}': strategy {} '{}': cost", node.id, node.name, k, s.sharding.strategy);
    });
    if (!cost) return cost.error();
    p.cost.push_back(*cost);
    p.usage.push_back(s.output_bytes);
  }
  return p;
}

// A tensor is resident from its compute to the free after its last use (CONTRACT.md: memory counted
// right after each compute), so with time t = the t-th compute its interval is [compute, free's t + 1);
// never-freed (persistent) tensors live to the end.
void SetLiveIntervals(const std::vector<plan::Step>& schedule, std::vector<ir::ShardingNode>& nodes) {
  constexpr int64_t kUnset = -1;
  for (ir::ShardingNode& n : nodes) n.end = kUnset;
  int64_t t = -1;
  for (const plan::Step& step : schedule) {
    ir::ShardingNode& n = nodes[static_cast<size_t>(step.node)];
    if (step.kind == plan::StepKind::kCompute) {
      n.start = ++t;
    } else {
      n.end = t + 1;
    }
  }
  for (ir::ShardingNode& n : nodes)
    if (n.end == kUnset) n.end = t + 1;
}

// The distinct layouts among `specs` (few: many strategies share a layout) and each one's class.
struct LayoutClasses {
  std::vector<const ir::ShardingSpec*> distinct;
  std::vector<size_t> of;
};
LayoutClasses Classify(const std::vector<const ir::ShardingSpec*>& specs) {
  LayoutClasses c;
  for (const ir::ShardingSpec* spec : specs) {
    size_t k = 0;
    while (k < c.distinct.size() && !(*c.distinct[k] == *spec)) ++k;
    if (k == c.distinct.size()) c.distinct.push_back(spec);
    c.of.push_back(k);
  }
  return c;
}

struct EdgeContext {
  const ir::Graph& graph;
  const std::vector<std::vector<Strategy>>& strategies;
  const cost::CostModel& cost_model;
  const ir::DeviceMesh& mesh;
  double unit;
};

// KIWI eq. 1's R_ji for input `operand` of `consumer`: converting each producer layout to each layout
// the consumer requires, as the simulator charges it (nothing when the layouts are equal).
Result<ir::ShardingEdge> ProblemEdge(const EdgeContext& c, const ir::Node& consumer, size_t operand) {
  const ir::Node& producer = c.graph.node(consumer.inputs[operand]);
  const std::vector<Strategy>& su = c.strategies[static_cast<size_t>(producer.id)];
  const std::vector<Strategy>& sv = c.strategies[static_cast<size_t>(consumer.id)];
  std::vector<const ir::ShardingSpec*> from, to;
  for (const Strategy& s : su) from.push_back(&s.sharding.output);
  for (const Strategy& s : sv) to.push_back(&s.sharding.operands.at(operand));
  const LayoutClasses f = Classify(from), t = Classify(to);
  std::vector<int64_t> distinct_cost(f.distinct.size() * t.distinct.size(), 0);
  for (size_t i = 0; i < f.distinct.size(); ++i) {
    for (size_t j = 0; j < t.distinct.size(); ++j) {
      if (*f.distinct[i] == *t.distinct[j]) continue;
      Result<int64_t> cost = ToUnits(c.cost_model.ReshardTime(producer.output, *f.distinct[i], *t.distinct[j], c.mesh),
                                     c.unit, [&] {
                                       return fmt::format("graph: node {} '{}': inputs[{}]: resharding {} -> {}",
                                                          consumer.id, consumer.name, operand,
                                                          f.distinct[i]->ToString(), t.distinct[j]->ToString());
                                     });
      if (!cost) return cost.error();
      distinct_cost[i * t.distinct.size() + j] = *cost;
    }
  }
  ir::ShardingEdge edge{producer.id, consumer.id, std::vector<int64_t>(su.size() * sv.size())};
  for (size_t a = 0; a < su.size(); ++a)
    for (size_t b = 0; b < sv.size(); ++b) edge.cost[a * sv.size() + b] = distinct_cost[f.of[a] * t.distinct.size() + t.of[b]];
  return edge;
}

std::string JoinedNames(const std::vector<Strategy>& strategies) {
  std::vector<std::string> names;
  for (const Strategy& s : strategies) names.push_back(s.sharding.strategy);
  return fmt::format("{}", fmt::join(names, ";"));
}

// One problem node per graph node, with its strategies kept alongside.
Status LowerNodes(const ir::Graph& graph, const cost::CostModel& cost_model, const ir::DeviceMesh& mesh,
                  const LoweringOptions& options, LoweredSharding& l) {
  for (const ir::Node& node : graph.nodes()) {
    l.strategies.push_back(EnumerateStrategies(graph, node, cost_model, mesh, options.strategies));
    Result<ir::ShardingNode> p = ProblemNode(node, l.strategies.back(), options.seconds_per_unit);
    if (!p) return p.error();
    l.problem.nodes.push_back(std::move(*p));
    l.problem.strategy_names.push_back(JoinedNames(l.strategies.back()));
  }
  SetLiveIntervals(l.schedule, l.problem.nodes);
  return Status::Ok();
}

}  // namespace

Result<LoweredSharding> LowerToShardingProblem(const ir::Graph& graph, const cost::CostModel& cost_model,
                                               const ir::DeviceMesh& mesh, const LoweringOptions& options) {
  KIWI_RETURN_IF_ERROR(CheckMesh(mesh));
  KIWI_RETURN_IF_ERROR(CheckOptions(options));
  KIWI_RETURN_IF_ERROR(ir::VerifyGraph(graph, "graph"));
  KIWI_RETURN_IF_ERROR(ir::RequireTensorOperands(graph, "operator sharding"));
  LoweredSharding l;
  l.mesh_shape = mesh.Shape();
  l.seconds_per_unit = options.seconds_per_unit;
  l.schedule = plan::CheckpointAllSchedule(graph);
  l.problem.name = graph.name();
  l.problem.usage_limit = options.memory_limit_bytes;
  KIWI_RETURN_IF_ERROR(LowerNodes(graph, cost_model, mesh, options, l));
  const EdgeContext context{graph, l.strategies, cost_model, mesh, options.seconds_per_unit};
  for (const ir::Node& node : graph.nodes()) {
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      Result<ir::ShardingEdge> edge = ProblemEdge(context, node, i);
      if (!edge) return edge.error();
      l.problem.edges.push_back(std::move(*edge));
    }
  }
  return l;
}

Result<plan::OperatorPlan> ToOperatorPlan(const LoweredSharding& lowered, const ir::Solution& solution,
                                          const ir::DeviceMesh& mesh) {
  if (mesh.Shape() != lowered.mesh_shape)
    return BadInput(fmt::format("mesh: {} is not the mesh {} the problem was lowered for", mesh.ShapeString(),
                                fmt::join(lowered.mesh_shape, "x")));
  if (solution.size() != lowered.strategies.size())
    return BadInput(fmt::format("solution: {} strategies for {} nodes", solution.size(), lowered.strategies.size()));
  plan::OperatorPlan plan;
  plan.mesh_shape = lowered.mesh_shape;
  plan.schedule = lowered.schedule;
  for (size_t i = 0; i < solution.size(); ++i) {
    const std::vector<Strategy>& strategies = lowered.strategies[i];
    if (solution[i] < 0 || static_cast<size_t>(solution[i]) >= strategies.size())
      return BadInput(fmt::format("solution[{}]: strategy {} out of range [0, {})", i, solution[i], strategies.size()));
    plan.shardings.emplace(static_cast<ir::NodeId>(i), strategies[static_cast<size_t>(solution[i])].sharding);
  }
  return plan;
}

}  // namespace kiwi::solve::sharding
