#pragma once
// Exact simplification of an ir::ShardingProblem before search (issue 4, part 4). Every step keeps
// at least one optimal solution of the memory-constrained problem:
//  - parallel and reversed edges merge (costs add); strategies with a forbidden node cost, or with a
//    forbidden cost against every remaining strategy of some neighbour, are removed (arc consistency);
//  - a strategy dominated by another (node cost, every usage and every incident edge row all <=) is
//    removed;
//  - a node left with one strategy is fixed: its edges become node costs of its neighbours;
//  - a node whose strategy a neighbour's determines (every allowed strategy of the neighbour has
//    exactly one allowed entry in the edge's row: "must follow") merges into that neighbour;
//  - a leaf (one neighbour u) folds into u when, for every strategy of u, one choice of the leaf is
//    both cheapest and least in usage at every time (checked per usage interval): u then carries the
//    leaf's cost and, as an extra usage interval, its usage. On the contest instances nearly every
//    leaf qualifies, so a reduced node may carry many usage intervals ("terms");
//  - a node of degree 2 without varying usage is eliminated into an edge between its neighbours
//    (series reduction, min-sum over its strategies).
// Time is compressed to segments between distinct interval ends (the usage is constant on each).
//
//   Result<ReducedProblem> r = ReduceShardingProblem(problem);
//   std::vector<int32_t> x(r->nodes.size(), 0);          // a reduced solution
//   ir::Solution s = ExpandSolution(*r, x);             // cost(s) = ReducedCost(*r, x)
#include <cstdint>
#include <vector>

#include "kiwi/ir/sharding_problem.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::sharding {

// Usage of one original node over segments [first, last), per strategy of its reduced node.
// Priced objectives count each forbidden entry as this finite value, so sums stay finite and exact
// enough (costs on the contest instances are below 1e12).
inline constexpr double kForbiddenPriced = 1e15;

struct UsageTerm {
  int32_t first = 0;
  int32_t last = 0;
  std::vector<int64_t> usage;
};

// One edge incident to a reduced node; ReducedProblem::Matrix gives its costs laid out
// [s_neighbor * S_self + s_self].
struct Incidence {
  int32_t neighbor = 0;
  int32_t edge = 0;
  bool self_is_u = false;          // this node is the edge's u: read the transpose
};

struct ReducedNode {
  std::vector<int64_t> cost;       // per strategy (folded leaves and fixed neighbours included)
  std::vector<UsageTerm> terms;    // usage intervals whose usage depends on the strategy
  std::vector<Incidence> incident;
  int32_t strategies() const { return static_cast<int32_t>(cost.size()); }
};

struct ReducedEdge {
  int32_t u = 0;
  int32_t v = 0;
  std::vector<int64_t> cost;       // S_u x S_v, cost[s_u * S_v + s_v]
  std::vector<int64_t> cost_t;     // S_v x S_u (the transpose), so both ends read rows
  std::vector<double> priced;      // cost and cost_t as doubles, forbidden = kForbiddenPriced,
  std::vector<double> priced_t;    // for the dynamic programs
};

// How eliminated original nodes get their strategy back (applied in reverse order).
struct ExpansionStep {
  enum class Kind : uint8_t { kFixed, kFold, kSeries } kind = Kind::kFixed;
  int32_t node = 0;                // the original node decided by this step
  int32_t a = -1;                  // kFold: the parent; kSeries: first neighbour
  int32_t b = -1;                  // kSeries: second neighbour
  int32_t b_strategies = 0;        // kSeries: |S_b| (original strategy count)
  std::vector<int32_t> table;      // kFixed: {s}; kFold: [s_a]; kSeries: [s_a * |S_b| + s_b]
};

struct ReductionStats {
  int32_t fixed = 0, folded = 0, merged_nodes = 0, series = 0, dominated = 0, dead = 0, merged_edges = 0;
};

struct ReducedProblem {
  std::vector<ReducedNode> nodes;
  std::vector<ReducedEdge> edges;
  std::vector<int64_t> segment_start;  // segment k = [segment_start[k], segment_start[k + 1])
  std::vector<int64_t> base_usage;     // per segment: usage no remaining choice changes
  int64_t usage_limit = ir::kNoUsageLimit;
  int64_t constant_cost = 0;           // cost of fixed nodes and their mutual edges
  // Expansion: reduced node r is original node original[r], strategy k is original strategy
  // strategy_of[r][k]; then `steps` in reverse decide the eliminated nodes.
  std::vector<int32_t> original;
  std::vector<std::vector<int32_t>> strategy_of;
  std::vector<ExpansionStep> steps;
  int32_t original_nodes = 0;
  ReductionStats stats;

  int32_t segments() const { return static_cast<int32_t>(base_usage.size()); }
  const int64_t* Matrix(const Incidence& in) const {
    const ReducedEdge& e = edges[static_cast<size_t>(in.edge)];
    return in.self_is_u ? e.cost_t.data() : e.cost.data();
  }
  const double* PricedMatrix(const Incidence& in) const {
    const ReducedEdge& e = edges[static_cast<size_t>(in.edge)];
    return in.self_is_u ? e.priced_t.data() : e.priced.data();
  }
  // The same edge seen from the neighbour: laid out [s_self * S_neighbor + s_neighbor].
  const int64_t* MatrixFromNeighbor(const Incidence& in) const {
    const ReducedEdge& e = edges[static_cast<size_t>(in.edge)];
    return in.self_is_u ? e.cost.data() : e.cost_t.data();
  }
};

struct ReductionOptions {
  bool fold_leaves = true;
  bool merge_followers = true;
  bool series = true;
  bool dominance = true;
  int64_t max_series_work = 4'000'000;     // |S_a| * |S_b| * |S_v| per series elimination
  int64_t max_dominance_work = 50'000'000;  // per node and pass: strategy pairs x row length
};

// kInfeasible when some node has no strategy left or the usage limit is below the least usage the
// remaining strategies allow; kBadInput when the problem fails ir::ValidateShardingProblem.
Result<ReducedProblem> ReduceShardingProblem(const ir::ShardingProblem& problem,
                                             const ReductionOptions& options = {});

// The original solution a reduced solution stands for (x[r] in [0, nodes[r].strategies())).
ir::Solution ExpandSolution(const ReducedProblem& reduced, const std::vector<int32_t>& x);

// constant_cost + node costs + edge costs of a reduced solution, saturating at ir::kForbiddenCost.
int64_t ReducedCost(const ReducedProblem& reduced, const std::vector<int32_t>& x);

// Per-segment usage of a reduced solution (base included).
std::vector<int64_t> ReducedUsage(const ReducedProblem& reduced, const std::vector<int32_t>& x);

}  // namespace kiwi::solve::sharding
