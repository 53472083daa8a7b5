// The joint problem (problem.h): lowering, per-node timing, the reduced schedule family's residency,
// its exact evaluation and its compute/free schedule.
#include "kiwi/solve/joint/problem.h"

#include <fmt/format.h>

#include <algorithm>

#include "kiwi/ir/backward.h"
#include "kiwi/solve/joint/pruning.h"

namespace kiwi::solve::joint {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

void SetOrder(const ir::Graph& graph, JointProblem& p) {
  p.order = graph.order();
  p.position.assign(Z(graph.size()), 0);
  for (size_t t = 0; t < p.order.size(); ++t) p.position[Z(p.order[t])] = static_cast<int32_t>(t);
  p.boundary = ir::FirstBackwardPosition(graph, p.order);
  p.consumers = graph.Consumers();
}

// f_i, H_i, live_i (§3.2.3) from the consumers' positions; candidates are forward activations read
// by the backward pass with at least one step between their last forward and first backward use
// (otherwise dropping them frees nothing at any step and recomputing only costs time).
void SetTiming(const ir::Graph& graph, bool allow_recompute, JointProblem& p) {
  p.timing.assign(Z(graph.size()), {});
  for (const ir::Node& n : graph.nodes()) {
    NodeTiming& t = p.timing[Z(n.id)];
    t.position = p.position[Z(n.id)];
    t.last_forward_use = t.last_use = t.position;
    t.persistent = n.is_persistent();
    for (ir::NodeId c : p.consumers[Z(n.id)]) {
      const int32_t at = p.position[Z(c)];
      t.last_use = std::max(t.last_use, at);
      if (at < p.boundary) t.last_forward_use = std::max(t.last_forward_use, at);
      else if (t.first_backward_use < 0 || at < t.first_backward_use) t.first_backward_use = at;
    }
    t.candidate = allow_recompute && t.position < p.boundary && !t.persistent && n.kind != ir::OpKind::kInput &&
                  t.first_backward_use >= 0 && t.first_backward_use - t.last_forward_use >= 2;
  }
}

// The first invalid decision, or "" (strategy range, pruned strategies, candidates, eq. 9).
std::string Violation(const JointProblem& p, const JointSolution& s) {
  const auto n = Z(p.graph->size());
  if (s.strategy.size() != n || s.recompute.size() != n)
    return fmt::format("solution has {} strategies and {} recompute flags for {} nodes", s.strategy.size(),
                       s.recompute.size(), n);
  for (size_t v = 0; v < n; ++v) {
    const std::vector<int32_t>& allowed = p.allowed[v];
    if (!std::binary_search(allowed.begin(), allowed.end(), s.strategy[v]))
      return fmt::format("node {}: strategy {} is not one of its {} allowed strategies", v, s.strategy[v], allowed.size());
    if (!s.recompute[v]) continue;
    if (!p.timing[v].candidate) return fmt::format("node {}: recomputed but not a recomputation candidate", v);
    for (ir::NodeId in : p.graph->node(static_cast<ir::NodeId>(v)).inputs)
      if (s.recompute[Z(in)])
        return fmt::format("node {} and its input {} are both recomputed (KIWI eq. 9)", v, in);
  }
  return "";
}

int64_t NodeCost(const JointProblem& p, const JointSolution& s, ir::NodeId v) {
  int64_t c = p.lowered.problem.nodes[Z(v)].cost[Z(s.strategy[Z(v)])];
  const auto kv = Z(p.lowered.problem.nodes[Z(v)].strategies());
  for (int32_t e : p.in_edges[Z(v)]) {
    const ir::ShardingEdge& edge = p.lowered.problem.edges[Z(e)];
    c = ir::AddCost(c, edge.cost[Z(s.strategy[Z(edge.u)]) * kv + Z(s.strategy[Z(v)])]);
  }
  return c;
}

}  // namespace

Result<JointProblem> MakeJointProblem(const ir::Graph& graph, const cost::CostModel& cost_model,
                                      const ir::DeviceMesh& mesh, int64_t budget, const JointProblemOptions& options) {
  if (budget < 0) return BadInput(fmt::format("memory budget: must be >= 0, got {}", budget));
  Result<sharding::LoweredSharding> lowered = sharding::LowerToShardingProblem(graph, cost_model, mesh, options.lowering);
  if (!lowered) return lowered.error();
  JointProblem p;
  p.graph = &graph;
  p.cost_model = &cost_model;
  p.mesh = mesh;
  p.lowered = std::move(*lowered);
  p.budget = budget;
  SetOrder(graph, p);
  SetTiming(graph, options.allow_recompute, p);
  p.in_edges.assign(Z(graph.size()), {});
  for (size_t e = 0; e < p.lowered.problem.edges.size(); ++e)
    p.in_edges[Z(p.lowered.problem.edges[e].v)].push_back(static_cast<int32_t>(e));
  if (options.prune_dominated) {
    p.allowed = UndominatedStrategies(p.lowered.problem);
  } else {
    for (const ir::ShardingNode& n : p.lowered.problem.nodes) {
      std::vector<int32_t>& all = p.allowed.emplace_back(Z(n.strategies()));
      for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<int32_t>(k);
    }
  }
  return p;
}

