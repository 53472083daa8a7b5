// The exact sharding ILP: optimal against brute force, the usage limit respected, warm starts,
// infeasibility.
#include "kiwi/solve/sharding/ilp.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "sharding_test_util.h"

namespace kiwi::solve::sharding {
namespace {

// The cheapest feasible cost by enumeration (nullopt when none fits).
std::optional<int64_t> BruteForceOptimum(const ir::ShardingProblem& p) {
  const auto best = test_util::BruteForceOptimum(p);
  return best ? std::optional<int64_t>(best->first) : std::nullopt;
}

// Small random instances with overlapping intervals, a limit just above the smallest possible peak
// (often infeasible, unlike test_util's generator), some forbidden costs and a duplicated, reversed edge.
ir::ShardingProblem SmallRandom(uint64_t seed, int nodes) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  ir::ShardingProblem p;
  for (int i = 0; i < nodes; ++i) {
    ir::ShardingNode n;
    n.start = uniform(0, 8);
    n.end = n.start + uniform(0, 6);
    const int k = static_cast<int>(uniform(1, 3));
    for (int s = 0; s < k; ++s) {
      n.cost.push_back(uniform(0, 9) == 0 ? ir::kForbiddenCost : uniform(0, 100));
      n.usage.push_back(uniform(1, 20));
    }
    p.nodes.push_back(n);
  }
  for (int v = 1; v < nodes; ++v)
    for (int u = 0; u < v; ++u)
      if (uniform(0, 2) == 0) {
        std::vector<int64_t> m(p.nodes[static_cast<size_t>(u)].cost.size() * p.nodes[static_cast<size_t>(v)].cost.size());
        for (int64_t& c : m) c = uniform(0, 60);
        p.edges.push_back({u, v, m});
      }
  if (!p.edges.empty()) {  // the same pair again, reversed: costs add up
    ir::ShardingEdge e = p.edges.front();
    const size_t su = p.nodes[static_cast<size_t>(e.u)].cost.size(), sv = p.nodes[static_cast<size_t>(e.v)].cost.size();
    std::vector<int64_t> t(e.cost.size());
    for (size_t a = 0; a < su; ++a)
      for (size_t b = 0; b < sv; ++b) t[b * su + a] = uniform(0, 30);
    p.edges.push_back({e.v, e.u, t});
  }
  const int64_t low = ir::MinimumPeakUsage(p);
  p.usage_limit = low + uniform(0, 15);
  return p;
}

ShardingSolveOptions Exact() {
  ShardingSolveOptions o;
  o.relative_gap = 0.0;
  o.time_limit_seconds = 60;
  return o;
}

TEST(ShardingIlp, EqualsBruteForceOnRandomInstances) {
  int solved = 0, infeasible = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const ir::ShardingProblem p = SmallRandom(seed, 3 + static_cast<int>(seed % 6));
    const std::optional<int64_t> best = BruteForceOptimum(p);
    Result<ShardingResult> r = SolveShardingIlp(p, Exact());
    if (!best) {
      ASSERT_FALSE(r.ok()) << "seed " << seed;
      EXPECT_EQ(r.error().code, ErrorCode::kInfeasible) << r.error().message;
      ++infeasible;
      continue;
    }
    ASSERT_TRUE(r.ok()) << "seed " << seed << ": " << r.error().message;
    EXPECT_TRUE(r->evaluation.feasible) << "seed " << seed;
    EXPECT_EQ(r->evaluation.cost, *best) << "seed " << seed;
    EXPECT_TRUE(r->optimal);
    ASSERT_TRUE(r->lower_bound.has_value());
    EXPECT_EQ(*r->lower_bound, *best);
    ++solved;
  }
  EXPECT_GT(solved, 25);  // the generator must exercise both outcomes
  EXPECT_GT(infeasible + solved, 39);
}

TEST(ShardingIlp, SolvesTheContestExample) {
  ir::ShardingProblem p;
  p.nodes = {{30, 70, {15}, {10}}, {40, 70, {55, 65}, {25, 25}}, {50, 120, {25, 45, 35}, {15, 20, 15}},
             {110, 140, {85, 75}, {10, 10}}, {110, 150, {95}, {15}}};
  p.edges = {{0, 1, {30, 40}}, {0, 2, {50, 10, 40}}, {1, 3, {90, 10, 20, 80}}, {2, 4, {60, 20, 30}}, {3, 4, {70, 60}}};
  p.usage_limit = 50;
  Result<ShardingResult> r = SolveShardingIlp(p, Exact());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->evaluation.cost, *BruteForceOptimum(p));
  EXPECT_LE(r->evaluation.peak_usage, 50);
}

TEST(ShardingIlp, TheUsageLimitChangesTheAnswer) {
  // Two nodes live together; the cheap strategies use too much memory together.
  ir::ShardingProblem p;
  p.nodes = {{0, 2, {1, 10}, {8, 2}}, {1, 3, {1, 20}, {8, 2}}};
  p.usage_limit = 16;
  Result<ShardingResult> loose = SolveShardingIlp(p, Exact());
  ASSERT_TRUE(loose.ok());
  EXPECT_EQ(loose->evaluation.cost, 2);
  p.usage_limit = 10;
  Result<ShardingResult> tight = SolveShardingIlp(p, Exact());
  ASSERT_TRUE(tight.ok());
  EXPECT_EQ(tight->evaluation.cost, 11);  // node 0 moves to its small strategy
  EXPECT_EQ(tight->solution, (ir::Solution{1, 0}));
  p.usage_limit = 3;
  Result<ShardingResult> none = SolveShardingIlp(p, Exact());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, ErrorCode::kInfeasible);
}

TEST(ShardingIlp, AcceptsAWarmStartAndReportsIncumbents) {
  uint64_t seed = 100;
  while (!BruteForceOptimum(SmallRandom(seed, 8))) ++seed;
  const ir::ShardingProblem p = SmallRandom(seed, 8);
  const std::optional<int64_t> best = BruteForceOptimum(p);
  ShardingSolveOptions o = Exact();
  Result<ShardingResult> cold = SolveShardingIlp(p, o);
  ASSERT_TRUE(cold.ok());
  o.warm_start = cold->solution;
  o.on_incumbent = [&](int64_t cost, double) { EXPECT_GE(cost, *best); };
  Result<ShardingResult> warm = SolveShardingIlp(p, o);
  ASSERT_TRUE(warm.ok());
  EXPECT_EQ(warm->evaluation.cost, *best);
}

}  // namespace
}  // namespace kiwi::solve::sharding
