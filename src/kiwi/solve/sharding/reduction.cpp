#include "kiwi/solve/sharding/reduction.h"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "kiwi/solve/sharding/reduction_graph.h"

namespace kiwi::solve::sharding {
namespace {

using reduction_internal::Group;
using reduction_internal::WorkGraph;

size_t Z(int64_t i) { return static_cast<size_t>(i); }

// Applies the cheap steps until nothing changes (a FIFO worklist: deterministic).
Status RunQueue(WorkGraph& w, const ReductionOptions& options) {
  while (!w.queue.empty()) {
    const int32_t g = w.queue.front();
    w.queue.pop_front();
    Group& group = w.groups[Z(g)];
    group.queued = false;
    if (!group.active) continue;
    bool infeasible = false;
    reduction_internal::Prune(w, g, infeasible);
    if (infeasible) return Infeasible(fmt::format("node {}: every strategy has a forbidden cost", g));
    if (group.alive_count == 1) {
      reduction_internal::Fix(w, g);
      continue;
    }
    if (options.merge_followers && reduction_internal::TryMerge(w, g)) continue;
    if (options.fold_leaves && group.adj.size() == 1 && reduction_internal::TryFold(w, g)) continue;
    if (options.series && group.adj.size() == 2 && group.terms.empty())
      reduction_internal::TrySeries(w, g, options.max_series_work);
  }
  return Status::Ok();
}

// Alternates the worklist with passes removing dominated strategies (costlier: run on changed
// nodes only, once the cheap steps are done) until neither changes anything.
Status RunReductions(WorkGraph& w, const ReductionOptions& options) {
  for (bool changed = true; changed;) {
    KIWI_RETURN_IF_ERROR(RunQueue(w, options));
    changed = false;
    if (!options.dominance) break;
    for (size_t g = 0; g < w.groups.size(); ++g)
      if (w.groups[g].active && w.groups[g].dirty)
        changed = reduction_internal::RemoveDominated(w, static_cast<int32_t>(g), options.max_dominance_work) || changed;
  }
  return Status::Ok();
}

// Terms over the compact strategies; constant ones go to the background, equal intervals merge.
std::vector<UsageTerm> CompactTerms(WorkGraph& w, const Group& g, const std::vector<int32_t>& keep) {
  std::vector<UsageTerm> terms;
  for (const UsageTerm& t : g.terms) {
    UsageTerm c{t.first, t.last, {}};
    for (int32_t s : keep) c.usage.push_back(t.usage[Z(s)]);
    const auto [lo, hi] = std::minmax_element(c.usage.begin(), c.usage.end());
    if (*lo == *hi) {
      w.AddBackground(t.first, t.last, *lo);
    } else {
      terms.push_back(std::move(c));
    }
  }
  std::sort(terms.begin(), terms.end(),
            [](const UsageTerm& a, const UsageTerm& b) { return std::tie(a.first, a.last) < std::tie(b.first, b.last); });
  std::vector<UsageTerm> merged;
  for (UsageTerm& t : terms) {
    if (!merged.empty() && merged.back().first == t.first && merged.back().last == t.last) {
      for (size_t s = 0; s < t.usage.size(); ++s) merged.back().usage[s] += t.usage[s];
    } else {
      merged.push_back(std::move(t));
    }
  }
  return merged;
}

void AddReducedEdge(ReducedProblem& r, const WorkGraph& w, const reduction_internal::WorkEdge& edge,
                    const std::vector<int32_t>& index) {
  const int32_t u = index[Z(edge.u)], v = index[Z(edge.v)];
  const std::vector<int32_t>& ku = r.strategy_of[Z(u)];
  const std::vector<int32_t>& kv = r.strategy_of[Z(v)];
  ReducedEdge e{u, v, std::vector<int64_t>(ku.size() * kv.size()), std::vector<int64_t>(ku.size() * kv.size()), {}, {}};
  const size_t nv_orig = Z(w.Strategies(edge.v));
  for (size_t a = 0; a < ku.size(); ++a)
    for (size_t b = 0; b < kv.size(); ++b) {
      const int64_t c = edge.cost[Z(ku[a]) * nv_orig + Z(kv[b])];
      e.cost[a * kv.size() + b] = c;
      e.cost_t[b * ku.size() + a] = c;
    }
  auto priced = [](int64_t c) { return c >= ir::kForbiddenCost ? kForbiddenPriced : static_cast<double>(c); };
  e.priced.resize(e.cost.size());
  e.priced_t.resize(e.cost.size());
  std::transform(e.cost.begin(), e.cost.end(), e.priced.begin(), priced);
  std::transform(e.cost_t.begin(), e.cost_t.end(), e.priced_t.begin(), priced);
  const auto id = static_cast<int32_t>(r.edges.size());
  r.nodes[Z(u)].incident.push_back(Incidence{v, id, true});
  r.nodes[Z(v)].incident.push_back(Incidence{u, id, false});
  r.edges.push_back(std::move(e));
}

ReducedProblem Finish(WorkGraph& w, int32_t original_nodes) {
  ReducedProblem r;
  r.original_nodes = original_nodes;
  std::vector<int32_t> index(w.groups.size(), -1);
  for (size_t g = 0; g < w.groups.size(); ++g) {
    const Group& group = w.groups[g];
    if (!group.active) continue;
    index[g] = static_cast<int32_t>(r.nodes.size());
    std::vector<int32_t> keep;
    for (size_t s = 0; s < group.cost.size(); ++s)
      if (group.alive[s]) keep.push_back(static_cast<int32_t>(s));
    ReducedNode node;
    for (int32_t s : keep) node.cost.push_back(group.cost[Z(s)]);
    node.terms = CompactTerms(w, group, keep);
    r.nodes.push_back(std::move(node));
    r.original.push_back(static_cast<int32_t>(g));
    r.strategy_of.push_back(std::move(keep));
  }
  for (const reduction_internal::WorkEdge& edge : w.edges)
    if (edge.alive) AddReducedEdge(r, w, edge, index);
  r.segment_start = std::move(w.segment_start);
  r.base_usage.assign(r.segment_start.size(), 0);
  int64_t level = 0;
  for (size_t k = 0; k < r.base_usage.size(); ++k) r.base_usage[k] = level += w.base_diff[k];
  r.usage_limit = w.usage_limit;
  r.constant_cost = w.constant_cost;
  r.steps = std::move(w.steps);
  r.stats = w.stats;
  return r;
}

// The least usage any solution can have per segment: base plus each term's minimum.
Status CheckUsageFloor(const ReducedProblem& r) {
  std::vector<int64_t> diff(r.base_usage.size() + 1, 0);
  for (const ReducedNode& node : r.nodes)
    for (const UsageTerm& t : node.terms) {
      const int64_t lo = *std::min_element(t.usage.begin(), t.usage.end());
      diff[Z(t.first)] += lo;
      diff[Z(t.last)] -= lo;
    }
  int64_t level = 0;
  for (size_t k = 0; k < r.base_usage.size(); ++k) {
    level += diff[k];
    if (r.base_usage[k] + level > r.usage_limit)
      return Infeasible(fmt::format("usage_limit {} is below the least usage {} any solution has at t={}",
                                    r.usage_limit, r.base_usage[k] + level, r.segment_start[k]));
  }
  return Status::Ok();
}

}  // namespace

Result<ReducedProblem> ReduceShardingProblem(const ir::ShardingProblem& problem, const ReductionOptions& options) {
  KIWI_RETURN_IF_ERROR(ir::ValidateShardingProblem(problem, problem.name.empty() ? "problem" : problem.name));
  WorkGraph w = reduction_internal::BuildWorkGraph(problem);
  KIWI_RETURN_IF_ERROR(RunReductions(w, options));
  ReducedProblem r = Finish(w, static_cast<int32_t>(problem.nodes.size()));
  KIWI_RETURN_IF_ERROR(CheckUsageFloor(r));
  return r;
}

ir::Solution ExpandSolution(const ReducedProblem& reduced, const std::vector<int32_t>& x) {
  ir::Solution s(Z(reduced.original_nodes), 0);
  for (size_t r = 0; r < reduced.nodes.size(); ++r) s[Z(reduced.original[r])] = reduced.strategy_of[r][Z(x[r])];
  for (auto it = reduced.steps.rbegin(); it != reduced.steps.rend(); ++it) {
    const ExpansionStep& step = *it;
    size_t k = 0;
    if (step.kind == ExpansionStep::Kind::kFold) k = Z(s[Z(step.a)]);
    if (step.kind == ExpansionStep::Kind::kSeries) k = Z(s[Z(step.a)]) * Z(step.b_strategies) + Z(s[Z(step.b)]);
    s[Z(step.node)] = step.table[k];
  }
  return s;
}

int64_t ReducedCost(const ReducedProblem& reduced, const std::vector<int32_t>& x) {
  int64_t cost = reduced.constant_cost;
  for (size_t r = 0; r < reduced.nodes.size(); ++r) cost = ir::AddCost(cost, reduced.nodes[r].cost[Z(x[r])]);
  for (const ReducedEdge& e : reduced.edges) {
    const size_t nv = reduced.nodes[Z(e.v)].cost.size();
    cost = ir::AddCost(cost, e.cost[Z(x[Z(e.u)]) * nv + Z(x[Z(e.v)])]);
  }
  return cost;
}

std::vector<int64_t> ReducedUsage(const ReducedProblem& reduced, const std::vector<int32_t>& x) {
  std::vector<int64_t> diff(reduced.base_usage.size() + 1, 0);
  for (size_t r = 0; r < reduced.nodes.size(); ++r)
    for (const UsageTerm& t : reduced.nodes[r].terms) {
      diff[Z(t.first)] += t.usage[Z(x[r])];
      diff[Z(t.last)] -= t.usage[Z(x[r])];
    }
  std::vector<int64_t> usage(reduced.base_usage);
  int64_t level = 0;
  for (size_t k = 0; k < usage.size(); ++k) usage[k] += level += diff[k];
  return usage;
}

}  // namespace kiwi::solve::sharding
