// The fast sharding solver's search machinery: the usage segment tree, the incremental search
// state, tree-block dynamic programming (against brute force over the block) and the Lagrangian
// star bound (never above the optimum).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kiwi/solve/sharding/block_dp.h"
#include "kiwi/solve/sharding/lagrangian.h"
#include "kiwi/solve/sharding/local_search.h"
#include "kiwi/solve/sharding/reduction.h"
#include "kiwi/solve/sharding/search_state.h"
#include "kiwi/solve/sharding/usage_profile.h"
#include "sharding_test_util.h"

namespace kiwi::solve::sharding {
namespace {

using test_util::BruteForceOptimum;
using test_util::kNoReduction;
using test_util::RandomShardingProblem;

TEST(UsageProfile, MatchesAPlainArray) {
  std::mt19937_64 rng(3);
  std::vector<int64_t> plain(37);
  for (auto& v : plain) v = static_cast<int64_t>(rng() % 100);
  UsageProfile profile(plain);
  for (int step = 0; step < 2000; ++step) {
    const auto a = static_cast<int32_t>(rng() % 38), b = static_cast<int32_t>(rng() % 38);
    const int32_t first = std::min(a, b), last = std::max(a, b);
    const int64_t delta = static_cast<int64_t>(rng() % 41) - 20;
    profile.Add(first, last, delta);
    for (int32_t k = first; k < last; ++k) plain[static_cast<size_t>(k)] += delta;
    ASSERT_EQ(profile.Max(), *std::max_element(plain.begin(), plain.end()));
    if (first < last) {
      ASSERT_EQ(profile.RangeMax(first, last), *std::max_element(plain.begin() + first, plain.begin() + last));
    }
  }
  EXPECT_EQ(profile.Values(), plain);
}

TEST(SearchState, IncrementalCostAndUsageMatchAFreshEvaluation) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const ir::ShardingProblem p = RandomShardingProblem(seed, 30, 5, 0.15, 0.5);
    Result<ReducedProblem> r = ReduceShardingProblem(p, kNoReduction);
    ASSERT_TRUE(r.ok());
    Rng rng(seed);
    SearchState st(*r, std::vector<int32_t>(r->nodes.size(), 0));
    for (int step = 0; step < 300; ++step) {
      const int32_t node = rng.Below(static_cast<int32_t>(r->nodes.size()));
      st.Set(node, rng.Below(r->nodes[static_cast<size_t>(node)].strategies()));
      const ir::Evaluation e = ir::Evaluate(p, ExpandSolution(*r, st.x()));
      ASSERT_EQ(st.Cost(), e.cost);
      ASSERT_EQ(st.Peak(), e.peak_usage);
      ASSERT_EQ(st.Feasible(), e.feasible);
    }
  }
}

// The block's DP optimum equals the best of every assignment of the block, the rest held fixed.
TEST(BlockOptimizer, TreeBlockIsOptimalGivenItsBoundary) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const ir::ShardingProblem p = RandomShardingProblem(seed, 12, 3, 0.3, 0.0);
    Result<ReducedProblem> r = ReduceShardingProblem(p, kNoReduction);
    ASSERT_TRUE(r.ok());
    Rng rng(seed);
    std::vector<int32_t> x(r->nodes.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = rng.Below(r->nodes[i].strategies());
    SearchState st(*r, x);
    BlockOptimizer opt(*r);
    opt.GrowTree(rng.Below(static_cast<int32_t>(x.size())), 6, rng);
    std::vector<int32_t> proposal;
    opt.Optimize(st, nullptr, proposal);
    std::vector<int32_t> y = x;
    for (size_t i = 0; i < proposal.size(); ++i) y[static_cast<size_t>(opt.nodes()[i])] = proposal[i];
    const int64_t dp = ReducedCost(*r, y);
    int64_t best = ir::kForbiddenCost;
    std::vector<int32_t> z = x, digits(opt.nodes().size(), 0);
    for (;;) {
      for (size_t i = 0; i < digits.size(); ++i) z[static_cast<size_t>(opt.nodes()[i])] = digits[i];
      best = std::min(best, ReducedCost(*r, z));
      size_t i = 0;
      while (i < digits.size() && ++digits[i] == r->nodes[static_cast<size_t>(opt.nodes()[i])].strategies()) digits[i++] = 0;
      if (i == digits.size()) break;
    }
    if (best < ir::kForbiddenCost) {
      EXPECT_EQ(dp, best) << "seed " << seed;
    }
  }
}

