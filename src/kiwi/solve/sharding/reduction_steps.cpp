// The exact reduction steps on the working graph (reduction.h explains why each keeps an optimum).
#include <algorithm>

#include "kiwi/solve/sharding/reduction_graph.h"

namespace kiwi::solve::sharding::reduction_internal {
namespace {

constexpr int64_t kF = ir::kForbiddenCost;

size_t Z(int64_t i) { return static_cast<size_t>(i); }

int32_t SegmentOf(const std::vector<int64_t>& points, int64_t t) {
  return static_cast<int32_t>(std::lower_bound(points.begin(), points.end(), t) - points.begin());
}

// Usage of a live node as a term, or as background when it is the same for every allowed strategy.
void AddNodeUsage(WorkGraph& w, int32_t g, const ir::ShardingNode& node) {
  if (!node.live()) return;
  const std::vector<int64_t>& points = w.segment_start;
  const int32_t first = SegmentOf(points, node.start), last = SegmentOf(points, node.end);
  const Group& group = w.groups[Z(g)];
  int64_t lo = -1, hi = -1;
  for (size_t s = 0; s < node.usage.size(); ++s) {
    if (!group.alive[s]) continue;
    if (lo < 0 || node.usage[s] < lo) lo = node.usage[s];
    hi = std::max(hi, node.usage[s]);
  }
  if (lo == hi) {
    w.AddBackground(first, last, std::max<int64_t>(lo, 0));
    return;
  }
  w.groups[Z(g)].terms.push_back(UsageTerm{first, last, node.usage});
}

std::vector<int64_t> SegmentPoints(const ir::ShardingProblem& problem) {
  std::vector<int64_t> points;
  for (const ir::ShardingNode& node : problem.nodes) {
    if (!node.live()) continue;
    points.push_back(node.start);
    points.push_back(node.end);
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  if (!points.empty()) points.pop_back();  // the last point only closes the last segment
  return points;
}

}  // namespace

void WorkGraph::RemoveAdjacency(int32_t g, int32_t e) {
  auto& adj = groups[Z(g)].adj;
  adj.erase(std::remove_if(adj.begin(), adj.end(), [e](const auto& a) { return a.second == e; }), adj.end());
}

void WorkGraph::AddEdgeCost(int32_t a, int32_t b, std::vector<int64_t> cost) {
  const int32_t sa = Strategies(a), sb = Strategies(b);
  for (const auto& [j, e] : groups[Z(a)].adj) {
    if (j != b) continue;
    WorkEdge& edge = edges[Z(e)];
    for (int32_t x = 0; x < sa; ++x)
      for (int32_t y = 0; y < sb; ++y) {
        int64_t& slot = edge.u == a ? edge.cost[Z(x) * Z(sb) + Z(y)] : edge.cost[Z(y) * Z(sa) + Z(x)];
        slot = ir::AddCost(slot, cost[Z(x) * Z(sb) + Z(y)]);
      }
    ++stats.merged_edges;
    return;
  }
  const auto e = static_cast<int32_t>(edges.size());
  edges.push_back(WorkEdge{a, b, std::move(cost), true});
  groups[Z(a)].adj.emplace_back(b, e);
  groups[Z(b)].adj.emplace_back(a, e);
}

WorkGraph BuildWorkGraph(const ir::ShardingProblem& problem) {
  WorkGraph w;
  w.usage_limit = problem.usage_limit;
  w.segment_start = SegmentPoints(problem);
  w.base_diff.assign(w.segment_start.size() + 1, 0);
  w.groups.resize(problem.nodes.size());
  for (size_t i = 0; i < problem.nodes.size(); ++i) {
    Group& g = w.groups[i];
    g.cost = problem.nodes[i].cost;
    g.alive.assign(g.cost.size(), 0);
    for (size_t s = 0; s < g.cost.size(); ++s) g.alive[s] = g.cost[s] < kF ? 1 : 0;
    g.alive_count = static_cast<int32_t>(std::count(g.alive.begin(), g.alive.end(), 1));
    AddNodeUsage(w, static_cast<int32_t>(i), problem.nodes[i]);
  }
  for (const ir::ShardingEdge& edge : problem.edges) {
    if (edge.u == edge.v) continue;
    w.AddEdgeCost(edge.u, edge.v, edge.cost);
  }
  w.stats.merged_edges = static_cast<int32_t>(problem.edges.size() - w.edges.size());
  for (size_t i = 0; i < problem.nodes.size(); ++i) w.Enqueue(static_cast<int32_t>(i));
  return w;
}

bool Prune(WorkGraph& w, int32_t g, bool& infeasible) {
  Group& group = w.groups[Z(g)];
  const int32_t before = group.alive_count;
  for (int32_t s = 0; s < w.Strategies(g); ++s)
    if (group.alive[Z(s)] && group.cost[Z(s)] >= kF) w.Kill(g, s);
  for (const auto& [j, e] : group.adj) {
    const Group& other = w.groups[Z(j)];
    for (int32_t s = 0; s < w.Strategies(g); ++s) {
      if (!group.alive[Z(s)]) continue;
      bool supported = false;
      for (int32_t t = 0; t < w.Strategies(j) && !supported; ++t)
        supported = other.alive[Z(t)] && w.At(e, g, s, t) < kF;
      if (!supported) w.Kill(g, s);
    }
  }
  infeasible = group.alive_count == 0;
  if (group.alive_count == before) return false;
  w.stats.dead += before - group.alive_count;
  w.EnqueueNeighbours(g);
  return true;
}

void Fix(WorkGraph& w, int32_t g) {
  Group& group = w.groups[Z(g)];
  const auto s = static_cast<int32_t>(std::find(group.alive.begin(), group.alive.end(), 1) - group.alive.begin());
  w.constant_cost = ir::AddCost(w.constant_cost, group.cost[Z(s)]);
  for (const UsageTerm& term : group.terms) w.AddBackground(term.first, term.last, term.usage[Z(s)]);
  group.terms.clear();
  for (const auto& [j, e] : group.adj) {
    Group& other = w.groups[Z(j)];
    for (int32_t t = 0; t < w.Strategies(j); ++t) other.cost[Z(t)] = ir::AddCost(other.cost[Z(t)], w.At(e, j, t, s));
    w.edges[Z(e)].alive = false;
    w.RemoveAdjacency(j, e);
    w.Enqueue(j);
  }
  group.adj.clear();
  group.active = false;
  w.steps.push_back(ExpansionStep{ExpansionStep::Kind::kFixed, g, -1, -1, 0, {s}});
  ++w.stats.fixed;
}

}  // namespace kiwi::solve::sharding::reduction_internal
