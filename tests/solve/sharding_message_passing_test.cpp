// Message passing's bound (solve/sharding/message_passing.h): never above the brute-force optimum of
// the priced problem, exact on trees, still valid when the prices change under kept messages; and
// through LagrangianBound (lagrangian.h) never above the constrained optimum.
#include "kiwi/solve/sharding/message_passing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kiwi/solve/sharding/lagrangian.h"
#include "sharding_test_util.h"

namespace kiwi::solve::sharding {
namespace {

using test_util::BruteForceOptimum;
using test_util::kNoReduction;
using test_util::RandomPrices;
using test_util::RandomShardingProblem;

size_t Z(int64_t i) { return static_cast<size_t>(i); }

// min over x of ReducedCost(x) - constant + prices(x), by enumeration; forbidden entries excluded.
double BruteForcePriced(const ReducedProblem& p, const NodePrices& prices) {
  std::vector<int32_t> sizes;
  for (const auto& node : p.nodes) sizes.push_back(node.strategies());
  double best = std::numeric_limits<double>::infinity();
  kiwi::test_util::ForEachAssignment(sizes, [&](const std::vector<int32_t>& x) {
    const int64_t cost = ReducedCost(p, x);
    if (cost >= ir::kForbiddenCost) return;
    double value = static_cast<double>(cost - p.constant_cost);
    for (size_t r = 0; r < x.size() && !prices.empty(); ++r) value += prices[r][Z(x[r])];
    best = std::min(best, value);
  });
  return best;
}

ReducedProblem Core(const ir::ShardingProblem& problem) {
  Result<ReducedProblem> p = ReduceShardingProblem(problem, kNoReduction);
  EXPECT_TRUE(p.ok()) << p.error().message;
  return *p;
}

// A random problem's core, without its usage limit (message passing ignores usage).
ReducedProblem UnlimitedCore(uint64_t seed, int nodes, int max_strategies, double edge_density) {
  ir::ShardingProblem problem = RandomShardingProblem(seed, nodes, max_strategies, edge_density, 0.0);
  problem.usage_limit = ir::kNoUsageLimit;
  return Core(problem);
}

// A random tree: node i > 0 hangs under an earlier node; costs 0..999, nothing forbidden.
ir::ShardingProblem RandomTree(uint64_t seed, int nodes, int strategies) {
  std::mt19937_64 rng(seed);
  ir::ShardingProblem p;
  for (int i = 0; i < nodes; ++i) {
    ir::ShardingNode node;
    for (int s = 0; s < strategies; ++s) {
      node.cost.push_back(static_cast<int64_t>(rng() % 1000));
      node.usage.push_back(1);
    }
    p.nodes.push_back(node);
    if (i == 0) continue;
    ir::ShardingEdge e{static_cast<int32_t>(rng() % static_cast<uint64_t>(i)), i, {}};
    for (int k = 0; k < strategies * strategies; ++k) e.cost.push_back(static_cast<int64_t>(rng() % 1000));
    p.edges.push_back(e);
  }
  return p;
}

TEST(MessagePassing, BoundIsBelowTheOptimumOnLoopyCoresAndRisesWithSweeps) {
  int rose = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const ReducedProblem core = UnlimitedCore(900 + seed, 8, 4, 0.6);
    const NodePrices prices = seed % 2 == 0 ? RandomPrices(core, seed) : NodePrices{};
    const double optimum = BruteForcePriced(core, prices);
    MessagePassing mp(core);
    mp.SetPrices(prices);
    const MessagePassingBound first = mp.LowerBound(0.0);
    EXPECT_GE(first.sweeps, 1);
    const MessagePassingBound more = mp.LowerBound(0.05);
    EXPECT_LE(first.lower_bound, optimum + 1e-6) << "seed " << seed;
    EXPECT_LE(more.lower_bound, optimum + 1e-6) << "seed " << seed;
    rose += more.lower_bound > first.lower_bound ? 1 : 0;
  }
  EXPECT_GE(rose, 1) << "more sweeps should raise the bound somewhere";
}

TEST(MessagePassing, ExactOnTreesAlsoAfterThePricesChange) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const ReducedProblem core = Core(RandomTree(seed, 9, 4));
    MessagePassing mp(core);
    const double optimum = BruteForcePriced(core, {});
    EXPECT_NEAR(mp.LowerBound(1.0).lower_bound, optimum, 1e-9 * optimum) << "seed " << seed;
    const NodePrices prices = RandomPrices(core, seed);
    mp.SetPrices(prices);  // the messages of the unpriced problem stay: a warm start, still exact
    EXPECT_NEAR(mp.LowerBound(1.0).lower_bound, BruteForcePriced(core, prices), 1e-9 * optimum) << "seed " << seed;
  }
}

