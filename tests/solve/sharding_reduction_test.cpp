// Exact reductions of the sharding problem (solve/sharding/reduction.h): every reduced solution
// expands to an original solution of the same cost and usage, and the reduced optimum is the
// original optimum, for every reduction alone and all together.
#include "kiwi/solve/sharding/reduction.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "sharding_test_util.h"

namespace kiwi::solve::sharding {
namespace {

using test_util::BruteForceOptimum;
using test_util::RandomShardingProblem;

// Every reduced solution, by enumeration: visit(x).
template <typename Visit>
void ForEachReducedSolution(const ReducedProblem& r, Visit visit) {
  std::vector<int32_t> x(r.nodes.size(), 0);
  for (;;) {
    visit(x);
    size_t i = 0;
    while (i < x.size() && ++x[i] == r.nodes[i].strategies()) x[i++] = 0;
    if (i == x.size()) return;
  }
}

std::optional<int64_t> ReducedOptimum(const ReducedProblem& r) {
  std::optional<int64_t> best;
  ForEachReducedSolution(r, [&](const std::vector<int32_t>& x) {
    const int64_t cost = ReducedCost(r, x);
    const std::vector<int64_t> usage = ReducedUsage(r, x);
    const bool fits = std::all_of(usage.begin(), usage.end(), [&](int64_t u) { return u <= r.usage_limit; });
    if (cost < ir::kForbiddenCost && fits && (!best || cost < *best)) best = cost;
  });
  return best;
}

std::vector<ReductionOptions> EachReduction() {
  ReductionOptions none{.fold_leaves = false, .merge_followers = false, .series = false, .dominance = false};
  std::vector<ReductionOptions> all = {none, none, none, none, none, ReductionOptions{}};
  all[1].fold_leaves = true;
  all[2].merge_followers = true;
  all[3].series = true;
  all[4].dominance = true;
  return all;
}

TEST(ShardingReduction, ReducedSolutionsExpandWithTheSameCostAndPeak) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const ir::ShardingProblem p = RandomShardingProblem(seed, 7, 3, 0.35, 0.3);
    Result<ReducedProblem> r = ReduceShardingProblem(p);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ForEachReducedSolution(*r, [&](const std::vector<int32_t>& x) {
      const ir::Evaluation e = ir::Evaluate(p, ExpandSolution(*r, x));
      ASSERT_TRUE(e.valid) << "seed " << seed;
      ASSERT_EQ(e.cost, ReducedCost(*r, x)) << "seed " << seed;
      if (e.cost >= ir::kForbiddenCost) return;  // a forbidden choice may expand eliminated nodes anyhow
      const std::vector<int64_t> usage = ReducedUsage(*r, x);
      ASSERT_EQ(e.peak_usage, usage.empty() ? 0 : *std::max_element(usage.begin(), usage.end())) << "seed " << seed;
    });
  }
}

TEST(ShardingReduction, EachReductionKeepsTheOptimum) {
  int reduced_somewhere = 0;
  for (uint64_t seed = 1; seed <= 80; ++seed) {
    const double tightness = 0.25 * static_cast<double>(seed % 5);
    const ir::ShardingProblem p = RandomShardingProblem(seed, 7, 3, 0.3, tightness);
    const auto brute = BruteForceOptimum(p);
    ASSERT_TRUE(brute.has_value()) << "the generator guarantees a feasible witness";
    for (const ReductionOptions& options : EachReduction()) {
      Result<ReducedProblem> r = ReduceShardingProblem(p, options);
      ASSERT_TRUE(r.ok()) << r.error().message;
      reduced_somewhere += r->nodes.size() < p.nodes.size() ? 1 : 0;
      const std::optional<int64_t> reduced = ReducedOptimum(*r);
      ASSERT_TRUE(reduced.has_value()) << "seed " << seed;
      EXPECT_EQ(*reduced, brute->first) << "seed " << seed;
    }
  }
  EXPECT_GT(reduced_somewhere, 100);  // the reductions do fire on these instances
}

// A chain 0 - 1 - 2 without usage: everything folds away; the optimum is picked by hand.
TEST(ShardingReduction, ChainWithoutUsageFoldsCompletely) {
  ir::ShardingProblem p;
  for (int i = 0; i < 3; ++i) p.nodes.push_back({0, 0, {10, 20}, {1, 1}});
  p.edges.push_back({0, 1, {0, 50, 50, 0}});
  p.edges.push_back({1, 2, {5, 0, 0, 100}});
  // Best: (0, 0, 1): 10 + 10 + 20 + 0 + 0 = 40; (0, 0, 0) = 35 is better: 30 + 0 + 5.
  Result<ReducedProblem> r = ReduceShardingProblem(p);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->nodes.empty());
  const ir::Solution s = ExpandSolution(*r, {});
  EXPECT_EQ(ir::Evaluate(p, s).cost, 35);
  EXPECT_EQ(r->constant_cost, 35);
}

// Node 1 must follow node 0 (one allowed entry per row): it merges into 0, carrying its usage
// interval, and its edge to node 2 becomes an edge of node 0. With the limit at 11 the cheapest
// choice (0, 1, 1) = 1 + 3 + 0 + 0 + 0 = 4 peaks at 12, so the optimum is (1, 0, 1) = 2 + 1 + 0 + 0 + 3 = 6.
TEST(ShardingReduction, FollowerMergesWithItsUsage) {
  ir::ShardingProblem p;
  p.nodes.push_back({0, 4, {1, 2}, {10, 5}});
  p.nodes.push_back({6, 9, {1, 3}, {8, 1}});
  p.nodes.push_back({0, 9, {0, 0}, {7, 2}});
  constexpr int64_t F = ir::kForbiddenCost;
  p.edges.push_back({0, 1, {F, 0, 0, F}});   // s1 = 1 - s0
  p.edges.push_back({1, 2, {0, 3, 3, 0}});
  p.usage_limit = 11;
  ReductionOptions merge_only{.fold_leaves = false, .merge_followers = true, .series = false, .dominance = false};
  Result<ReducedProblem> r = ReduceShardingProblem(p, merge_only);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stats.merged_nodes, 1);
  ASSERT_EQ(r->nodes.size(), 2u);
  EXPECT_EQ(r->nodes[0].terms.size(), 2u);
  EXPECT_EQ(r->edges.size(), 1u);
  EXPECT_EQ(ReducedOptimum(*r), 6);
  EXPECT_EQ(BruteForceOptimum(p)->first, 6);
}

TEST(ShardingReduction, LimitBelowTheLeastUsageIsInfeasible) {
  ir::ShardingProblem p;
  p.nodes.push_back({0, 2, {1, 1}, {5, 7}});
  p.nodes.push_back({1, 3, {1, 1}, {6, 9}});
  p.edges.push_back({0, 1, {0, 0, 0, 0}});
  p.usage_limit = 10;  // 5 + 6 = 11 at t = 1
  Result<ReducedProblem> r = ReduceShardingProblem(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInfeasible);
}

TEST(ShardingReduction, NodeWithOnlyForbiddenChoicesIsInfeasible) {
  ir::ShardingProblem p;
  p.nodes.push_back({0, 2, {1, 1}, {5, 7}});
  p.nodes.push_back({1, 3, {1, 1}, {6, 9}});
  p.edges.push_back({0, 1, {ir::kForbiddenCost, ir::kForbiddenCost, ir::kForbiddenCost, ir::kForbiddenCost}});
  Result<ReducedProblem> r = ReduceShardingProblem(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInfeasible);
}

}  // namespace
}  // namespace kiwi::solve::sharding