TEST(BlockOptimizer, SetNodesKeepsAForest) {
  const ir::ShardingProblem p = RandomShardingProblem(5, 15, 4, 0.5, 0.0);
  Result<ReducedProblem> r = ReduceShardingProblem(p, kNoReduction);
  ASSERT_TRUE(r.ok());
  ASSERT_GE(r->nodes.size(), 8u);
  BlockOptimizer opt(*r);
  std::vector<int32_t> all(r->nodes.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
  opt.SetNodes(all);
  const std::vector<int32_t>& block = opt.nodes();
  int64_t inside = 0;  // edges with both ends in the block: a forest has fewer than its nodes
  for (const ReducedEdge& e : r->edges)
    inside += (std::count(block.begin(), block.end(), e.u) > 0 && std::count(block.begin(), block.end(), e.v) > 0) ? 1 : 0;
  EXPECT_LT(inside, static_cast<int64_t>(block.size()));
  EXPECT_GT(block.size(), 1u);
}

TEST(StarLowerBound, NeverAboveTheOptimum) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const ir::ShardingProblem p = RandomShardingProblem(seed, 7, 3, 0.4, 0.6);
    Result<ReducedProblem> r = ReduceShardingProblem(p, kNoReduction);
    ASSERT_TRUE(r.ok());
    const auto brute = BruteForceOptimum(p);
    ASSERT_TRUE(brute.has_value());
    for (double lambda : {0.0, 0.01, 1.0}) {
      std::vector<double> prices_per_segment(static_cast<size_t>(r->segments()), lambda);
      NodePrices prices;
      ComputeNodePrices(*r, prices_per_segment, prices);
      EXPECT_LE(StarLowerBound(*r, prices_per_segment, prices), static_cast<double>(brute->first) + 1e-6);
    }
  }
}

// The descent into the limit records the uniform price of the round that fitted; started from it,
// the next descent (from the same overflowing state) fits in fewer rounds.
TEST(DescendIntoLimit, StartsFromThePriceThatFittedLastTime) {
  int checked = 0, rounds_from_scratch = 0, rounds_from_fitted = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const ir::ShardingProblem p = RandomShardingProblem(seed, 60, 4, 0.05, 0.9);
    Result<ReducedProblem> r = ReduceShardingProblem(p, kNoReduction);
    ASSERT_TRUE(r.ok());
    const Deadline deadline(Deadline::Clock::now(), 60.0);
    SearchContext ctx(*r, GreedyInitialSolution(*r), deadline, seed);
    DescendPriced(ctx, nullptr, {.max_sweeps = 50, .block_size = 20});  // the cost-only optimum
    if (ctx.state.Feasible()) continue;  // the limit does not bind
    ++checked;
    const std::vector<int32_t> overflowing = ctx.state.x();
    SubgradientPrices prices(*r);
    double fitted = 0.0;
    int first = 0, second = 0;
    ASSERT_TRUE(DescendIntoLimit(ctx, prices, 20, [&] { ++first; }, &fitted)) << "seed " << seed;
    EXPECT_GT(fitted, 0.0);
    EXPECT_EQ(fitted, prices.lambda().front()) << "seed " << seed;  // the last round's price
    const double before = fitted;
    SearchContext again(*r, overflowing, deadline, seed);
    ASSERT_TRUE(DescendIntoLimit(again, prices, 20, [&] { ++second; }, &fitted)) << "seed " << seed;
    EXPECT_LE(fitted, before * std::sqrt(10.0) * 1.000001) << "seed " << seed;
    EXPECT_TRUE(ir::Evaluate(p, ExpandSolution(*r, again.state.x())).feasible) << "seed " << seed;
    rounds_from_scratch += first;
    rounds_from_fitted += second;
  }
  EXPECT_GE(checked, 5);
  EXPECT_LT(rounds_from_fitted, rounds_from_scratch);
}

// Feasible-only descent never leaves the feasible region and never raises the cost.
TEST(LocalSearch, FeasibleDescentStaysFeasible) {
  int checked = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const ir::ShardingProblem p = RandomShardingProblem(seed, 60, 4, 0.05, 0.8);
    Result<ReducedProblem> r = ReduceShardingProblem(p);
    ASSERT_TRUE(r.ok());
    const Deadline deadline(Deadline::Clock::now(), 60.0);
    // A feasible start: heavy uniform usage prices push the greedy solution within the limit.
    SearchContext ctx(*r, GreedyInitialSolution(*r), deadline, seed);
    std::vector<double> lambda(static_cast<size_t>(r->segments()), 1e3);
    NodePrices prices;
    ComputeNodePrices(*r, lambda, prices);
    DescendPriced(ctx, &prices, {.max_sweeps = 50, .block_size = 20});
    if (!ctx.state.Feasible()) continue;
    ++checked;
    const int64_t before = ctx.state.Cost();
    DescendFeasible(ctx, nullptr, {.max_sweeps = 20, .block_size = 20});
    EXPECT_TRUE(ctx.state.Feasible());
    EXPECT_LE(ctx.state.Cost(), before);
    EXPECT_TRUE(ir::Evaluate(p, ExpandSolution(*r, ctx.state.x())).feasible);
  }
  EXPECT_GE(checked, 5);
}

}  // namespace
}  // namespace kiwi::solve::sharding
