#include "kiwi/solve/remat/recompute_frontier.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <set>

namespace kiwi::solve::remat {
namespace {

// Dinic's maximum flow on a small graph with real capacities.
class MaxFlow {
 public:
  explicit MaxFlow(int nodes) : adjacency_(static_cast<size_t>(nodes)) {}

  void AddEdge(int from, int to, double capacity) {
    adjacency_[static_cast<size_t>(from)].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({to, capacity});
    adjacency_[static_cast<size_t>(to)].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({from, 0.0});
  }

  void Run(int source, int sink) {
    while (Levels(source, sink)) {
      next_.assign(adjacency_.size(), 0);
      while (Push(source, sink, kInfinity) > kEpsilon) {
      }
    }
  }

  // After Run: the nodes the source still reaches in the residual graph (the minimum cut's source side).
  std::vector<bool> SourceSide(int source) const {
    std::vector<bool> seen(adjacency_.size(), false);
    std::vector<int> stack{source};
    seen[static_cast<size_t>(source)] = true;
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      for (int e : adjacency_[static_cast<size_t>(v)]) {
        const Edge& edge = edges_[static_cast<size_t>(e)];
        if (edge.capacity > kEpsilon && !seen[static_cast<size_t>(edge.to)]) {
          seen[static_cast<size_t>(edge.to)] = true;
          stack.push_back(edge.to);
        }
      }
    }
    return seen;
  }

  static constexpr double kInfinity = std::numeric_limits<double>::infinity();

 private:
  static constexpr double kEpsilon = 1e-9;
  struct Edge {
    int to;
    double capacity;  // residual
  };

  bool Levels(int source, int sink) {
    level_.assign(adjacency_.size(), -1);
    std::queue<int> queue;
    queue.push(source);
    level_[static_cast<size_t>(source)] = 0;
    while (!queue.empty()) {
      const int v = queue.front();
      queue.pop();
      for (int e : adjacency_[static_cast<size_t>(v)]) {
        const Edge& edge = edges_[static_cast<size_t>(e)];
        if (edge.capacity > kEpsilon && level_[static_cast<size_t>(edge.to)] < 0) {
          level_[static_cast<size_t>(edge.to)] = level_[static_cast<size_t>(v)] + 1;
          queue.push(edge.to);
        }
      }
    }
    return level_[static_cast<size_t>(sink)] >= 0;
  }

  double Push(int v, int sink, double limit) {
    if (v == sink) return limit;
    for (size_t& i = next_[static_cast<size_t>(v)]; i < adjacency_[static_cast<size_t>(v)].size(); ++i) {
      const int e = adjacency_[static_cast<size_t>(v)][i];
      Edge& edge = edges_[static_cast<size_t>(e)];
      if (edge.capacity <= kEpsilon || level_[static_cast<size_t>(edge.to)] != level_[static_cast<size_t>(v)] + 1)
        continue;
      const double pushed = Push(edge.to, sink, std::min(limit, edge.capacity));
      if (pushed > kEpsilon) {
        edge.capacity -= pushed;
        edges_[static_cast<size_t>(e ^ 1)].capacity += pushed;
        return pushed;
      }
    }
    return 0.0;
  }

  std::vector<std::vector<int>> adjacency_;
  std::vector<Edge> edges_;
  std::vector<int> level_;
  std::vector<size_t> next_;
};

// Whether the backward pass would not keep op u's output, but a recomputed reader may need it kept:
// the ops that get a y variable.
std::vector<bool> NeedsKeepVariable(const cost::RecomputeMenu& menu) {
  std::vector<bool> y(menu.ops.size(), false);
  for (const cost::MenuOp& op : menu.ops)
    if (op.recomputable)
      for (int in : op.inputs)
        if (!menu.ops[static_cast<size_t>(in)].saved) y[static_cast<size_t>(in)] = true;
  return y;
}

std::vector<std::string> Names(const cost::RecomputeMenu& menu, const std::vector<bool>& in_set) {
  std::vector<std::string> names;
  for (size_t i = 0; i < menu.ops.size(); ++i)
    if (in_set[i]) names.push_back(menu.ops[i].name);
  return names;
}

}  // namespace

