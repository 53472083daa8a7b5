// The toulbar2 backend (solve/wcsp/toulbar2.h): optimal on random networks (against brute force),
// forbidden entries respected, an initial assignment accepted, bad input and a missing executable
// reported as errors. scripts/setup.sh installs toulbar2; without it the solving tests are skipped.
#include "kiwi/solve/wcsp/toulbar2.h"

#include <gtest/gtest.h>

#include <random>

#include "assignment_odometer.h"

namespace kiwi::solve::wcsp {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

WcspProblem RandomNetwork(uint64_t seed, int variables, int max_domain, double density, double forbidden_share) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
  auto chance = [&](double p) { return static_cast<double>(rng() % 1'000'000) < p * 1e6; };
  WcspProblem p;
  p.forbidden = 1'000'000'000;
  for (int i = 0; i < variables; ++i) {
    std::vector<int64_t> costs;
    for (int64_t a = uniform(1, max_domain); a > 0; --a) costs.push_back(uniform(0, 1000));
    p.unary.push_back(std::move(costs));
  }
  for (int u = 0; u < variables; ++u)
    for (int v = u + 1; v < variables; ++v) {
      if (!chance(density)) continue;
      BinaryCost b{u, v, {}};
      for (size_t k = 0; k < p.unary[Z(u)].size() * p.unary[Z(v)].size(); ++k)
        b.cost.push_back(chance(forbidden_share) ? p.forbidden : uniform(0, 700));
      p.binary.push_back(std::move(b));
    }
  return p;
}

int64_t BruteForce(const WcspProblem& p) {
  std::vector<int32_t> sizes;
  for (const auto& costs : p.unary) sizes.push_back(static_cast<int32_t>(costs.size()));
  int64_t best = p.forbidden;
  kiwi::test_util::ForEachAssignment(sizes, [&](const std::vector<int32_t>& x) { best = std::min(best, WcspCost(p, x)); });
  return best;
}

class Toulbar : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ToulbarAvailable()) GTEST_SKIP() << "toulbar2 is not installed (scripts/setup.sh installs it)";
  }
};

TEST_F(Toulbar, OptimalOnRandomNetworks) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const WcspProblem p = RandomNetwork(seed, 7, 4, 0.5, seed % 3 == 0 ? 0.2 : 0.0);
    const int64_t best = BruteForce(p);
    Result<WcspResult> r = SolveWcsp(p, {.time_limit_seconds = 20});
    ASSERT_TRUE(r.ok()) << r.error().message;
    if (best >= p.forbidden) {  // nothing avoids the forbidden entries
      EXPECT_TRUE(r->x.empty()) << "seed " << seed;
      EXPECT_EQ(r->termination, kiwi::milp::Termination::kInfeasible) << "seed " << seed;
      continue;
    }
    ASSERT_FALSE(r->x.empty()) << "seed " << seed;
    EXPECT_TRUE(r->optimal) << "seed " << seed;
    EXPECT_EQ(r->termination, kiwi::milp::Termination::kOptimal) << "seed " << seed;
    EXPECT_EQ(r->cost, best) << "seed " << seed;
    EXPECT_EQ(WcspCost(p, r->x), best);
    ASSERT_TRUE(r->lower_bound.has_value());
    EXPECT_EQ(*r->lower_bound, best);
  }
}

// Every pair forbidden: proven infeasible, a termination and not an error (the MILP layer's contract).
TEST_F(Toulbar, EveryAssignmentForbiddenIsInfeasible) {
  WcspProblem p;
  p.unary = {{0, 1}, {2, 0}};
  p.binary.push_back({0, 1, {p.forbidden, p.forbidden, p.forbidden, p.forbidden}});
  Result<WcspResult> r = SolveWcsp(p, {.time_limit_seconds = 20});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->has_solution());
  EXPECT_EQ(r->termination, kiwi::milp::Termination::kInfeasible);
}

TEST_F(Toulbar, AcceptsAnInitialAssignment) {
  const WcspProblem p = RandomNetwork(41, 8, 3, 0.4, 0.0);
  std::vector<int32_t> initial(p.unary.size(), 0);
  Result<WcspResult> r = SolveWcsp(p, {.time_limit_seconds = 20, .initial = initial});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->x.empty());
  EXPECT_EQ(r->cost, BruteForce(p));
  EXPECT_LE(r->cost, WcspCost(p, initial));
}

TEST(Wcsp, BadInputNamesTheTable) {
  WcspProblem p;
  p.unary = {{1, 2}, {3, 4, 5}};
  p.binary.push_back({0, 1, {0, 1, 2}});
  Result<WcspResult> r = SolveWcsp(p, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  EXPECT_NE(r.error().message.find("binary cost 0 has 3 entries, expected 2 x 3"), std::string::npos) << r.error().message;

  p.binary = {{0, 2, {0, 0}}};
  r = SolveWcsp(p, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("joins variables 0 and 2"), std::string::npos) << r.error().message;

  p.binary.clear();
  p.unary.push_back({});
  r = SolveWcsp(p, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("variable 2 has an empty domain"), std::string::npos) << r.error().message;

  p.unary.pop_back();
  r = SolveWcsp(p, {.initial = {0}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("initial assignment has 1 values for 2 variables"), std::string::npos);
}

TEST(Wcsp, MissingExecutableIsAnInternalError) {
  EXPECT_FALSE(ToulbarAvailable("/nonexistent/toulbar2"));
  WcspProblem p;
  p.unary = {{1, 2}};
  Result<WcspResult> r = SolveWcsp(p, {.executable = "/nonexistent/toulbar2"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInternal);
}

}  // namespace
}  // namespace kiwi::solve::wcsp