JointSolution WithoutRecompute(const ir::Solution& strategy) {
  return {strategy, std::vector<uint8_t>(strategy.size(), 0)};
}

std::vector<std::vector<Residency>> ResidencyIntervals(const JointProblem& p, const std::vector<uint8_t>& recompute) {
  const int32_t last = p.size() - 1;
  std::vector<std::vector<Residency>> out(Z(p.graph->size()));
  for (size_t v = 0; v < out.size(); ++v) {
    const NodeTiming& t = p.timing[v];
    if (t.persistent) {
      out[v] = {{t.position, last}};
    } else if (recompute[v]) {  // simplification 2: resident from its recomputation to its last use
      out[v] = {{t.position, t.last_forward_use}, {t.first_backward_use, t.last_use}};
    } else {  // eq. 10: h_v = max(live_v, H_w of recomputed consumers w)
      int32_t end = t.last_use;
      for (ir::NodeId w : p.consumers[v])
        if (recompute[Z(w)]) end = std::max(end, p.timing[Z(w)].first_backward_use);
      out[v] = {{t.position, end}};
    }
  }
  return out;
}

JointEvaluation EvaluateJoint(const JointProblem& p, const JointSolution& s) {
  JointEvaluation e;
  e.violation = Violation(p, s);
  if (!e.violation.empty()) return e;
  e.valid = true;
  for (ir::NodeId v = 0; v < p.graph->size(); ++v) {
    const int64_t c = NodeCost(p, s, v);
    e.cost = ir::AddCost(e.cost, s.recompute[Z(v)] ? ir::AddCost(c, c) : c);
    e.recomputed += s.recompute[Z(v)];
  }
  std::vector<int64_t> delta(Z(p.size()) + 1, 0);  // memory changes by position
  const std::vector<std::vector<Residency>> residency = ResidencyIntervals(p, s.recompute);
  for (size_t v = 0; v < residency.size(); ++v)
    for (const Residency& r : residency[v]) {
      delta[Z(r.begin)] += p.Memory(static_cast<ir::NodeId>(v), s.strategy[v]);
      delta[Z(r.end) + 1] -= p.Memory(static_cast<ir::NodeId>(v), s.strategy[v]);
    }
  int64_t resident = 0;
  for (int32_t t = 0; t < p.size(); ++t) {
    resident += delta[Z(t)];
    e.memory.push_back(resident);
    if (resident > e.peak || e.peak_position < 0) e.peak = resident, e.peak_position = t;
  }
  e.feasible = e.peak <= p.budget && e.cost < ir::kForbiddenCost;
  if (!e.feasible)
    e.violation = fmt::format("peak {} bytes > budget {} bytes at step {}", e.peak, p.budget, e.peak_position);
  return e;
}

std::vector<plan::Step> JointSchedule(const JointProblem& p, const std::vector<uint8_t>& recompute) {
  const std::vector<std::vector<Residency>> residency = ResidencyIntervals(p, recompute);
  std::vector<std::vector<ir::NodeId>> recomputed_at(Z(p.size())), freed_at(Z(p.size()));
  for (size_t v = 0; v < residency.size(); ++v) {
    const auto id = static_cast<ir::NodeId>(v);
    if (recompute[v]) recomputed_at[Z(p.timing[v].first_backward_use)].push_back(id);
    for (const Residency& r : residency[v])
      if (!p.timing[v].persistent) freed_at[Z(r.end)].push_back(id);
  }
  std::vector<plan::Step> steps;
  steps.reserve(Z(p.size()) * 2 + 2 * recomputed_at.size());
  for (int32_t t = 0; t < p.size(); ++t) {
    std::vector<ir::NodeId>& again = recomputed_at[Z(t)];
    std::sort(again.begin(), again.end(), [&](ir::NodeId a, ir::NodeId b) { return p.position[Z(a)] < p.position[Z(b)]; });
    for (ir::NodeId v : again) steps.push_back({plan::StepKind::kCompute, v});
    steps.push_back({plan::StepKind::kCompute, p.order[Z(t)]});
    for (ir::NodeId v : freed_at[Z(t)]) steps.push_back({plan::StepKind::kFree, v});
  }
  return steps;
}

Result<plan::OperatorPlan> JointPlan(const JointProblem& p, const JointSolution& s) {
  if (s.recompute.size() != s.strategy.size())
    return BadInput(fmt::format("solution: {} recompute flags for {} strategies", s.recompute.size(), s.strategy.size()));
  Result<plan::OperatorPlan> plan = sharding::ToOperatorPlan(p.lowered, s.strategy, p.mesh);
  if (!plan) return plan.error();
  plan->schedule = JointSchedule(p, s.recompute);
  return plan;
}

}  // namespace kiwi::solve::joint
