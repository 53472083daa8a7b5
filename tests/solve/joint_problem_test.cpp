// The joint problem (solve/joint/problem.h, model_spec.h, pruning.h): timing and candidates by hand,
// the formulation's accounting equal to the simulator on random decisions, the fixed-schedule spec,
// implied rows and strategy dominance.
#include "kiwi/solve/joint/problem.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "joint_test_util.h"
#include "kiwi/solve/joint/model_spec.h"
#include "kiwi/solve/joint/pruning.h"

namespace kiwi::solve::joint {
namespace {

using test_util::Mesh1d;
using test_util::Mesh2x4;
using test_util::Problem;
using test_util::RandomSolution;
using test_util::Simulate;
using test_util::SmallGpt;
using test_util::SmallMlp;
using test_util::Tolerance;

constexpr int64_t kNoLimit = int64_t{1} << 60;

TEST(JointProblem, MlpTimingAndCandidatesByHand) {
  // 0 x, 1-2 fc0 w/b, 3 fc0, 4 act0, 5-6 fc1 w/b, 7 fc1, 8 act1, 9 labels, 10 loss | 11 the loss's
  // nll grad, 12 loss grad (reads 8), 13 act1 grad (reads 8), 14 act0 grad, 15 fc1.weight grad (reads
  // 4), 16 bias grad, 17 fc0 grad (reads 4), 18 fc0.weight grad (reads x), 19 bias grad, 20 sgd.
  const ir::Graph g = SmallMlp({8, 16, 8}, 4);
  ASSERT_EQ(g.size(), 21);
  const JointProblem p = Problem(g, Mesh1d(2), kNoLimit);
  EXPECT_EQ(p.boundary, 11);
  const NodeTiming& act0 = p.timing[4];
  EXPECT_EQ(act0.last_forward_use, 7);
  EXPECT_EQ(act0.first_backward_use, 15);
  EXPECT_EQ(act0.last_use, 17);
  // act1 (the logits) is read by the loss grad one step after the forward pass: dropping it frees it
  // while the nll gradient is written (11), so it is a candidate too.
  EXPECT_EQ(p.timing[8].last_forward_use, 10);
  EXPECT_EQ(p.timing[8].first_backward_use, 12);
  EXPECT_EQ(p.timing[0].last_use, 18);
  EXPECT_TRUE(p.timing[1].persistent);
  for (ir::NodeId v = 0; v < g.size(); ++v)
    EXPECT_EQ(p.timing[static_cast<size_t>(v)].candidate, v == 4 || v == 8) << v;
  // Recomputing act0: freed after fc1 (7), recomputed for its weight grad (15), kept to 17; its input
  // fc0 (3, last used at 4) is then held until 15 (eq. 10).
  std::vector<uint8_t> r(21, 0);
  r[4] = 1;
  const auto res = ResidencyIntervals(p, r);
  ASSERT_EQ(res[4].size(), 2u);
  EXPECT_EQ(res[4][0].end, 7);
  EXPECT_EQ(res[4][1].begin, 15);
  EXPECT_EQ(res[4][1].end, 17);
  EXPECT_EQ(res[3][0].end, 15);
  EXPECT_EQ(res[1][0].end, 20);
  JointProblemOptions none;
  none.allow_recompute = false;
  EXPECT_FALSE(Problem(g, Mesh1d(2), kNoLimit, none).timing[4].candidate);
}

// The formulation's time and peak (EvaluateJoint) are the simulator's on the plan it stands for; so
// are the spec's (EvaluateSpec) and, for the reduced schedule, the fixed-schedule spec's.
void ExpectAgreement(const JointProblem& p, const JointSolution& s) {
  const JointEvaluation e = EvaluateJoint(p, s);
  ASSERT_TRUE(e.valid) << e.violation;
  Result<plan::OperatorPlan> plan = JointPlan(p, s);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const sim::SimResult r = Simulate(p, *plan);
  EXPECT_EQ(e.peak, r.peak_memory_bytes);
  EXPECT_NEAR(p.Seconds(e.cost), r.iteration_seconds, Tolerance(p, r.iteration_seconds));
  EXPECT_EQ(e.recomputed, r.recomputations);
  // Per step: the bytes right after order[t]'s own compute.
  size_t k = 0;
  for (int32_t t = 0; t < p.size(); ++t) {
    while (k < r.timeline.size() && !(r.timeline[k].kind == plan::StepKind::kCompute &&
                                      r.timeline[k].node == p.order[static_cast<size_t>(t)]))
      ++k;
    ASSERT_LT(k, r.timeline.size());
    EXPECT_EQ(r.timeline[k].bytes_after, e.memory[static_cast<size_t>(t)]) << "step " << t;
  }
  const JointModelSpec spec = KiwiSpec(p);
  const SpecEvaluation se = EvaluateSpec(p, spec, s);
  EXPECT_EQ(se.cost, e.cost);
  EXPECT_EQ(se.memory, e.memory);
  Result<JointModelSpec> fixed = FixedScheduleSpec(p, plan->schedule);
  ASSERT_TRUE(fixed.ok()) << fixed.error().message;
  const SpecEvaluation fe = EvaluateSpec(p, *fixed, WithoutRecompute(s.strategy));
  EXPECT_EQ(fe.cost, e.cost);
  EXPECT_EQ(fe.peak, r.peak_memory_bytes);
}

TEST(JointProblem, GptOn2x4AgreesWithTheSimulatorOnRandomDecisions) {
  const ir::Graph g = SmallGpt(1);
  const JointProblem p = Problem(g, Mesh2x4(), kNoLimit);
  std::mt19937 rng(7);
  int recomputing = 0;
  for (int trial = 0; trial < 25; ++trial) {
    SCOPED_TRACE(trial);
    const JointSolution s = RandomSolution(p, rng, trial % 5 == 0 ? 0.0 : 0.6);
    recomputing += std::count(s.recompute.begin(), s.recompute.end(), 1) > 0;
    ExpectAgreement(p, s);
  }
  EXPECT_GE(recomputing, 15);
}

TEST(JointProblem, TwoLayerGptAndMlpOn1dMeshAgreeWithTheSimulator) {
  std::mt19937 rng(11);
  for (const ir::Graph& g : {SmallGpt(2), SmallMlp({8, 32, 32, 16, 8}, 8)}) {
    const JointProblem p = Problem(g, Mesh1d(4), kNoLimit);
    for (int trial = 0; trial < 10; ++trial) ExpectAgreement(p, RandomSolution(p, rng));
  }
}

TEST(JointProblem, RecomputingCandidatesLowersThePeakAndCostsTime) {
  const ir::Graph g = SmallMlp({64, 256, 256, 256, 256, 8}, 64, "gelu");
  const JointProblem p = Problem(g, Mesh1d(4), kNoLimit);
  const JointSolution keep = test_util::FirstAllowed(p);
  JointSolution drop = keep;
  for (ir::NodeId v = 0; v < g.size(); ++v) {  // every other candidate in order: eq. 9 holds
    if (!p.timing[static_cast<size_t>(v)].candidate) continue;
    bool free = true;
    for (ir::NodeId in : g.node(v).inputs) free = free && !drop.recompute[static_cast<size_t>(in)];
    drop.recompute[static_cast<size_t>(v)] = free;
  }
  const JointEvaluation a = EvaluateJoint(p, keep), b = EvaluateJoint(p, drop);
  ASSERT_TRUE(b.valid) << b.violation;
  EXPECT_LT(b.peak, a.peak);
  EXPECT_GT(b.cost, a.cost);
}

TEST(JointProblem, InvalidDecisionsAreReported) {
  const ir::Graph g = SmallGpt(1);
  const JointProblem p = Problem(g, Mesh1d(2), kNoLimit);
  JointSolution s = test_util::FirstAllowed(p);
  s.recompute[0] = 1;  // a parameter
  EXPECT_FALSE(EvaluateJoint(p, s).valid);
  EXPECT_NE(EvaluateJoint(p, s).violation.find("not a recomputation candidate"), std::string::npos);
  s.recompute[0] = 0;
  for (ir::NodeId v = 0; v < g.size(); ++v)  // a candidate and a candidate input of it
    for (ir::NodeId in : g.node(v).inputs)
      if (p.timing[static_cast<size_t>(v)].candidate && p.timing[static_cast<size_t>(in)].candidate) {
        s.recompute[static_cast<size_t>(v)] = s.recompute[static_cast<size_t>(in)] = 1;
        EXPECT_NE(EvaluateJoint(p, s).violation.find("eq. 9"), std::string::npos);
        return;
      }
  ADD_FAILURE() << "no candidate with a candidate input";
}

TEST(JointProblem, BudgetDecidesFeasibility) {
  const ir::Graph g = SmallGpt(1);
  const JointProblem p = Problem(g, Mesh1d(2), kNoLimit);
  const JointSolution s = test_util::FirstAllowed(p);
  const JointEvaluation e = EvaluateJoint(p, s);
  ASSERT_TRUE(e.valid) << e.violation;
  JointProblem tight = Problem(g, Mesh1d(2), e.peak - 1);
  EXPECT_FALSE(EvaluateJoint(tight, s).feasible);
  JointProblem exact = Problem(g, Mesh1d(2), e.peak);
  EXPECT_TRUE(EvaluateJoint(exact, s).feasible);
}

TEST(JointProblem, ImpliedRowsNeverHideThePeak) {
  const ir::Graph g = SmallGpt(2);
  const JointProblem p = Problem(g, Mesh2x4(), kNoLimit);
  JointModelSpec spec = KiwiSpec(p);
  PruneImpliedRows(spec);
  const auto needed = std::count(spec.row_needed.begin(), spec.row_needed.end(), 1);
  EXPECT_LT(needed, static_cast<long>(spec.rows.size()) / 2);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 30; ++trial) {
    const SpecEvaluation e = EvaluateSpec(p, spec, RandomSolution(p, rng));
    int64_t kept_peak = 0;
    for (size_t t = 0; t < spec.rows.size(); ++t)
      if (spec.row_needed[t]) kept_peak = std::max(kept_peak, e.memory[t]);
    EXPECT_EQ(kept_peak, e.peak);
  }
}

// What a term holds under a solution, as model_spec.h defines it (the reference for the tests below).
int64_t ReferenceBytes(const JointProblem& p, const JointModelSpec& spec, const JointSolution& s, const MemTerm& term) {
  const int64_t bytes = p.Memory(term.node, s.strategy[static_cast<size_t>(term.node)]);
  if (term.kind == TermKind::kKept) return s.recompute[static_cast<size_t>(term.node)] ? 0 : bytes;
  if (term.kind == TermKind::kExtension) {
    for (ir::NodeId w : spec.extensions[static_cast<size_t>(term.node)][static_cast<size_t>(term.segment)].consumers)
      if (s.recompute[static_cast<size_t>(w)]) return bytes;
    return 0;
  }
  return bytes;
}

// Issue 18: terms resident to the last step (parameters, optimizer states) are kept once, as tails,
// not in each of the rows (kiwi joint at 200 layers held 10^8 terms, 3.8 GB). The rows they stand for
// (RowTerms) give the same pruning and the same memory as rows listing every term.
TEST(JointProblem, TailTermsStandForEveryRowTheyReach) {
  const ir::Graph g = SmallGpt(2);
  const JointProblem p = Problem(g, Mesh2x4(), kNoLimit);
  Result<JointModelSpec> fixed = FixedScheduleSpec(p, plan::CheckpointAllSchedule(g));
  ASSERT_TRUE(fixed.ok()) << fixed.error().message;
  for (JointModelSpec spec : {KiwiSpec(p), *fixed}) {
    ASSERT_FALSE(spec.tails.empty());
    for (ir::NodeId v = 0; v < g.size(); ++v) {
      if (p.timing[static_cast<size_t>(v)].persistent) {
        EXPECT_GE(spec.tail_of[static_cast<size_t>(v)], 0) << v;
      }
    }
    std::vector<std::vector<MemTerm>> rows;
    for (size_t t = 0; t < spec.rows.size(); ++t) rows.push_back(RowTerms(spec, t));
    // Pruning as it was on rows listing every term.
    auto covered = [&](size_t t, size_t u) {
      for (const MemTerm& term : rows[t]) {
        auto it = std::find_if(rows[u].begin(), rows[u].end(), [&](const MemTerm& b) { return b.node == term.node; });
        if (it == rows[u].end() || !(*it == term || it->kind == TermKind::kMemory)) return false;
      }
      return true;
    };
    std::vector<uint8_t> needed(rows.size(), 1);
    for (size_t t = 0; t + 1 < rows.size(); ++t)
      if (covered(t, t + 1)) needed[t] = 0;
    for (size_t t = 0, prev = rows.size(); t < rows.size(); ++t) {
      if (!needed[t]) continue;
      if (prev < rows.size() && covered(t, prev)) needed[t] = 0;
      else prev = t;
    }
    PruneImpliedRows(spec);
    EXPECT_EQ(spec.row_needed, needed);
    std::mt19937 rng(8);
    for (int trial = 0; trial < 10; ++trial) {
      const JointSolution s = RandomSolution(p, rng);
      const SpecEvaluation e = EvaluateSpec(p, spec, s);
      for (size_t t = 0; t < rows.size(); ++t) {
        int64_t bytes = 0;
        for (const MemTerm& term : rows[t]) bytes += ReferenceBytes(p, spec, s, term);
        ASSERT_EQ(e.memory[t], bytes) << "row " << t;
      }
    }
  }
}

TEST(JointProblem, FixedScheduleSpecRejectsBrokenSchedules) {
  const ir::Graph g = SmallMlp({8, 8}, 2);
  const JointProblem p = Problem(g, Mesh1d(2), kNoLimit);
  std::vector<plan::Step> steps = plan::CheckpointAllSchedule(g);
  ASSERT_TRUE(FixedScheduleSpec(p, steps).ok());
  std::vector<plan::Step> twice = steps;
  twice.insert(twice.begin() + 1, steps.front());
  EXPECT_EQ(FixedScheduleSpec(p, twice).error().code, ErrorCode::kInternal);
  std::vector<plan::Step> missing(steps.begin(), steps.end() - 1);
  while (!missing.empty() && missing.back().kind == plan::StepKind::kFree) missing.pop_back();
  missing.pop_back();
  EXPECT_EQ(FixedScheduleSpec(p, missing).error().code, ErrorCode::kInternal);
}

TEST(StrategyPruning, DominatedStrategiesByHand) {
  ir::ShardingProblem sp;
  sp.nodes.push_back({0, 2, {5, 5, 3, 5}, {10, 10, 20, 9}});  // 1 duplicates 0; 3 beats 0 on memory
  sp.nodes.push_back({0, 2, {1, 1}, {4, 4}});
  sp.edges.push_back({0, 1, {0, 1, 0, 1, 0, 1, 0, 0}});  // strategy 3 also reshards for free
  const std::vector<std::vector<int32_t>> kept = UndominatedStrategies(sp);
  EXPECT_EQ(kept[0], (std::vector<int32_t>{2, 3}));  // 0 and 1 are dominated by 3
  EXPECT_EQ(kept[1], (std::vector<int32_t>{0}));      // equal strategies: the first stays
}

TEST(StrategyPruning, PrunedProblemKeepsTheSameBestTimeAndLeastMemory) {
  const ir::Graph g = SmallGpt(1);
  const JointProblem pruned = Problem(g, Mesh2x4(), kNoLimit);
  JointProblemOptions all;
  all.prune_dominated = false;
  const JointProblem full = Problem(g, Mesh2x4(), kNoLimit, all);
  size_t kept = 0, total = 0;
  for (size_t v = 0; v < pruned.allowed.size(); ++v) kept += pruned.allowed[v].size(), total += full.allowed[v].size();
  EXPECT_LT(kept, total);
  // Per node, the cheapest and the smallest strategy survive (with their cost / memory).
  for (size_t v = 0; v < pruned.allowed.size(); ++v) {
    const ir::ShardingNode& n = pruned.lowered.problem.nodes[v];
    int64_t cheapest = ir::kForbiddenCost, smallest = INT64_MAX, pc = ir::kForbiddenCost, ps = INT64_MAX;
    for (int32_t k : full.allowed[v]) cheapest = std::min(cheapest, n.cost[static_cast<size_t>(k)]), smallest = std::min(smallest, n.usage[static_cast<size_t>(k)]);
    for (int32_t k : pruned.allowed[v]) pc = std::min(pc, n.cost[static_cast<size_t>(k)]), ps = std::min(ps, n.usage[static_cast<size_t>(k)]);
    EXPECT_EQ(pc, cheapest) << v;
    EXPECT_EQ(ps, smallest) << v;
  }
}

}  // namespace
}  // namespace kiwi::solve::joint
