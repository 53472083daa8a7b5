#pragma once
// Helpers shared by the sharding solver tests: a seeded random instance generator, a brute-force
// optimum for tiny instances and random Lagrangian prices.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "assignment_odometer.h"
#include "kiwi/ir/sharding_problem.h"
#include "kiwi/solve/sharding/block_dp.h"
#include "kiwi/solve/sharding/reduction.h"

namespace kiwi::solve::sharding::test_util {

// A random problem with `nodes` nodes of 1..max_strategies strategies (costs 0..100, usages 1..50,
// live intervals inside [0, 2 * nodes), about one node in eight never live), an edge between each
// pair of nodes with probability `edge_density` (costs 0..60; about one in ten edges repeated, half of
// those reversed), and about 5% forbidden (ir::kForbiddenCost) node and edge entries. A hidden
// witness solution avoids every forbidden entry, so the problem is always feasible; the usage limit
// is the witness's peak plus (1 - limit_tightness) of the way to the peak with every node at its
// largest usage: limit_tightness = 1 makes the limit as tight as the witness allows, 0 makes it slack.
inline ir::ShardingProblem RandomShardingProblem(uint64_t seed, int nodes, int max_strategies, double edge_density,
                                                 double limit_tightness) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
  auto chance = [&](double p) { return static_cast<double>(rng() % 1'000'000) < p * 1e6; };
  ir::ShardingProblem p;
  p.name = "random";
  std::vector<int32_t> witness;
  const int64_t horizon = 2 * static_cast<int64_t>(nodes);
  for (int i = 0; i < nodes; ++i) {
    ir::ShardingNode node;
    const auto strategies = static_cast<int32_t>(uniform(1, max_strategies));
    node.start = uniform(0, horizon - 1);
    node.end = chance(0.125) ? node.start : std::min(horizon, node.start + uniform(1, std::max<int64_t>(2, nodes / 2)));
    for (int32_t s = 0; s < strategies; ++s) {
      node.cost.push_back(chance(0.05) ? ir::kForbiddenCost : uniform(0, 100));
      node.usage.push_back(uniform(1, 50));
    }
    witness.push_back(static_cast<int32_t>(uniform(0, strategies - 1)));
    if (node.cost[static_cast<size_t>(witness.back())] >= ir::kForbiddenCost) node.cost[static_cast<size_t>(witness.back())] = uniform(0, 100);
    p.nodes.push_back(std::move(node));
  }
  for (int u = 0; u < nodes; ++u)
    for (int v = u + 1; v < nodes; ++v) {
      if (!chance(edge_density)) continue;
      for (int copy = 0; copy < (chance(0.1) ? 2 : 1); ++copy) {
        const bool flip = copy == 1 && chance(0.5);
        ir::ShardingEdge e{flip ? v : u, flip ? u : v, {}};
        const size_t su = p.nodes[static_cast<size_t>(e.u)].cost.size(), sv = p.nodes[static_cast<size_t>(e.v)].cost.size();
        for (size_t k = 0; k < su * sv; ++k) e.cost.push_back(chance(0.05) ? ir::kForbiddenCost : uniform(0, 60));
        e.cost[static_cast<size_t>(witness[static_cast<size_t>(e.u)]) * sv + static_cast<size_t>(witness[static_cast<size_t>(e.v)])] =
            uniform(0, 60);
        p.edges.push_back(std::move(e));
      }
    }
  const int64_t witness_peak = ir::Evaluate(p, witness).peak_usage;
  ir::Solution largest(static_cast<size_t>(nodes), 0);
  for (size_t i = 0; i < largest.size(); ++i)
    largest[i] = static_cast<int32_t>(std::max_element(p.nodes[i].usage.begin(), p.nodes[i].usage.end()) - p.nodes[i].usage.begin());
  const int64_t most = std::max(witness_peak, ir::Evaluate(p, largest).peak_usage);
  p.usage_limit = witness_peak + static_cast<int64_t>((1.0 - limit_tightness) * static_cast<double>(most - witness_peak));
  return p;
}

// The optimum by enumerating every solution (tiny problems only): cost and one optimal solution, or
// std::nullopt when nothing is feasible.
inline std::optional<std::pair<int64_t, ir::Solution>> BruteForceOptimum(const ir::ShardingProblem& p) {
  std::vector<int32_t> sizes;
  for (const auto& node : p.nodes) sizes.push_back(node.strategies());
  std::optional<std::pair<int64_t, ir::Solution>> best;
  kiwi::test_util::ForEachAssignment(sizes, [&](const ir::Solution& x) {
    const ir::Evaluation e = ir::Evaluate(p, x);
    if (e.feasible && (!best || e.cost < best->first)) best = std::make_pair(e.cost, x);
  });
  return best;
}

// Only the merges every reduction keeps: the reduced problem has the original's nodes.
inline constexpr ReductionOptions kNoReduction{.fold_leaves = false, .merge_followers = false, .series = false, .dominance = false};

// Seeded prices per reduced node and strategy, 0..108 in steps of 1/37 (not integers: rounding shows).
inline NodePrices RandomPrices(const ReducedProblem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  NodePrices prices(p.nodes.size());
  for (size_t r = 0; r < p.nodes.size(); ++r)
    for (int32_t s = 0; s < p.nodes[r].strategies(); ++s) prices[r].push_back(static_cast<double>(rng() % 4000) / 37.0);
  return prices;
}

}  // namespace kiwi::solve::sharding::test_util