std::vector<bool> CheapestRecomputeSet(const cost::RecomputeMenu& menu, double lambda) {
  const size_t n = menu.ops.size();
  const std::vector<bool> has_y = NeedsKeepVariable(menu);
  // Nodes: 0 source, 1 sink, 2 + i: x_i, 2 + n + i: y_i (selected = on the source side).
  constexpr int kSource = 0, kSink = 1;
  const auto x = [](size_t i) { return 2 + static_cast<int>(i); };
  const auto y = [n](size_t i) { return 2 + static_cast<int>(n + i); };
  MaxFlow flow(2 + 2 * static_cast<int>(n));
  const auto weigh = [&](int node, double weight) {  // a negative weight pays to select, a positive one not to
    if (weight < 0.0) flow.AddEdge(kSource, node, -weight);
    if (weight > 0.0) flow.AddEdge(node, kSink, weight);
  };
  for (size_t i = 0; i < n; ++i) {
    const cost::MenuOp& op = menu.ops[i];
    const double bytes = static_cast<double>(op.bytes_per_sample);
    if (has_y[i]) weigh(y(i), bytes);
    if (!op.recomputable) continue;
    weigh(x(i), lambda * op.seconds_per_sample - (op.saved || has_y[i] ? bytes : 0.0));
    if (has_y[i]) flow.AddEdge(x(i), y(i), MaxFlow::kInfinity);  // recomputed: y_u >= x_u
    for (int in : op.inputs) {
      const size_t u = static_cast<size_t>(in);
      if (has_y[u]) flow.AddEdge(x(i), y(u), MaxFlow::kInfinity);  // its input kept or recomputed (else saved)
    }
  }
  flow.Run(kSource, kSink);
  const std::vector<bool> side = flow.SourceSide(kSource);
  std::vector<bool> in_set(n, false);
  for (size_t i = 0; i < n; ++i) in_set[i] = menu.ops[i].recomputable && side[static_cast<size_t>(x(i))];
  return in_set;
}

std::vector<FrontierSet> RecomputeFrontier(const cost::RecomputeMenu& menu, int max_sets) {
  // The prices at which the cheapest set can change: each op's bytes per second of recompute, just
  // below and above, and a geometric grid over their range.
  std::vector<double> ratios;
  for (const cost::MenuOp& op : menu.ops)
    if (op.recomputable && op.bytes_per_sample > 0 && op.seconds_per_sample > 0.0)
      ratios.push_back(static_cast<double>(op.bytes_per_sample) / op.seconds_per_sample);
  std::vector<double> lambdas{0.0};
  if (!ratios.empty()) {
    const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
    constexpr int kGrid = 48;
    for (int k = 0; k <= kGrid; ++k) lambdas.push_back(*lo / 4 * std::pow(16 * *hi / *lo, k / double{kGrid}));
    for (double r : ratios) lambdas.insert(lambdas.end(), {r * 0.999, r * 1.001});
  }
  std::set<std::vector<bool>> seen;
  std::vector<FrontierSet> sets;
  for (double lambda : lambdas) {
    std::vector<bool> in_set = CheapestRecomputeSet(menu, lambda);
    if (std::none_of(in_set.begin(), in_set.end(), [](bool b) { return b; }) || !seen.insert(in_set).second) continue;
    sets.push_back({Names(menu, in_set), cost::PriceRecomputeSet(menu, in_set)});
  }
  // Pareto: fewest seconds first; keep a set only when it drops more than every cheaper one.
  std::sort(sets.begin(), sets.end(), [](const FrontierSet& a, const FrontierSet& b) {
    if (a.cost.seconds_per_sample != b.cost.seconds_per_sample) return a.cost.seconds_per_sample < b.cost.seconds_per_sample;
    return a.cost.dropped_bytes_per_sample > b.cost.dropped_bytes_per_sample;
  });
  std::vector<FrontierSet> frontier;
  for (FrontierSet& s : sets)
    if (s.cost.dropped_bytes_per_sample > (frontier.empty() ? 0 : frontier.back().cost.dropped_bytes_per_sample))
      frontier.push_back(std::move(s));
  if (max_sets <= 0 || static_cast<int>(frontier.size()) <= max_sets) return frontier;
  std::vector<FrontierSet> spread;  // evenly over the frontier, its last set included
  const size_t k = frontier.size(), m = static_cast<size_t>(max_sets);
  for (size_t j = 1; j <= m; ++j) spread.push_back(std::move(frontier[(j * k + m - 1) / m - 1]));
  return spread;
}

std::vector<std::vector<std::string>> CommonRecomputeSets(std::span<const cost::LayerProfile> layers, int per_layer) {
  std::vector<std::vector<std::string>> sets;
  if (per_layer <= 0 || layers.empty()) return sets;
  std::vector<const cost::RecomputeMenu*> menus;  // distinct ones: a stack of layers shares one
  for (const cost::LayerProfile& p : layers) {
    if (!p.recompute_menu.menu) return sets;
    const cost::RecomputeMenu* menu = p.recompute_menu.menu.get();
    if (std::none_of(menus.begin(), menus.end(), [&](const cost::RecomputeMenu* m) { return m == menu || *m == *menu; }))
      menus.push_back(menu);
  }
  const auto runs_everywhere = [&](const std::vector<std::string>& set) {
    return std::all_of(menus.begin(), menus.end(),
                       [&](const cost::RecomputeMenu* m) { return cost::PriceRecomputeSet(*m, set).ok(); });
  };
  for (const cost::RecomputeMenu* menu : menus)
    for (FrontierSet& f : RecomputeFrontier(*menu, per_layer))
      if (std::find(sets.begin(), sets.end(), f.ops) == sets.end() && runs_everywhere(f.ops))
        sets.push_back(std::move(f.ops));
  return sets;
}

}  // namespace kiwi::solve::remat
