// Leaf folding, series reduction and dominated strategies (reduction.h).
#include <algorithm>

#include "kiwi/solve/sharding/reduction_graph.h"

namespace kiwi::solve::sharding::reduction_internal {
namespace {

constexpr int64_t kF = ir::kForbiddenCost;

size_t Z(int64_t i) { return static_cast<size_t>(i); }

int64_t TermSum(const Group& g, int32_t s) {
  int64_t sum = 0;
  for (const UsageTerm& t : g.terms) sum += t.usage[Z(s)];
  return sum;
}

bool UsageLeq(const Group& g, int32_t a, int32_t b) {
  for (const UsageTerm& t : g.terms)
    if (t.usage[Z(a)] > t.usage[Z(b)]) return false;
  return true;
}

// For parent strategy sp: the leaf's choice that is cheapest and least in every usage term, -1 when
// the leaf has no allowed choice, -2 when no single choice is best in both.
int32_t BestLeafChoice(const WorkGraph& w, int32_t g, int32_t e, int32_t sp, int64_t& total) {
  const Group& leaf = w.groups[Z(g)];
  int32_t best = -1;
  int64_t best_usage = 0;
  total = kF;
  for (int32_t s = 0; s < w.Strategies(g); ++s) {
    if (!leaf.alive[Z(s)]) continue;
    const int64_t t = ir::AddCost(leaf.cost[Z(s)], w.At(e, g, s, sp));
    if (t >= kF) continue;
    const int64_t usage = TermSum(leaf, s);
    if (best < 0 || t < total || (t == total && usage < best_usage)) best = s, total = t, best_usage = usage;
  }
  if (best < 0) return -1;
  for (int32_t s = 0; s < w.Strategies(g); ++s) {
    if (!leaf.alive[Z(s)] || s == best) continue;
    if (ir::AddCost(leaf.cost[Z(s)], w.At(e, g, s, sp)) >= kF) continue;
    if (!UsageLeq(leaf, best, s)) return -2;
  }
  return best;
}

// Moves the leaf's usage terms onto the parent through `choice`; constant ones become background.
void MoveTerms(WorkGraph& w, int32_t g, int32_t p, const std::vector<int32_t>& choice) {
  Group& parent = w.groups[Z(p)];
  for (UsageTerm& term : w.groups[Z(g)].terms) {
    UsageTerm moved{term.first, term.last, std::vector<int64_t>(choice.size(), 0)};
    int64_t lo = -1, hi = -1;
    for (size_t sp = 0; sp < choice.size(); ++sp) {
      if (choice[sp] < 0 || !parent.alive[sp]) continue;
      moved.usage[sp] = term.usage[Z(choice[sp])];
      if (lo < 0 || moved.usage[sp] < lo) lo = moved.usage[sp];
      hi = std::max(hi, moved.usage[sp]);
    }
    if (lo == hi) {
      w.AddBackground(term.first, term.last, std::max<int64_t>(lo, 0));
    } else {
      parent.terms.push_back(std::move(moved));
    }
  }
  w.groups[Z(g)].terms.clear();
}

bool Dominates(const WorkGraph& w, int32_t g, int32_t a, int32_t b) {
  const Group& group = w.groups[Z(g)];
  bool less = group.cost[Z(a)] < group.cost[Z(b)];
  for (const UsageTerm& t : group.terms) {
    if (t.usage[Z(a)] > t.usage[Z(b)]) return false;
    less = less || t.usage[Z(a)] < t.usage[Z(b)];
  }
  for (const auto& [j, e] : group.adj) {
    const Group& other = w.groups[Z(j)];
    for (int32_t t = 0; t < w.Strategies(j); ++t) {
      if (!other.alive[Z(t)]) continue;
      const int64_t ca = w.At(e, g, a, t), cb = w.At(e, g, b, t);
      if (ca > cb) return false;
      less = less || ca < cb;
    }
  }
  return less || a < b;
}

// Node j takes strategy follow[s] whenever g takes s: j's costs, usage and edges move onto g.
void MergeInto(WorkGraph& w, int32_t j, int32_t g, int32_t e, const std::vector<int32_t>& follow) {
  Group& group = w.groups[Z(g)];
  Group& other = w.groups[Z(j)];
  for (int32_t s = 0; s < w.Strategies(g); ++s) {
    if (!group.alive[Z(s)]) continue;
    const int32_t t = follow[Z(s)];
    group.cost[Z(s)] = ir::AddCost(group.cost[Z(s)], ir::AddCost(other.cost[Z(t)], w.At(e, g, s, t)));
  }
  MoveTerms(w, j, g, follow);
  w.edges[Z(e)].alive = false;
  w.RemoveAdjacency(g, e);
  w.RemoveAdjacency(j, e);
  const std::vector<std::pair<int32_t, int32_t>> rest = other.adj;
  const int32_t ng = w.Strategies(g);
  for (const auto& [k, ek] : rest) {
    const int32_t nk = w.Strategies(k);
    std::vector<int64_t> cost(Z(ng) * Z(nk), kF);
    for (int32_t s = 0; s < ng; ++s) {
      if (!group.alive[Z(s)]) continue;
      for (int32_t t = 0; t < nk; ++t) cost[Z(s) * Z(nk) + Z(t)] = w.At(ek, j, follow[Z(s)], t);
    }
    w.edges[Z(ek)].alive = false;
    w.RemoveAdjacency(k, ek);
    w.AddEdgeCost(g, k, std::move(cost));
    w.Enqueue(k);
  }
  other.adj.clear();
  other.active = false;
  w.steps.push_back(ExpansionStep{ExpansionStep::Kind::kFold, j, g, -1, 0, follow});
  ++w.stats.merged_nodes;
  w.Enqueue(g);
}

}  // namespace

bool TryFold(WorkGraph& w, int32_t g) {
  Group& leaf = w.groups[Z(g)];
  const auto [p, e] = leaf.adj.front();
  const int32_t sp_count = w.Strategies(p);
  std::vector<int32_t> choice(Z(sp_count), -1);
  std::vector<int64_t> total(Z(sp_count), kF);
  for (int32_t sp = 0; sp < sp_count; ++sp) {
    if (!w.groups[Z(p)].alive[Z(sp)]) continue;
    choice[Z(sp)] = BestLeafChoice(w, g, e, sp, total[Z(sp)]);
    if (choice[Z(sp)] == -2) return false;
  }
  Group& parent = w.groups[Z(p)];
  for (int32_t sp = 0; sp < sp_count; ++sp) {
    if (!parent.alive[Z(sp)]) continue;
    if (choice[Z(sp)] < 0) {
      w.Kill(p, sp);
      ++w.stats.dead;
    } else {
      parent.cost[Z(sp)] = ir::AddCost(parent.cost[Z(sp)], total[Z(sp)]);
    }
  }
  MoveTerms(w, g, p, choice);
  w.edges[Z(e)].alive = false;
  w.RemoveAdjacency(p, e);
  leaf.adj.clear();
  leaf.active = false;
  for (int32_t& c : choice) c = std::max(c, 0);
  w.steps.push_back(ExpansionStep{ExpansionStep::Kind::kFold, g, p, -1, 0, std::move(choice)});
  ++w.stats.folded;
  w.Enqueue(p);
  w.EnqueueNeighbours(p);
  return true;
}

bool TryMerge(WorkGraph& w, int32_t g) {
  const Group& group = w.groups[Z(g)];
  bool merged = false;
  for (size_t i = 0; i < group.adj.size();) {
    const auto [j, e] = group.adj[i];
    std::vector<int32_t> follow(Z(w.Strategies(g)), 0);
    bool functional = true;
    for (int32_t s = 0; s < w.Strategies(g) && functional; ++s) {
      if (!group.alive[Z(s)]) continue;
      int32_t count = 0;
      for (int32_t t = 0; t < w.Strategies(j) && count < 2; ++t)
        if (w.groups[Z(j)].alive[Z(t)] && w.At(e, g, s, t) < kF) ++count, follow[Z(s)] = t;
      functional = count == 1;
    }
    if (!functional) {
      ++i;
      continue;
    }
    MergeInto(w, j, g, e, follow);  // removes adj[i]; j's edges are merged in or appended
    merged = true;
  }
  return merged;
}

bool TrySeries(WorkGraph& w, int32_t g, int64_t max_work) {
  const Group& mid = w.groups[Z(g)];
  const auto [a, ea] = mid.adj[0];
  const auto [b, eb] = mid.adj[1];
  const int32_t na = w.Strategies(a), nb = w.Strategies(b), ng = w.Strategies(g);
  const Group& ga = w.groups[Z(a)];
  const Group& gb = w.groups[Z(b)];
  if (int64_t{ga.alive_count} * gb.alive_count * mid.alive_count > max_work) return false;
  std::vector<int64_t> cost(Z(na) * Z(nb), kF);
  std::vector<int32_t> table(Z(na) * Z(nb), 0);
  for (int32_t x = 0; x < na; ++x) {
    if (!ga.alive[Z(x)]) continue;
    for (int32_t s = 0; s < ng; ++s) {
      if (!mid.alive[Z(s)]) continue;
      const int64_t base = ir::AddCost(w.At(ea, g, s, x), mid.cost[Z(s)]);
      if (base >= kF) continue;
      for (int32_t y = 0; y < nb; ++y) {
        if (!gb.alive[Z(y)]) continue;
        const int64_t c = ir::AddCost(base, w.At(eb, g, s, y));
        if (c < cost[Z(x) * Z(nb) + Z(y)]) cost[Z(x) * Z(nb) + Z(y)] = c, table[Z(x) * Z(nb) + Z(y)] = s;
      }
    }
  }
  w.edges[Z(ea)].alive = false;
  w.edges[Z(eb)].alive = false;
  w.RemoveAdjacency(a, ea);
  w.RemoveAdjacency(b, eb);
  w.groups[Z(g)].adj.clear();
  w.groups[Z(g)].active = false;
  w.AddEdgeCost(a, b, std::move(cost));
  w.steps.push_back(ExpansionStep{ExpansionStep::Kind::kSeries, g, a, b, nb, std::move(table)});
  ++w.stats.series;
  w.Enqueue(a);
  w.Enqueue(b);
  return true;
}

bool RemoveDominated(WorkGraph& w, int32_t g, int64_t max_work) {
  Group& group = w.groups[Z(g)];
  group.dirty = false;
  int64_t row = static_cast<int64_t>(group.terms.size()) + 1;
  for (const auto& [j, e] : group.adj) row += w.groups[Z(j)].alive_count;
  if (int64_t{group.alive_count} * group.alive_count * row > max_work) return false;
  std::vector<int32_t> order;
  for (int32_t s = 0; s < w.Strategies(g); ++s)
    if (group.alive[Z(s)]) order.push_back(s);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return group.cost[Z(a)] < group.cost[Z(b)]; });
  bool changed = false;
  for (int32_t b : order) {
    for (int32_t a : order) {
      if (group.cost[Z(a)] > group.cost[Z(b)]) break;
      if (a == b || !group.alive[Z(a)] || !Dominates(w, g, a, b)) continue;
      w.Kill(g, b);
      ++w.stats.dominated;
      changed = true;
      break;
    }
  }
  if (changed) {
    w.Enqueue(g);
    w.EnqueueNeighbours(g);
  }
  return changed;
}

}  // namespace kiwi::solve::sharding::reduction_internal