// Reparametrised terms (what toulbar2 is given on large cores) keep every assignment's cost, and
// their minima sum to the bound.
TEST(MessagePassing, ReparametrisedTermsKeepEveryAssignmentsCost) {
  int checked = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const ReducedProblem core = UnlimitedCore(600 + seed, 12, 5, 0.4);
    const NodePrices prices = RandomPrices(core, seed);
    MessagePassing mp(core);
    mp.SetPrices(prices);
    const double bound = mp.LowerBound(0.05).lower_bound;
    std::vector<std::vector<double>> edge_terms, node_terms;
    mp.Reparametrised(edge_terms, node_terms);
    ASSERT_EQ(edge_terms.size(), core.edges.size());
    ASSERT_EQ(node_terms.size(), core.nodes.size());
    double minima = 0.0;
    for (const auto& t : edge_terms) minima += *std::min_element(t.begin(), t.end());
    for (const auto& t : node_terms) minima += t.empty() ? 0.0 : *std::min_element(t.begin(), t.end());
    EXPECT_NEAR(minima, bound, 1e-9 * std::abs(bound) + 1e-6) << "seed " << seed;
    std::mt19937_64 rng(seed);
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<int32_t> x(core.nodes.size());
      for (size_t r = 0; r < x.size(); ++r) x[r] = static_cast<int32_t>(rng() % static_cast<uint64_t>(core.nodes[r].strategies()));
      const int64_t cost = ReducedCost(core, x);
      if (cost >= ir::kForbiddenCost) continue;
      double expected = static_cast<double>(cost - core.constant_cost), terms = 0.0;
      for (size_t r = 0; r < x.size(); ++r) {
        expected += prices[r][Z(x[r])];
        if (!node_terms[r].empty()) terms += node_terms[r][Z(x[r])];
      }
      for (size_t e = 0; e < core.edges.size(); ++e) {
        const size_t sv = Z(core.nodes[Z(core.edges[e].v)].strategies());
        terms += edge_terms[e][Z(x[Z(core.edges[e].u)]) * sv + Z(x[Z(core.edges[e].v)])];
      }
      EXPECT_NEAR(terms, expected, 1e-9 * expected + 1e-6) << "seed " << seed;
      ++checked;
    }
  }
  EXPECT_GE(checked, 20) << "too few assignments without a forbidden entry";
}

// The bound through LagrangianBound at random multipliers is a bound on the constrained optimum.
TEST(MessagePassing, LagrangianBoundIsBelowTheConstrainedOptimum) {
  int useful = 0;
  for (uint64_t seed = 1; seed <= 25; ++seed) {
    const ir::ShardingProblem problem = RandomShardingProblem(300 + seed, 8, 4, 0.5, 0.8);
    const std::optional<std::pair<int64_t, ir::Solution>> best = BruteForceOptimum(problem);
    ASSERT_TRUE(best.has_value());
    Result<ReducedProblem> p = ReduceShardingProblem(problem, kNoReduction);
    ASSERT_TRUE(p.ok()) << p.error().message;
    std::mt19937_64 rng(seed);
    std::vector<double> lambda(Z(p->segments()));
    for (double& l : lambda) l = static_cast<double>(rng() % 100) / 50.0;
    NodePrices prices;
    ComputeNodePrices(*p, lambda, prices);
    MessagePassing mp(*p);
    mp.SetPrices(prices);
    const double bound = LagrangianBound(*p, lambda, mp.LowerBound(0.05).lower_bound);
    EXPECT_LE(bound, static_cast<double>(best->first) + 1e-6) << "seed " << seed;
    useful += bound > StarLowerBound(*p, lambda, prices) ? 1 : 0;
  }
  EXPECT_GE(useful, 5) << "message passing should beat the star bound on some problems";
}

}  // namespace
}  // namespace kiwi::solve::sharding
