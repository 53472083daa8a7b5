#include "kiwi/ir/sharding_problem.h"

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>

#include <fmt/format.h>

namespace kiwi::ir {
namespace {

Error BadField(const std::string& source, const std::string& field, const std::string& what) {
  return BadInput(fmt::format("{}: problem.{}: {}", source, field, what));
}

Status ValidateNode(const ShardingNode& node, size_t i, const std::string& source) {
  if (node.cost.empty())
    return BadField(source, fmt::format("nodes.costs[{}]", i), "a node needs at least one strategy");
  if (node.usage.size() != node.cost.size())
    return BadField(source, fmt::format("nodes.usages[{}]", i),
                    fmt::format("has {} entries but costs[{}] has {}", node.usage.size(), i, node.cost.size()));
  for (size_t s = 0; s < node.cost.size(); ++s) {
    if (node.cost[s] < 0) return BadField(source, fmt::format("nodes.costs[{}][{}]", i, s), "must be >= 0");
    if (node.usage[s] < 0)
      return BadField(source, fmt::format("nodes.usages[{}][{}]", i, s), "must be >= 0");
  }
  return Status::Ok();
}

Status ValidateEdge(const ShardingProblem& problem, size_t e, const std::string& source) {
  const ShardingEdge& edge = problem.edges[e];
  const auto n = static_cast<int64_t>(problem.nodes.size());
  for (int32_t end : {edge.u, edge.v})
    if (end < 0 || end >= n)
      return BadField(source, fmt::format("edges.nodes[{}]", e),
                      fmt::format("node {} out of range [0, {})", end, n));
  if (edge.u == edge.v)
    return BadField(source, fmt::format("edges.nodes[{}]", e), "an edge joins two different nodes");
  const size_t expected = problem.nodes[static_cast<size_t>(edge.u)].cost.size() *
                          problem.nodes[static_cast<size_t>(edge.v)].cost.size();
  if (edge.cost.size() != expected)
    return BadField(source, fmt::format("edges.costs[{}]", e),
                    fmt::format("has {} entries, expected {} x {} = {}", edge.cost.size(),
                                problem.nodes[static_cast<size_t>(edge.u)].cost.size(),
                                problem.nodes[static_cast<size_t>(edge.v)].cost.size(), expected));
  for (size_t k = 0; k < edge.cost.size(); ++k)
    if (edge.cost[k] < 0) return BadField(source, fmt::format("edges.costs[{}][{}]", e, k), "must be >= 0");
  return Status::Ok();
}

// Summed usage over time as (time, delta) events; `usage_of(i)` picks each node's usage.
template <typename UsageOf>
std::pair<int64_t, int64_t> PeakOf(const ShardingProblem& problem, UsageOf usage_of) {
  std::vector<std::pair<int64_t, int64_t>> events;
  events.reserve(problem.nodes.size() * 2);
  for (size_t i = 0; i < problem.nodes.size(); ++i) {
    const ShardingNode& node = problem.nodes[i];
    const int64_t u = usage_of(i);
    if (!node.live() || u == 0) continue;
    events.emplace_back(node.start, u);
    events.emplace_back(node.end, -u);
  }
  std::sort(events.begin(), events.end());
  // In 128 bits: two usages of 6e18 overlapping wrapped an int64 to 0 and the solution was "feasible".
  __extension__ typedef __int128 Wide;  // GCC/Clang; __extension__ keeps -Wpedantic quiet
  Wide level = 0, peak = 0;
  int64_t peak_time = 0;
  for (size_t k = 0; k < events.size();) {
    const int64_t t = events[k].first;
    for (; k < events.size() && events[k].first == t; ++k) level += events[k].second;
    if (level > peak) peak = level, peak_time = t;
  }
  const int64_t clamped = peak > INT64_MAX ? INT64_MAX : static_cast<int64_t>(peak);  // above any limit
  return {clamped, peak_time};
}

}  // namespace

Status ValidateShardingProblem(const ShardingProblem& problem, const std::string& source) {
  for (size_t i = 0; i < problem.nodes.size(); ++i)
    KIWI_RETURN_IF_ERROR(ValidateNode(problem.nodes[i], i, source));
  for (size_t e = 0; e < problem.edges.size(); ++e) KIWI_RETURN_IF_ERROR(ValidateEdge(problem, e, source));
  if (problem.usage_limit < 0) return BadField(source, "usage_limit", "must be >= 0");
  return Status::Ok();
}

Evaluation Evaluate(const ShardingProblem& problem, const Solution& solution) {
  Evaluation result;
  if (solution.size() != problem.nodes.size()) {
    result.violation = fmt::format("{} strategies for {} nodes", solution.size(), problem.nodes.size());
    return result;
  }
  for (size_t i = 0; i < solution.size(); ++i) {
    if (solution[i] < 0 || solution[i] >= problem.nodes[i].strategies()) {
      result.violation = fmt::format("node {}: strategy {} out of range [0, {})", i, solution[i],
                                     problem.nodes[i].strategies());
      return result;
    }
    result.cost = AddCost(result.cost, problem.nodes[i].cost[static_cast<size_t>(solution[i])]);
  }
  result.valid = true;
  for (const ShardingEdge& edge : problem.edges) {
    const auto su = static_cast<size_t>(solution[static_cast<size_t>(edge.u)]);
    const auto sv = static_cast<size_t>(solution[static_cast<size_t>(edge.v)]);
    const size_t columns = problem.nodes[static_cast<size_t>(edge.v)].cost.size();
    result.cost = AddCost(result.cost, edge.cost[su * columns + sv]);
  }
  std::tie(result.peak_usage, result.peak_time) =
      PeakOf(problem, [&](size_t i) { return problem.nodes[i].usage[static_cast<size_t>(solution[i])]; });
  if (result.cost >= kForbiddenCost) {
    result.violation = "a chosen strategy or edge has a forbidden cost";
  } else if (result.peak_usage > problem.usage_limit) {
    result.violation = fmt::format("usage {} > limit {} at t={}", result.peak_usage, problem.usage_limit,
                                   result.peak_time);
  } else {
    result.feasible = true;
  }
  return result;
}

int64_t MinimumPeakUsage(const ShardingProblem& problem) {
  return PeakOf(problem, [&](size_t i) {
           const std::vector<int64_t>& u = problem.nodes[i].usage;
           return *std::min_element(u.begin(), u.end());
         }).first;
}

}  // namespace kiwi::ir
