// Alternating descent for KIWI's warm starts (solve/joint/alternating.h): each half-step equals
// exhaustive search over its own half of the decision, and the descent returns replayable plans that
// are never worse than its first step.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <set>

#include "joint_test_util.h"
#include "kiwi/solve/joint/alternating.h"
#include "kiwi/solve/joint/baselines.h"
#include "kiwi/solve/joint/model_spec.h"
#include "kiwi/solve/joint/solve_milp.h"

namespace kiwi::solve::joint {
namespace {

using test_util::Mesh1d;
using test_util::Problem;
using test_util::SmallGpt;
using test_util::SmallMlp;

constexpr int64_t kNoLimit = int64_t{1} << 60;

JointSolveOptions Exact() {
  JointSolveOptions o;
  o.relative_gap = 0.0;
  o.threads = 1;
  return o;
}

std::vector<ir::NodeId> Candidates(const JointProblem& p) {
  std::vector<ir::NodeId> c;
  for (ir::NodeId v = 0; v < p.graph->size(); ++v)
    if (p.timing[static_cast<size_t>(v)].candidate) c.push_back(v);
  return c;
}

// The cheapest feasible recomputation of fixed strategies, over every subset of candidates (eq. 9 held).
std::optional<int64_t> ExhaustiveRecomputation(const JointProblem& p, const ir::Solution& strategies) {
  const std::vector<ir::NodeId> cands = Candidates(p);
  std::optional<int64_t> best;
  JointSolution s = WithoutRecompute(strategies);
  for (uint32_t mask = 0; mask < (1u << cands.size()); ++mask) {
    for (size_t c = 0; c < cands.size(); ++c) s.recompute[static_cast<size_t>(cands[c])] = (mask >> c) & 1u;
    const JointEvaluation e = EvaluateJoint(p, s);
    if (e.feasible && (!best || e.cost < *best)) best = e.cost;
  }
  return best;
}

// The cheapest feasible strategies for a fixed recomputation, over every allowed combination.
std::optional<int64_t> ExhaustiveStrategies(const JointProblem& p, const std::vector<uint8_t>& recompute) {
  std::optional<int64_t> best;
  JointSolution s{ir::Solution(p.allowed.size()), recompute};
  std::vector<size_t> digit(p.allowed.size(), 0);
  while (true) {
    for (size_t v = 0; v < digit.size(); ++v) s.strategy[v] = p.allowed[v][digit[v]];
    const JointEvaluation e = EvaluateJoint(p, s);
    if (e.feasible && (!best || e.cost < *best)) best = e.cost;
    size_t i = 0;
    while (i < digit.size() && ++digit[i] == p.allowed[i].size()) digit[i++] = 0;
    if (i == digit.size()) return best;
  }
}

// Budgets from the least peak of the strategies' recomputations up to their peak without any.
std::vector<int64_t> Budgets(const JointProblem& p, const ir::Solution& strategies) {
  const int64_t high = EvaluateJoint(p, WithoutRecompute(strategies)).peak;
  JointSolution all = WithoutRecompute(strategies);
  for (ir::NodeId v : Candidates(p)) {  // greedy eq.-9-respecting set: a lower peak to aim near
    bool free = true;
    for (ir::NodeId in : p.graph->node(v).inputs) free = free && !all.recompute[static_cast<size_t>(in)];
    all.recompute[static_cast<size_t>(v)] = free;
  }
  const int64_t low = std::min(high, EvaluateJoint(p, all).peak);
  std::vector<int64_t> out;
  for (double f : {1.0, 0.6, 0.3, 0.1, 0.0}) out.push_back(low + static_cast<int64_t>(f * static_cast<double>(high - low)));
  return out;
}

TEST(JointAlternating, BestRecomputationEqualsExhaustiveSearch) {
  const ir::Graph g = SmallMlp({16, 64, 64, 64, 64, 16}, 16, "gelu");
  JointProblem p = Problem(g, Mesh1d(2), kNoLimit);
  ASSERT_GE(Candidates(p).size(), 3u);
  ASSERT_LE(Candidates(p).size(), 14u);
  std::mt19937 rng(7);
  int checked = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const ir::Solution strategies = test_util::RandomSolution(p, rng, 0.0).strategy;
    for (int64_t budget : Budgets(p, strategies)) {
      p.budget = budget;
      const std::optional<int64_t> truth = ExhaustiveRecomputation(p, strategies);
      Result<std::optional<JointSolution>> r = BestRecomputation(p, strategies, Exact(), 60);
      ASSERT_TRUE(r.ok()) << r.error().message;
      ASSERT_EQ(r->has_value(), truth.has_value()) << "budget " << budget;
      if (!truth) continue;
      ++checked;
      EXPECT_EQ((*r)->strategy, strategies);
      EXPECT_EQ(EvaluateJoint(p, **r).cost, *truth) << "budget " << budget;
    }
  }
  EXPECT_GE(checked, 8);
}

TEST(JointAlternating, BestStrategiesEqualsExhaustiveSearch) {
  const ir::Graph g = SmallGpt(1);
  JointProblem p = Problem(g, Mesh1d(4), kNoLimit);
  int choices = 7;  // a few nodes keep two strategies, the rest one: 2^7 combinations
  for (std::vector<int32_t>& allowed : p.allowed) {
    if (allowed.size() > 1 && choices > 0) allowed.resize(2), --choices;
    else allowed.resize(1);
  }
  std::mt19937 rng(11);
  int checked = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const JointSolution start = test_util::RandomSolution(p, rng, 0.4);
    const int64_t high = EvaluateJoint(p, start).peak;
    for (double f : {1.5, 1.0, 0.9, 0.8}) {
      p.budget = static_cast<int64_t>(f * static_cast<double>(high));
      const std::optional<int64_t> truth = ExhaustiveStrategies(p, start.recompute);
      if (!truth) continue;
      Result<std::optional<JointSolution>> r = BestStrategies(p, start, Exact(), 60);
      ASSERT_TRUE(r.ok()) << r.error().message;
      ASSERT_TRUE(r->has_value()) << "budget " << p.budget;
      ++checked;
      EXPECT_EQ((*r)->recompute, start.recompute);
      EXPECT_EQ(EvaluateJoint(p, **r).cost, *truth) << "budget " << p.budget;
    }
  }
  EXPECT_GE(checked, 6);
}

