// Exact methods on reduced cores (solve/sharding/core_ilp.h): enumeration and the reduced ILP with
// lazily generated usage rows both reach the brute-force optimum; an answer the rows stopped short
// of comes back for the repair (lagrangian.h's DescendIntoLimit).
#include "kiwi/solve/sharding/core_ilp.h"

#include <gtest/gtest.h>

#include "kiwi/solve/sharding/lagrangian.h"
#include "kiwi/solve/sharding/local_search.h"
#include "sharding_test_util.h"

namespace kiwi::solve::sharding {
namespace {

using test_util::BruteForceOptimum;
using test_util::kNoReduction;
using test_util::RandomShardingProblem;

TEST(CoreIlp, EnumerationAndIlpEqualBruteForce) {
  int binding = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const ir::ShardingProblem p = RandomShardingProblem(300 + seed, 7, 3, 0.4, 0.9);
    const auto brute = BruteForceOptimum(p);
    ASSERT_TRUE(brute.has_value());
    Result<ReducedProblem> r = ReduceShardingProblem(p, kNoReduction);
    ASSERT_TRUE(r.ok());
    const std::optional<ExactResult> e = EnumerateReduced(*r, 1'000'000);
    ASSERT_TRUE(e.has_value());
    ASSERT_FALSE(e->x.empty());
    EXPECT_EQ(e->cost, brute->first) << "seed " << seed;
    // No warm start: the first ILP has no usage rows; rows are added where its answer overflows.
    const std::optional<ExactResult> ilp = SolveReducedIlp(*r, {}, {.time_limit_seconds = 30});
    ASSERT_TRUE(ilp.has_value());
    ASSERT_TRUE(ilp->optimal);
    ASSERT_FALSE(ilp->x.empty());
    EXPECT_EQ(ilp->cost, brute->first) << "seed " << seed;
    EXPECT_TRUE(ir::Evaluate(p, ExpandSolution(*r, ilp->x)).feasible);
    EXPECT_LE(ilp->lower_bound, static_cast<double>(brute->first) + 1e-6);
    ir::ShardingProblem loose = p;
    loose.usage_limit = ir::kNoUsageLimit;
    binding += BruteForceOptimum(loose)->first < brute->first ? 1 : 0;
  }
  EXPECT_GE(binding, 5);  // the usage rows matter on these instances
}

TEST(CoreIlp, WarmStartIsKeptWhenOptimal) {
  const ir::ShardingProblem p = RandomShardingProblem(77, 7, 3, 0.4, 0.8);
  Result<ReducedProblem> r = ReduceShardingProblem(p, kNoReduction);
  ASSERT_TRUE(r.ok());
  const std::optional<ExactResult> e = EnumerateReduced(*r, 1'000'000);
  ASSERT_TRUE(e.has_value() && !e->x.empty());
  const std::optional<ExactResult> ilp = SolveReducedIlp(*r, e->x, {.time_limit_seconds = 30});
  ASSERT_TRUE(ilp.has_value() && ilp->optimal);
  EXPECT_EQ(ilp->cost, e->cost);
}

// Where the rows run out before an answer fits (here: one CBC solve, without rows), the last answer
// comes back as `overflowing`: over the limit, no costlier than the optimum, and the priced descent
// repairs it into a solution that fits.
TEST(CoreIlp, AnOverflowingLastAnswerComesBackAndIsRepaired) {
  int binding = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const ir::ShardingProblem p = RandomShardingProblem(300 + seed, 7, 3, 0.4, 0.9);
    ir::ShardingProblem loose = p;
    loose.usage_limit = ir::kNoUsageLimit;
    const auto brute = BruteForceOptimum(p);
    ASSERT_TRUE(brute.has_value());
    if (BruteForceOptimum(loose)->first == brute->first) continue;  // the rows do not bind
    ++binding;
    Result<ReducedProblem> r = ReduceShardingProblem(p, kNoReduction);
    ASSERT_TRUE(r.ok());
    const std::optional<ExactResult> one = SolveReducedIlp(*r, {}, {.time_limit_seconds = 30, .max_rounds = 1});
    ASSERT_TRUE(one.has_value());
    EXPECT_TRUE(one->x.empty()) << "seed " << seed;
    ASSERT_FALSE(one->overflowing.empty()) << "seed " << seed;
    EXPECT_FALSE(ir::Evaluate(p, ExpandSolution(*r, one->overflowing)).feasible) << "seed " << seed;
    EXPECT_LE(ReducedCost(*r, one->overflowing), brute->first) << "seed " << seed;
    const Deadline deadline(Deadline::Clock::now(), 30.0);
    SearchContext ctx(*r, one->overflowing, deadline, seed);
    SubgradientPrices prices(*r);
    int rounds = 0;
    EXPECT_TRUE(DescendIntoLimit(ctx, prices, 50, [&] { ++rounds; })) << "seed " << seed;
    EXPECT_GE(rounds, 1);
    EXPECT_TRUE(ir::Evaluate(p, ExpandSolution(*r, ctx.state.x())).feasible) << "seed " << seed;
  }
  EXPECT_GE(binding, 5);
}

TEST(CoreIlp, RefusesModelsAboveTheSizeLimit) {
  const ir::ShardingProblem p = RandomShardingProblem(5, 30, 4, 0.3, 0.5);
  Result<ReducedProblem> r = ReduceShardingProblem(p, kNoReduction);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(SolveReducedIlp(*r, {}, {.max_variables = 10}).has_value());
  EXPECT_FALSE(EnumerateReduced(*r, 10).has_value());
}

}  // namespace
}  // namespace kiwi::solve::sharding
