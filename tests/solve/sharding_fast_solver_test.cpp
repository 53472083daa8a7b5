// The fast sharding solver (solve/sharding/fast_solver.h): always feasible under the independent
// evaluator, optimal on tiny instances (brute force) and on small ones (the exact ILP), the right
// errors, and the contest's example.
#include "kiwi/solve/sharding/fast_solver.h"

#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <filesystem>

#include "kiwi/io/iopddl_json.h"
#include "kiwi/solve/sharding/core_ilp.h"
#include "kiwi/solve/sharding/ilp.h"
#include "kiwi/solve/sharding/reduction.h"
#include "kiwi/solve/wcsp/toulbar2.h"
#include "sharding_test_util.h"

namespace kiwi::solve::sharding {
namespace {

using test_util::BruteForceOptimum;
using test_util::RandomShardingProblem;

ShardingSolveOptions Options(double seconds) {
  ShardingSolveOptions o;
  o.time_limit_seconds = seconds;
  return o;
}

TEST(FastSolver, EqualsBruteForceOnTinyInstances) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const ir::ShardingProblem p = RandomShardingProblem(seed, 8, 3, 0.35, 0.25 * static_cast<double>(seed % 5));
    const auto brute = BruteForceOptimum(p);
    ASSERT_TRUE(brute.has_value());
    Result<ShardingResult> r = SolveShardingFast(p, Options(10));
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_TRUE(r->evaluation.feasible) << r->evaluation.violation;
    EXPECT_EQ(r->evaluation.cost, brute->first) << "seed " << seed;
    EXPECT_TRUE(r->optimal);
    ASSERT_TRUE(r->lower_bound.has_value());
    EXPECT_LE(*r->lower_bound, brute->first);
  }
}

TEST(FastSolver, EqualsTheIlpOnSmallInstances) {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const ir::ShardingProblem p = RandomShardingProblem(100 + seed, 16, 4, 0.25, 0.6);
    Result<ShardingResult> ilp = SolveShardingIlp(p, Options(60));
    Result<ShardingResult> fast = SolveShardingFast(p, Options(60));
    ASSERT_TRUE(ilp.ok()) << ilp.error().message;
    ASSERT_TRUE(fast.ok()) << fast.error().message;
    ASSERT_TRUE(ilp->optimal);
    EXPECT_TRUE(fast->evaluation.feasible);
    EXPECT_EQ(fast->evaluation.cost, ilp->evaluation.cost) << "seed " << seed;
  }
}

// Solves p within `seconds`: the answer must be feasible, the incumbents strictly improving and ending
// at it, the lower bound below it. Returns the solver's note.
std::string SolveFeasibleAndImproving(const ir::ShardingProblem& p, double seconds) {
  std::vector<int64_t> incumbents;
  ShardingSolveOptions o = Options(seconds);
  o.on_incumbent = [&](int64_t cost, double) { incumbents.push_back(cost); };
  Result<ShardingResult> r = SolveShardingFast(p, o);
  EXPECT_TRUE(r.ok()) << r.error().message;
  if (!r.ok()) return "";
  EXPECT_TRUE(r->evaluation.feasible) << r->evaluation.violation;
  EXPECT_TRUE(std::is_sorted(incumbents.rbegin(), incumbents.rend()));  // strictly improving
  EXPECT_EQ(incumbents.empty() ? -1 : incumbents.back(), r->evaluation.cost);
  EXPECT_TRUE(r->lower_bound.has_value());
  EXPECT_LE(r->lower_bound.value_or(0), r->evaluation.cost);
  return r->note;
}

// Large enough that the core goes to the heuristic search alone: the answer must still be feasible.
TEST(FastSolver, FeasibleOnLargerRandomInstances) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const ir::ShardingProblem p = RandomShardingProblem(200 + seed, 1500, 6, 0.004, 0.7);
    SolveFeasibleAndImproving(p, 1.0);
  }
}

// A core too large for the ILP (over 150k variables) goes to the exact Lagrangian (toulbar2 on the
// priced subproblems) after the first heuristic phase; its answers must be feasible and improving too.
TEST(FastSolver, ExactLagrangianOnACoreTooLargeForTheIlp) {
  const ir::ShardingProblem p = RandomShardingProblem(901, 2500, 8, 0.004, 0.7);
  Result<ReducedProblem> reduced = ReduceShardingProblem(p);
  ASSERT_TRUE(reduced.ok()) << reduced.error().message;
  ASSERT_GT(ModelSizeForIlp(*reduced), 150'000);  // else this test would not reach the path it tests
  const std::string note = SolveFeasibleAndImproving(p, 6.0);
  if (wcsp::ToulbarAvailable()) {
    EXPECT_NE(note.find("exact Lagrangian steps"), std::string::npos) << note;
    // Each minimiser over the limit is repaired at most once: the count never exceeds the steps.
    int64_t steps = -1, repaired = -1;
    const size_t at = note.find(" exact Lagrangian steps, ");
    ASSERT_NE(at, std::string::npos) << note;
    const char* counts = note.c_str() + note.rfind("; ", at) + 2;
    ASSERT_EQ(std::sscanf(counts, "%" SCNd64 " exact Lagrangian steps, %" SCNd64 " minimisers", &steps, &repaired), 2)
        << note;
    EXPECT_GE(steps, 1) << note;
    EXPECT_GE(repaired, 0) << note;
    EXPECT_LE(repaired, steps) << note;
  }
}

TEST(FastSolver, LimitBelowTheMinimumPeakIsInfeasible) {
  ir::ShardingProblem p = RandomShardingProblem(7, 10, 3, 0.3, 0.0);
  p.usage_limit = ir::MinimumPeakUsage(p) - 1;
  Result<ShardingResult> r = SolveShardingFast(p, Options(5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInfeasible);
}

TEST(FastSolver, InvalidProblemIsBadInput) {
  ir::ShardingProblem p = RandomShardingProblem(7, 4, 2, 1.0, 0.0);
  p.edges.front().cost.pop_back();
  Result<ShardingResult> r = SolveShardingFast(p, Options(5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
}

// The contest's example: the optimum is [0, 0, 2, 1, 0] at cost 445 (cheaper choices exceed 50).
TEST(FastSolver, ContestExample) {
  const std::string path = std::string(KIWI_SHARED_DIR) + "/benchmarks/iopddl/example.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  Result<ir::ShardingProblem> p = io::ReadIopddlFile(path);
  ASSERT_TRUE(p.ok()) << p.error().message;
  Result<ShardingResult> r = SolveShardingFast(*p, Options(10));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->evaluation.cost, 445);
  EXPECT_EQ(r->solution, (ir::Solution{0, 0, 2, 1, 0}));
  EXPECT_TRUE(r->optimal);
}

}  // namespace
}  // namespace kiwi::solve::sharding