TEST(JointAlternating, DescentIsNeverWorseThanItsFirstStepAndReplays) {
  const ir::Graph g = SmallGpt(2);
  JointProblem p = Problem(g, Mesh1d(4), kNoLimit);
  const ir::Solution smallest = SmallestStrategies(p);
  const JointSolution first = test_util::FirstAllowed(p);
  const int64_t high = EvaluateJoint(p, first).peak;
  int improved_or_equal = 0;
  for (double f : {0.9, 0.7, 0.5}) {
    p.budget = static_cast<int64_t>(f * static_cast<double>(high));
    for (const ir::Solution* from : {&first.strategy, &smallest}) {
      Result<std::optional<JointSolution>> step = BestRecomputation(p, *from, Exact(), 60);
      ASSERT_TRUE(step.ok());
      Result<std::optional<JointSolution>> r = AlternateFrom(p, *from, Exact(), 60);
      ASSERT_TRUE(r.ok()) << r.error().message;
      ASSERT_EQ(r->has_value(), step->has_value()) << "budget " << p.budget;
      if (!*r) continue;
      const JointEvaluation e = EvaluateJoint(p, **r);
      ASSERT_TRUE(e.feasible);
      EXPECT_LE(e.cost, EvaluateJoint(p, **step).cost);
      ++improved_or_equal;
      Result<plan::OperatorPlan> plan = JointPlan(p, **r);
      ASSERT_TRUE(plan.ok()) << plan.error().message;
      const sim::SimResult sim = test_util::Simulate(p, *plan);
      EXPECT_EQ(sim.peak_memory_bytes, e.peak);
      EXPECT_NEAR(sim.iteration_seconds, p.Seconds(e.cost), test_util::Tolerance(p, sim.iteration_seconds));
    }
  }
  EXPECT_GE(improved_or_equal, 3);  // the smallest layouts fit every budget here
}

// The layer search returns a feasible decision no worse than its start that no single layer's
// neighbourhood (that layer's strategies free, every recomputation free) can improve.
TEST(JointAlternating, LayerSearchEndsInALocalOptimumOfEveryLayerNeighbourhood) {
  const ir::Graph g = SmallGpt(2);
  JointProblem p = Problem(g, Mesh1d(4), kNoLimit);
  const JointSolution first = test_util::FirstAllowed(p);
  p.budget = static_cast<int64_t>(0.7 * static_cast<double>(EvaluateJoint(p, first).peak));
  Result<std::optional<JointSolution>> start = BestRecomputation(p, SmallestStrategies(p), Exact(), 60);
  ASSERT_TRUE(start.ok() && start->has_value());
  Result<JointSolution> r = ImproveByLayers(p, **start, Exact(), 600);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const JointEvaluation e = EvaluateJoint(p, *r);
  ASSERT_TRUE(e.feasible);
  EXPECT_LT(e.cost, EvaluateJoint(p, **start).cost);  // the smallest layouts are far from the best here
  std::set<int32_t> layers;
  for (ir::NodeId v = 0; v < g.size(); ++v) layers.insert(g.node(v).layer);
  for (int32_t layer : layers) {
    JointProblem hood = WithStrategiesFixed(p, r->strategy);
    for (ir::NodeId v = 0; v < g.size(); ++v)
      if (g.node(v).layer == layer) hood.allowed[static_cast<size_t>(v)] = p.allowed[static_cast<size_t>(v)];
    JointModelSpec spec = KiwiSpec(hood);
    PruneImpliedRows(spec);
    JointMilpOptions m;
    m.relative_gap = 0.0;
    m.threads = 1;
    Result<JointMilpResult> best = SolveJointMilp(hood, spec, m);
    ASSERT_TRUE(best.ok() && best->has_solution);
    EXPECT_GE(best->evaluation.cost, e.cost) << "layer " << layer;
  }
  Result<plan::OperatorPlan> plan = JointPlan(p, *r);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(test_util::Simulate(p, *plan).peak_memory_bytes, e.peak);
}

}  // namespace
}  // namespace kiwi::solve::joint
