// The exact Lagrangian subproblem (solve/sharding/priced_exact.h): the minimiser of cost + prices
// equals brute force through each of its exact methods (enumeration, the ILP, toulbar2), and the
// Lagrangian value of an exact minimiser is a lower bound on the constrained optimum.
#include "kiwi/solve/sharding/priced_exact.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiwi/solve/sharding/lagrangian.h"
#include "kiwi/solve/sharding/search_state.h"
#include "kiwi/solve/wcsp/toulbar2.h"
#include "sharding_test_util.h"

namespace kiwi::solve::sharding {
namespace {

using test_util::BruteForceOptimum;
using test_util::kNoReduction;
using test_util::RandomPrices;
using test_util::RandomShardingProblem;

size_t Z(int64_t i) { return static_cast<size_t>(i); }

int64_t PricedCost(const ReducedProblem& p, const NodePrices& prices, const std::vector<int32_t>& x) {
  int64_t cost = ReducedCost(p, x);
  for (size_t r = 0; r < x.size(); ++r) cost = ir::AddCost(cost, std::llround(prices[r][Z(x[r])]));
  return cost;
}

int64_t BruteForcePriced(const ReducedProblem& p, const NodePrices& prices) {
  std::vector<int32_t> sizes;
  for (const auto& node : p.nodes) sizes.push_back(node.strategies());
  int64_t best = ir::kForbiddenCost;
  kiwi::test_util::ForEachAssignment(sizes, [&](const std::vector<int32_t>& x) {
    best = std::min(best, PricedCost(p, prices, x));
  });
  return best;
}

void ExpectBruteForceOptimum(const PricedSolveOptions& options, const std::string& method) {
  int by_method = 0;
  for (uint64_t seed = 1; seed <= 15; ++seed) {
    const ir::ShardingProblem sp = RandomShardingProblem(500 + seed, 8, 4, 0.9, 0.5);
    Result<ReducedProblem> p = ReduceShardingProblem(sp, kNoReduction);
    ASSERT_TRUE(p.ok()) << p.error().message;
    const NodePrices prices = RandomPrices(*p, seed);
    const std::optional<PricedSolution> s = SolvePricedExactly(*p, prices, {}, options);
    ASSERT_TRUE(s.has_value()) << method << " seed " << seed;
    ASSERT_EQ(s->x.size(), p->nodes.size());
    EXPECT_TRUE(s->optimal) << method << " seed " << seed;
    EXPECT_EQ(PricedCost(*p, prices, s->x), BruteForcePriced(*p, prices)) << method << " seed " << seed;
    by_method += s->method == method ? 1 : 0;
  }
  EXPECT_GE(by_method, 10) << "most cores should reach " << method;
}

TEST(PricedExact, EnumerationEqualsBruteForce) { ExpectBruteForceOptimum({.seconds = 20}, "enumeration"); }

TEST(PricedExact, IlpEqualsBruteForce) {
  ExpectBruteForceOptimum({.seconds = 20, .max_enumeration = 0}, "ilp");
}

TEST(PricedExact, ToulbarEqualsBruteForce) {
  if (!wcsp::ToulbarAvailable()) GTEST_SKIP() << "toulbar2 is not installed (scripts/setup.sh installs it)";
  ExpectBruteForceOptimum({.seconds = 20, .max_enumeration = 0, .max_ilp_variables = 0}, "toulbar2");
}

// L(lambda) = min_x cost(x) + sum_k lambda_k (usage_k(x) - limit) <= the constrained optimum, up to
// the rounding of prices (one unit per node).
TEST(PricedExact, LagrangianValueOfTheExactMinimiserIsALowerBound) {
  for (uint64_t seed = 1; seed <= 15; ++seed) {
    const ir::ShardingProblem sp = RandomShardingProblem(700 + seed, 8, 3, 0.4, 0.9);
    const auto brute = BruteForceOptimum(sp);
    ASSERT_TRUE(brute.has_value());
    Result<ReducedProblem> p = ReduceShardingProblem(sp);
    ASSERT_TRUE(p.ok()) << p.error().message;
    SubgradientPrices prices(*p);
    prices.SetUniform(0.05 * static_cast<double>(seed));
    const std::optional<PricedSolution> s = SolvePricedExactly(*p, prices.prices(), {}, {.seconds = 20});
    ASSERT_TRUE(s.has_value() && s->optimal) << "seed " << seed;
    SearchState state(*p, s->x);
    const double value = prices.Step(state, static_cast<double>(brute->first), 1.0);
    EXPECT_LE(value, static_cast<double>(brute->first) + static_cast<double>(p->nodes.size())) << "seed " << seed;
  }
}

// A priced core of 1,000 nodes or more goes to toulbar2 reparametrised by message passing: the answer
// is a valid assignment whose cost is the core's own, not claimed optimal.
TEST(PricedExact, LargeCoresGoToToulbarReparametrised) {
  if (!wcsp::ToulbarAvailable()) GTEST_SKIP() << "toulbar2 is not installed (scripts/setup.sh installs it)";
  const ir::ShardingProblem sp = RandomShardingProblem(77, 1500, 6, 0.004, 0.0);
  Result<ReducedProblem> p = ReduceShardingProblem(sp, kNoReduction);
  ASSERT_TRUE(p.ok()) << p.error().message;
  const NodePrices prices = RandomPrices(*p, 77);
  const std::optional<PricedSolution> s = SolvePricedExactly(*p, prices, {}, {.seconds = 5});
  ASSERT_TRUE(s.has_value());
  ASSERT_EQ(s->x.size(), p->nodes.size());
  EXPECT_EQ(s->method, "toulbar2, reparametrised");
  EXPECT_FALSE(s->optimal);
  EXPECT_LT(PricedCost(*p, prices, s->x), ir::kForbiddenCost);
}

// total_seconds caps the whole call: with less than the exact solvers' minimum left, cores that need
// the ILP or toulbar2 get no answer, while enumeration (no time limit of its own) still answers.
TEST(PricedExact, NoTimeLeftGivesNoAnswerFromTheTimedSolvers) {
  int checked = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const ir::ShardingProblem sp = RandomShardingProblem(500 + seed, 8, 4, 0.9, 0.5);
    Result<ReducedProblem> p = ReduceShardingProblem(sp, kNoReduction);
    ASSERT_TRUE(p.ok()) << p.error().message;
    const NodePrices prices = RandomPrices(*p, seed);
    const std::optional<PricedSolution> timed = SolvePricedExactly(*p, prices, {}, {.seconds = 20, .max_enumeration = 0});
    ASSERT_TRUE(timed.has_value()) << "seed " << seed;
    if (timed->method != "reductions") {  // the priced reductions alone decide some cores: no solver runs
      ++checked;
      EXPECT_FALSE(SolvePricedExactly(*p, prices, {}, {.seconds = 20, .total_seconds = 0.5, .max_enumeration = 0}))
          << "seed " << seed;
    }
    const std::optional<PricedSolution> s = SolvePricedExactly(*p, prices, {}, {.seconds = 20, .total_seconds = 0.5});
    ASSERT_TRUE(s.has_value()) << "seed " << seed;
    EXPECT_EQ(PricedCost(*p, prices, s->x), BruteForcePriced(*p, prices)) << "seed " << seed;
  }
  EXPECT_GE(checked, 3);
}

}  // namespace
}  // namespace kiwi::solve::sharding
