// ir::ShardingProblem: the evaluator (the judge of every sharding solver) and validation.
#include "kiwi/ir/sharding_problem.h"

#include <gtest/gtest.h>

namespace kiwi::ir {
namespace {

// The contest's example.json (../shared/benchmarks/iopddl/example.json), built by hand.
ShardingProblem Example() {
  ShardingProblem p;
  p.name = "example";
  p.nodes = {{30, 70, {15}, {10}},
             {40, 70, {55, 65}, {25, 25}},
             {50, 120, {25, 45, 35}, {15, 20, 15}},
             {110, 140, {85, 75}, {10, 10}},
             {110, 150, {95}, {15}}};
  p.edges = {{0, 1, {30, 40}},
             {0, 2, {50, 10, 40}},
             {1, 3, {90, 10, 20, 80}},
             {2, 4, {60, 20, 30}},
             {3, 4, {70, 60}}};
  p.usage_limit = 50;
  return p;
}

TEST(ShardingEvaluate, SumsNodeAndEdgeCostsOfTheChosenStrategies) {
  const Evaluation e = Evaluate(Example(), {0, 0, 2, 1, 0});
  ASSERT_TRUE(e.valid);
  // nodes 15 + 55 + 35 + 75 + 95; edges 30 + 40 + 10 + 30 + 60
  EXPECT_EQ(e.cost, 275 + 170);
  EXPECT_EQ(e.peak_usage, 50);  // t in [50, 70): 10 + 25 + 15
  EXPECT_EQ(e.peak_time, 50);
  EXPECT_TRUE(e.feasible) << e.violation;
}

TEST(ShardingEvaluate, UsageAboveTheLimitIsInfeasibleAndSaysWhere) {
  const Evaluation e = Evaluate(Example(), {0, 0, 1, 1, 0});
  ASSERT_TRUE(e.valid);
  EXPECT_EQ(e.peak_usage, 55);
  EXPECT_FALSE(e.feasible);
  EXPECT_EQ(e.violation, "usage 55 > limit 50 at t=50");
}

TEST(ShardingEvaluate, IntervalsAreHalfOpenAndEmptyOnesUseNothing) {
  ShardingProblem p;
  p.nodes = {{0, 10, {0}, {7}}, {10, 20, {0}, {5}}, {3, 3, {0}, {100}}};
  p.usage_limit = 7;
  const Evaluation e = Evaluate(p, {0, 0, 0});
  EXPECT_EQ(e.peak_usage, 7);  // node 0 ends where node 1 starts; node 2 is never live
  EXPECT_TRUE(e.feasible);
}

TEST(ShardingEvaluate, RejectsWrongLengthAndOutOfRangeStrategies) {
  EXPECT_FALSE(Evaluate(Example(), {0, 0, 2, 1}).valid);
  const Evaluation e = Evaluate(Example(), {0, 2, 0, 0, 0});
  EXPECT_FALSE(e.valid);
  EXPECT_FALSE(e.feasible);
  EXPECT_EQ(e.violation, "node 1: strategy 2 out of range [0, 2)");
}

TEST(ShardingEvaluate, ForbiddenCostsSaturateInsteadOfOverflowing) {
  ShardingProblem p;
  p.nodes = {{0, 1, {kForbiddenCost, 1}, {0, 0}}, {0, 1, {kForbiddenCost, 2}, {0, 0}}};
  p.edges = {{0, 1, {kForbiddenCost, 0, 0, 3}}};
  const Evaluation bad = Evaluate(p, {0, 0});
  EXPECT_EQ(bad.cost, kForbiddenCost);
  EXPECT_FALSE(bad.feasible);
  const Evaluation good = Evaluate(p, {1, 1});
  EXPECT_EQ(good.cost, 6);
  EXPECT_TRUE(good.feasible);
}

// Issue 18 item 4: two overlapping usages of 6e18 wrapped the int64 sum to 0, "feasible" under 9e18.
TEST(ShardingEvaluate, HugeOverlappingUsagesDoNotWrap) {
  ShardingProblem p;
  p.nodes = {{0, 10, {1}, {6'000'000'000'000'000'000}}, {5, 15, {1}, {6'000'000'000'000'000'000}}};
  p.usage_limit = 9'000'000'000'000'000'000;
  const Evaluation e = Evaluate(p, {0, 0});
  ASSERT_TRUE(e.valid);
  EXPECT_EQ(e.peak_usage, INT64_MAX);  // 1.2e19 does not fit: reported as the largest int64
  EXPECT_EQ(e.peak_time, 5);
  EXPECT_FALSE(e.feasible);
  EXPECT_EQ(MinimumPeakUsage(p), INT64_MAX);
}

TEST(ShardingMinimumPeakUsage, SumsEachLiveNodesSmallestUsage) {
  EXPECT_EQ(MinimumPeakUsage(Example()), 50);  // [50, 70): 10 + 25 + 15
  ShardingProblem p = Example();
  p.nodes[2].usage = {15, 5, 15};
  EXPECT_EQ(MinimumPeakUsage(p), 40);
}

TEST(ShardingValidate, NamesTheFieldAtFault) {
  EXPECT_TRUE(ValidateShardingProblem(Example(), "x.json").ok());
  ShardingProblem p = Example();
  p.edges[2].cost.pop_back();
  Status s = ValidateShardingProblem(p, "x.json");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "x.json: problem.edges.costs[2]: has 3 entries, expected 2 x 2 = 4");
  p = Example();
  p.edges[1].v = 9;
  EXPECT_EQ(ValidateShardingProblem(p, "x.json").error().message,
            "x.json: problem.edges.nodes[1]: node 9 out of range [0, 5)");
  p = Example();
  p.nodes[3].usage[1] = -1;
  EXPECT_EQ(ValidateShardingProblem(p, "x.json").error().message, "x.json: problem.nodes.usages[3][1]: must be >= 0");
  p = Example();
  p.nodes[0].cost.clear();
  EXPECT_EQ(ValidateShardingProblem(p, "x.json").error().code, ErrorCode::kBadInput);
}

}  // namespace
}  // namespace kiwi::ir
