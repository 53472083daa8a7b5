#pragma once
// The working graph of the exact reductions (reduction.h): one group per original node, with its
// strategies in the original index space (removed ones marked dead), merged edges, and the usage
// terms it has taken over from folded leaves. Internal to reduction*.cpp.
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "kiwi/ir/sharding_problem.h"
#include "kiwi/solve/sharding/reduction.h"

namespace kiwi::solve::sharding::reduction_internal {

struct WorkEdge {
  int32_t u = 0;
  int32_t v = 0;
  std::vector<int64_t> cost;  // S_u x S_v over original strategy indices
  bool alive = true;
};

struct Group {
  std::vector<int64_t> cost;
  std::vector<uint8_t> alive;
  int32_t alive_count = 0;
  std::vector<UsageTerm> terms;                 // varying usage, over this group's strategies
  std::vector<std::pair<int32_t, int32_t>> adj;  // (neighbour, edge)
  bool active = true;
  bool dirty = true;                            // dominance not checked since the last change
  bool queued = false;
};

struct WorkGraph {
  std::vector<Group> groups;
  std::vector<WorkEdge> edges;
  std::vector<int64_t> segment_start;
  std::vector<int64_t> base_diff;               // difference array of constant usage per segment
  int64_t usage_limit = ir::kNoUsageLimit;
  int64_t constant_cost = 0;
  std::vector<ExpansionStep> steps;
  ReductionStats stats;
  std::deque<int32_t> queue;

  int32_t Strategies(int32_t g) const { return static_cast<int32_t>(groups[static_cast<size_t>(g)].cost.size()); }
  // Cost of edge e when its endpoint g takes sg and the other end takes sj.
  int64_t At(int32_t e, int32_t g, int32_t sg, int32_t sj) const {
    const WorkEdge& edge = edges[static_cast<size_t>(e)];
    if (edge.u == g) return edge.cost[static_cast<size_t>(sg) * static_cast<size_t>(Strategies(edge.v)) + static_cast<size_t>(sj)];
    return edge.cost[static_cast<size_t>(sj) * static_cast<size_t>(Strategies(g)) + static_cast<size_t>(sg)];
  }
  void Enqueue(int32_t g) {
    Group& group = groups[static_cast<size_t>(g)];
    group.dirty = true;
    if (group.queued || !group.active) return;
    group.queued = true;
    queue.push_back(g);
  }
  void EnqueueNeighbours(int32_t g) {
    for (const auto& [j, e] : groups[static_cast<size_t>(g)].adj) Enqueue(j);
  }
  void AddBackground(int32_t first, int32_t last, int64_t usage) {
    if (first >= last || usage == 0) return;
    base_diff[static_cast<size_t>(first)] += usage;
    base_diff[static_cast<size_t>(last)] -= usage;
  }
  void Kill(int32_t g, int32_t s) {
    Group& group = groups[static_cast<size_t>(g)];
    if (!group.alive[static_cast<size_t>(s)]) return;
    group.alive[static_cast<size_t>(s)] = 0;
    --group.alive_count;
  }
  void RemoveAdjacency(int32_t g, int32_t e);
  // Adds `cost` (laid out S_a x S_b) onto the edge between a and b, creating it if needed.
  void AddEdgeCost(int32_t a, int32_t b, std::vector<int64_t> cost);
};

// Builds the working graph: compressed time, groups, merged edges, constant usage as background.
WorkGraph BuildWorkGraph(const ir::ShardingProblem& problem);

// The reduction steps on group g; each returns whether it changed the graph. Prune returns false
// and sets `infeasible` when g has no strategy left.
bool Prune(WorkGraph& w, int32_t g, bool& infeasible);
void Fix(WorkGraph& w, int32_t g);
bool TryFold(WorkGraph& w, int32_t g);
// Merges into g a neighbour whose strategy g's strategy determines (one allowed entry per row).
bool TryMerge(WorkGraph& w, int32_t g);
bool TrySeries(WorkGraph& w, int32_t g, int64_t max_work);
bool RemoveDominated(WorkGraph& w, int32_t g, int64_t max_work);

}  // namespace kiwi::solve::sharding::reduction_internal
