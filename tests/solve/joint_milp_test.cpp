// The joint MILPs (solve/joint/milp_builder.h, solve_milp.h, full_milp.h): the reduced formulation
// equals exhaustive search over its decision space, its least peak too, the fixed-schedule sharding
// MILP equals the sharding ILP, and the full formulation is never worse than the reduced one.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>

#include "joint_test_util.h"
#include "kiwi/solve/joint/baselines.h"
#include "kiwi/solve/joint/joint.h"
#include "kiwi/solve/joint/kiwi.h"
#include "kiwi/solve/joint/model_spec.h"
#include "kiwi/solve/joint/solve_milp.h"
#include "kiwi/solve/sharding/ilp.h"

namespace kiwi::solve::joint {
namespace {

using test_util::Mesh1d;
using test_util::Problem;
using test_util::SmallGpt;
using test_util::SmallMlp;

constexpr int64_t kNoLimit = int64_t{1} << 60;

// One thread, 5 s: what the formulation tests below solve with.
JointSolveOptions FiveSeconds() {
  JointSolveOptions o;
  o.threads = 1;
  o.time_limit_seconds = 5;
  return o;
}

JointMilpOptions Exact() {
  JointMilpOptions o;
  o.relative_gap = 0.0;
  o.time_limit_seconds = 120;
  o.threads = 1;
  return o;
}

// Shrinks a problem for exhaustive search: the first `choices` nodes with several strategies keep two,
// all others keep one; only the first `candidates` candidates stay candidates.
void Shrink(JointProblem& p, int choices, int candidates) {
  for (std::vector<int32_t>& allowed : p.allowed) {
    if (allowed.size() > 1 && choices > 0) allowed.resize(2), --choices;
    else allowed.resize(1);
  }
  for (NodeTiming& t : p.timing)
    if (t.candidate && candidates-- <= 0) t.candidate = false;
}

struct BruteForce {
  std::optional<int64_t> best_cost;  // cheapest feasible
  int64_t least_peak = std::numeric_limits<int64_t>::max();
};

// Every strategy combination x every recompute set satisfying eq. 9.
BruteForce Exhaustive(const JointProblem& p) {
  BruteForce out;
  std::vector<ir::NodeId> cands;
  for (ir::NodeId v = 0; v < p.graph->size(); ++v)
    if (p.timing[static_cast<size_t>(v)].candidate) cands.push_back(v);
  JointSolution s = WithoutRecompute(ir::Solution(p.allowed.size()));
  std::vector<size_t> digit(p.allowed.size(), 0);
  while (true) {
    for (size_t v = 0; v < digit.size(); ++v) s.strategy[v] = p.allowed[v][digit[v]];
    for (uint32_t mask = 0; mask < (1u << cands.size()); ++mask) {
      for (size_t c = 0; c < cands.size(); ++c) s.recompute[static_cast<size_t>(cands[c])] = (mask >> c) & 1u;
      const JointEvaluation e = EvaluateJoint(p, s);
      if (!e.valid) continue;
      out.least_peak = std::min(out.least_peak, e.peak);
      if (e.feasible && (!out.best_cost || e.cost < *out.best_cost)) out.best_cost = e.cost;
    }
    size_t i = 0;
    while (i < digit.size() && ++digit[i] == p.allowed[i].size()) digit[i++] = 0;
    if (i == digit.size()) return out;
  }
}

void ExpectReducedEqualsExhaustive(JointProblem p, const std::string& what) {
  SCOPED_TRACE(what);
  const BruteForce unlimited = Exhaustive(p);
  ASSERT_TRUE(unlimited.best_cost.has_value());
  JointModelSpec spec = KiwiSpec(p);
  PruneImpliedRows(spec);
  JointMilpOptions peak = Exact();
  peak.min_peak = true;
  Result<JointMilpResult> least = SolveJointMilp(p, spec, peak);
  ASSERT_TRUE(least.ok()) << least.error().message;
  EXPECT_EQ(least->evaluation.peak, unlimited.least_peak);
  int feasible = 0;
  for (double f : {1.0, 0.75, 0.5, 0.3, 0.15, 0.05, 0.0}) {  // from the no-limit peak down to the least
    JointProblem q = p;
    const int64_t high = EvaluateJoint(p, test_util::FirstAllowed(p)).peak;
    q.budget = unlimited.least_peak + static_cast<int64_t>(f * static_cast<double>(std::max<int64_t>(0, high - unlimited.least_peak)));
    const BruteForce truth = Exhaustive(q);
    Result<JointMilpResult> r = SolveJointMilp(q, spec, Exact());
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->has_solution, truth.best_cost.has_value()) << "budget " << q.budget;
    if (!truth.best_cost) continue;
    ++feasible;
    EXPECT_EQ(r->evaluation.cost, *truth.best_cost) << "budget " << q.budget;
    EXPECT_TRUE(r->optimal);
    EXPECT_LE(r->evaluation.peak, q.budget);
  }
  EXPECT_GE(feasible, 3);
}

TEST(JointMilp, ReducedFormulationEqualsExhaustiveSearchOnAGeluMlp) {
  const ir::Graph g = SmallMlp({16, 64, 64, 64, 16}, 16, "gelu");
  JointProblem p = Problem(g, Mesh1d(2), kNoLimit);
  Shrink(p, 7, 6);
  ExpectReducedEqualsExhaustive(p, "gelu mlp");
}

TEST(JointMilp, ReducedFormulationEqualsExhaustiveSearchOnAGptLayer) {
  const ir::Graph g = SmallGpt(1);
  JointProblem p = Problem(g, Mesh1d(4), kNoLimit);
  Shrink(p, 6, 7);
  ExpectReducedEqualsExhaustive(p, "gpt layer");
}

TEST(JointMilp, SmallestReducedPeakEqualsExhaustiveSearch) {
  const ir::Graph g = SmallMlp({16, 64, 64, 16}, 8, "gelu");
  JointProblem p = Problem(g, Mesh1d(2), kNoLimit);
  Shrink(p, 6, 4);
  JointSolveOptions o;
  o.threads = 1;
  Result<int64_t> least = SmallestReducedPeak(p, o);
  ASSERT_TRUE(least.ok()) << least.error().message;
  EXPECT_EQ(*least, Exhaustive(p).least_peak);
}

// The fixed-schedule MILP (Alpa on checkpoint-all) and the project's sharding ILP agree.
TEST(JointMilp, AlpaEqualsTheShardingIlp) {
  const ir::Graph g = SmallGpt(1);
  JointProblemOptions unpruned;
  unpruned.prune_dominated = false;
  for (bool prune : {true, false}) {
    JointProblem p = Problem(g, Mesh1d(4), kNoLimit, prune ? JointProblemOptions{} : unpruned);
    const ir::Solution smallest = SmallestStrategies(p);
    Result<JointModelSpec> spec = FixedScheduleSpec(p, plan::CheckpointAllSchedule(g));
    ASSERT_TRUE(spec.ok());
    PruneImpliedRows(*spec);
    const int64_t least = EvaluateSpec(p, *spec, WithoutRecompute(smallest)).peak;
    EXPECT_EQ(least, ir::MinimumPeakUsage(p.lowered.problem));
    ir::ShardingProblem sp = p.lowered.problem;
    sp.usage_limit = p.budget = least + (EvaluateSpec(p, *spec, test_util::FirstAllowed(p)).peak - least) / 4;
    sharding::ShardingSolveOptions so;
    so.relative_gap = 0.0;
    so.threads = 1;
    Result<sharding::ShardingResult> ilp = sharding::SolveShardingIlp(sp, so);
    ASSERT_TRUE(ilp.ok()) << ilp.error().message;
    Result<JointMilpResult> mine = SolveJointMilp(p, *spec, Exact());
    ASSERT_TRUE(mine.ok()) << mine.error().message;
    EXPECT_EQ(mine->evaluation.cost, ilp->evaluation.cost) << "pruned " << prune;
    EXPECT_LE(mine->evaluation.peak, p.budget);
  }
}

// The full formulation's family contains the reduced one's: warm-started from KIWI's plan it is never
// slower; at a loose budget it proves the unconstrained optimum (the LP relaxation of the stage rows
// is weak - fractional keep/recompute - so tighter budgets stop at the time limit, as in the paper).
TEST(JointMilp, FullFormulationIsNeverSlowerThanTheReducedOne) {
  const ir::Graph g = SmallMlp({8, 16, 8}, 4, "gelu");
  const JointProblem loose = Problem(g, Mesh1d(2), kNoLimit);
  JointSolveOptions o = FiveSeconds();
  o.relative_gap = 0.0;
  Result<int64_t> least = SmallestReducedPeak(loose, o);
  ASSERT_TRUE(least.ok());
  const int64_t high = EvaluateJoint(loose, test_util::FirstAllowed(loose)).peak;
  for (int64_t budget : {high, *least + (high - *least) / 3, *least}) {
    JointProblem p = Problem(g, Mesh1d(2), budget);
    Result<JointResult> reduced = SolveJoint(p, JointMethod::kKiwi, o);
    ASSERT_TRUE(reduced.ok()) << reduced.error().message;
    ASSERT_TRUE(reduced->feasible) << budget;
    JointSolveOptions full_o = o;
    full_o.portfolio = {&*reduced};
    Result<JointResult> full = SolveJoint(p, JointMethod::kKiwiFull, full_o);
    ASSERT_TRUE(full.ok()) << full.error().message;
    ASSERT_TRUE(full->feasible);
    if (budget == high) {
      EXPECT_TRUE(full->optimal) << full->note;
    }
    EXPECT_LE(full->seconds(), reduced->seconds() * (1 + 1e-12)) << budget;
    EXPECT_LE(full->sim.peak_memory_bytes, budget);
  }
}

// With relu (whose gradient reads its output) the reduced family cannot trade memory for time, while
// the stage formulation recomputes matmul-relu chains: it meets budgets the reduced one cannot.
TEST(JointMilp, FullFormulationReachesBudgetsTheReducedOneCannot) {
  const ir::Graph g = SmallMlp({8, 32, 32, 32, 8}, 16, "relu");
  JointProblem loose = Problem(g, Mesh1d(2), kNoLimit);
  const JointSolveOptions o = FiveSeconds();
  Result<int64_t> least = SmallestReducedPeak(loose, o);
  ASSERT_TRUE(least.ok());
  JointProblem p = Problem(g, Mesh1d(2), *least - 1);
  Result<JointResult> reduced = SolveJoint(p, JointMethod::kKiwi, o);
  ASSERT_TRUE(reduced.ok());
  EXPECT_FALSE(reduced->feasible);
  EXPECT_EQ(reduced->smallest_known_budget, *least);
  Result<JointResult> full = SolveJoint(p, JointMethod::kKiwiFull, o);
  ASSERT_TRUE(full.ok()) << full.error().message;
  EXPECT_TRUE(full->feasible) << full->note;
  EXPECT_GT(full->sim.recomputations, 0);
}

// Issue 18: the full model was built whatever the time left (8 GPT layers: 9.2M variables, 6 s against a
// 5 s limit). With no time left it is not built: the portfolio's fastest plan is the answer, replayed
// by the simulator as before, and the note says why; without a portfolio plan there is no answer.
TEST(JointMilp, FullFormulationWithNoTimeLeftAnswersWithThePortfolio) {
  const ir::Graph g = SmallMlp({8, 16, 8}, 4, "gelu");
  const JointProblem p = Problem(g, Mesh1d(2), kNoLimit);
  const JointSolveOptions o = FiveSeconds();
  Result<JointResult> reduced = SolveJoint(p, JointMethod::kKiwi, o);
  ASSERT_TRUE(reduced.ok()) << reduced.error().message;
  ASSERT_TRUE(reduced->feasible);
  JointSolveOptions none = o;
  none.time_limit_seconds = 0.0;
  none.portfolio = {&*reduced};
  Result<JointResult> full = SolveJoint(p, JointMethod::kKiwiFull, none);
  ASSERT_TRUE(full.ok()) << full.error().message;
  EXPECT_TRUE(full->feasible);
  EXPECT_EQ(full->method, "kiwi-full");
  EXPECT_FALSE(full->optimal);
  EXPECT_NE(full->note.find("the full MILP was not solved: building it outlasted the time limit; the plan of kiwi"),
            std::string::npos) << full->note;
  EXPECT_EQ(full->sim.iteration_seconds, reduced->sim.iteration_seconds);
  EXPECT_EQ(full->claimed_peak, full->sim.peak_memory_bytes);
  none.portfolio.clear();
  Result<JointResult> alone = SolveJoint(p, JointMethod::kKiwiFull, none);
  ASSERT_TRUE(alone.ok()) << alone.error().message;
  EXPECT_FALSE(alone->feasible);
  EXPECT_NE(alone->note.find("building it outlasted the time limit"), std::string::npos) << alone->note;
}

}  // namespace
}  // namespace kiwi::solve::joint
