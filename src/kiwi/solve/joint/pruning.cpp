// Strategy dominance (pruning.h): compares each pair of strategies of a node on its own cost and
// memory and on the rows / columns of its edge matrices.
#include "kiwi/solve/joint/pruning.h"

#include <cstddef>

namespace kiwi::solve::joint {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

struct Incidence {
  std::vector<std::vector<int32_t>> in, out;  // edge indices per node
};

Incidence MakeIncidence(const ir::ShardingProblem& p) {
  Incidence inc{std::vector<std::vector<int32_t>>(p.nodes.size()), std::vector<std::vector<int32_t>>(p.nodes.size())};
  for (size_t e = 0; e < p.edges.size(); ++e) {
    inc.in[Z(p.edges[e].v)].push_back(static_cast<int32_t>(e));
    inc.out[Z(p.edges[e].u)].push_back(static_cast<int32_t>(e));
  }
  return inc;
}

// Compares a <= b entrywise; records whether some entry is strictly smaller. False as soon as a > b.
struct Comparison {
  bool strict = false;
  bool Le(int64_t a, int64_t b) {
    if (a > b) return false;
    strict = strict || a < b;
    return true;
  }
};

// Whether strategy `better` of node i dominates strategy `worse` (see the header).
bool Dominates(const ir::ShardingProblem& p, const Incidence& inc, size_t i, int32_t better, int32_t worse) {
  const ir::ShardingNode& n = p.nodes[i];
  Comparison c;
  if (!c.Le(n.cost[Z(better)], n.cost[Z(worse)]) || !c.Le(n.usage[Z(better)], n.usage[Z(worse)])) return false;
  const size_t k = n.cost.size();
  for (int32_t e : inc.in[i]) {  // column `better` vs column `worse` of u -> i
    const ir::ShardingEdge& edge = p.edges[Z(e)];
    const size_t su = p.nodes[Z(edge.u)].cost.size();
    for (size_t a = 0; a < su; ++a)
      if (!c.Le(edge.cost[a * k + Z(better)], edge.cost[a * k + Z(worse)])) return false;
  }
  for (int32_t e : inc.out[i]) {  // row `better` vs row `worse` of i -> v
    const ir::ShardingEdge& edge = p.edges[Z(e)];
    const size_t sv = p.nodes[Z(edge.v)].cost.size();
    for (size_t b = 0; b < sv; ++b)
      if (!c.Le(edge.cost[Z(better) * sv + b], edge.cost[Z(worse) * sv + b])) return false;
  }
  return c.strict || better < worse;
}

}  // namespace

std::vector<std::vector<int32_t>> UndominatedStrategies(const ir::ShardingProblem& problem) {
  const Incidence inc = MakeIncidence(problem);
  std::vector<std::vector<int32_t>> kept(problem.nodes.size());
  for (size_t i = 0; i < problem.nodes.size(); ++i) {
    const auto k = static_cast<int32_t>(problem.nodes[i].cost.size());
    for (int32_t worse = 0; worse < k; ++worse) {
      bool dominated = false;
      for (int32_t better = 0; better < k && !dominated; ++better)
        dominated = better != worse && Dominates(problem, inc, i, better, worse);
      if (!dominated) kept[i].push_back(worse);
    }
  }
  return kept;
}

}  // namespace kiwi::solve::joint
