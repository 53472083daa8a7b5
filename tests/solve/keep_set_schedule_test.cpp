#include "kiwi/solve/remat/keep_set_schedule.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "kiwi/io/graph_json.h"
#include "remat_test_util.h"
#include "kiwi/solve/remat/checkmate_schedule.h"

namespace kiwi::solve::remat {
namespace {

using test_util::AddOpaque;

using plan::Step;
using plan::StepKind;

cost::CostModel TestCostModel() { return cost::CostModel(cost::DeviceSpec{}); }


// a -> b -> c (loss), backward gc(c) -> gb(gc, b) -> ga(gb, a): Chen's chain with one backward op per node.
ir::Graph SmallChain() {
  ir::Graph g("chain");
  const ir::NodeId a = AddOpaque(g, "a", 10, 1, {});
  const ir::NodeId b = AddOpaque(g, "b", 20, 2, {a});
  const ir::NodeId c = AddOpaque(g, "c", 5, 4, {b});
  const ir::NodeId gc = AddOpaque(g, "gc", 5, 8, {c}, ir::Pass::kBackward);
  const ir::NodeId gb = AddOpaque(g, "gb", 20, 16, {gc, b}, ir::Pass::kBackward);
  AddOpaque(g, "ga", 10, 32, {gb, a}, ir::Pass::kBackward);
  return g;
}

// A random training graph: forward nodes read 1-3 earlier ones; each forward node f gets a gradient
// node reading f, its inputs' ... (as a real backward does) and the gradients of f's consumers.
ir::Graph RandomTrainingGraph(std::mt19937& rng, int forward) {
  ir::Graph g("random");
  std::uniform_int_distribution<int64_t> bytes(1, 50);
  std::uniform_int_distribution<int> cost(0, 9);
  std::vector<std::vector<ir::NodeId>> consumers(static_cast<size_t>(forward));
  for (int i = 0; i < forward; ++i) {
    std::vector<ir::NodeId> in;
    const int fan = i == 0 ? 0 : 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < fan; ++k) {
      const auto from = static_cast<ir::NodeId>(rng() % static_cast<unsigned>(i));
      if (std::find(in.begin(), in.end(), from) == in.end()) in.push_back(from);
    }
    for (ir::NodeId x : in) consumers[static_cast<size_t>(x)].push_back(i);
    AddOpaque(g, "f" + std::to_string(i), bytes(rng), cost(rng), in);
  }
  std::vector<ir::NodeId> grad(static_cast<size_t>(forward), ir::kNoNode);
  for (int i = forward - 1; i >= 0; --i) {
    std::vector<ir::NodeId> in = {i};
    for (ir::NodeId c : consumers[static_cast<size_t>(i)]) in.push_back(grad[static_cast<size_t>(c)]);
    for (ir::NodeId x : g.node(i).inputs)
      if (rng() % 2 == 0) in.push_back(x);
    grad[static_cast<size_t>(i)] =
        AddOpaque(g, "g" + std::to_string(i), bytes(rng), cost(rng), in, ir::Pass::kBackward);
  }
  return g;
}

// A random forward-only DAG (like Moccasin's random layered graphs), with long skip edges.
ir::Graph RandomForwardGraph(std::mt19937& rng, int n) {
  ir::Graph g("forward");
  for (int i = 0; i < n; ++i) {
    std::vector<ir::NodeId> in;
    const int fan = i == 0 ? 0 : 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < fan; ++k) {
      const auto from = static_cast<ir::NodeId>(rng() % static_cast<unsigned>(i));
      if (std::find(in.begin(), in.end(), from) == in.end()) in.push_back(from);
    }
    AddOpaque(g, std::to_string(i), 1 + static_cast<int64_t>(rng() % 40), static_cast<double>(rng() % 10), in);
  }
  return g;
}

RematProblem Problem(const ir::Graph& g) {
  Result<RematProblem> p = MakeRematProblem(g, TestCostModel(), 1 << 30);
  EXPECT_TRUE(p.ok());
  return std::move(*p);
}

// Replays the schedule of `cuts` in the simulator and checks the fast evaluation against it.
void ExpectAgreesWithSimulator(KeepSetScheduler& ks, const KeepPolicy& cuts, const std::string& what) {
  const KeepSetEvaluation e = ks.Evaluate(cuts);
  RematResult partial;
  partial.solver = "keep-set";
  Result<RematResult> r = FinishResult(ks.problem(), TestCostModel(), ks.Schedule(cuts), partial);
  ASSERT_TRUE(r.ok()) << what << ": " << r.error().message;
  EXPECT_EQ(e.peak, r->peak_memory) << what;
  EXPECT_DOUBLE_EQ(e.cost, r->cost) << what;
  EXPECT_EQ(static_cast<size_t>(e.computes),
            static_cast<size_t>(std::count_if(r->schedule.begin(), r->schedule.end(),
                                              [](const Step& s) { return s.kind == StepKind::kCompute; })))
      << what;
}

// Random cuts, and random holds on about a third of the nodes.
KeepPolicy RandomPolicy(const KeepSetScheduler& ks, std::mt19937& rng, unsigned percent) {
  KeepPolicy policy = ks.KeepAll();
  for (uint8_t& c : policy.cuts) c = rng() % 100 < percent ? 1 : 0;
  const int32_t n = ks.problem().size();
  for (int32_t& h : policy.hold)
    if (rng() % 3 == 0) h = static_cast<int32_t>(rng() % static_cast<unsigned>(n));
  return policy;
}

TEST(KeepSetSchedule, KeepAllIsCheckpointAll) {
  const ir::Graph g = SmallChain();
  const RematProblem p = Problem(g);
  const KeepSetEvaluation e = EvaluateKeepSet(p, std::vector<bool>(6, true));
  EXPECT_EQ(e.peak, p.checkpoint_all_peak);
  EXPECT_DOUBLE_EQ(e.cost, p.baseline_cost);
  EXPECT_EQ(e.computes, 6);
}

TEST(KeepSetSchedule, ChainDropsAndRecomputesTheNonKeptTensor) {
  const ir::Graph g = SmallChain();
  const RematProblem p = Problem(g);
  // Drop b (id 1): freed after c is computed, recomputed from a right before gb needs it.
  const std::vector<Step> steps = KeepSetSchedule(p, {true, false, true, true, true, true});
  const std::vector<Step> expected = {
      {StepKind::kCompute, 0}, {StepKind::kCompute, 1}, {StepKind::kCompute, 2}, {StepKind::kFree, 1},
      {StepKind::kCompute, 3}, {StepKind::kFree, 2},    {StepKind::kCompute, 1}, {StepKind::kCompute, 4},
      {StepKind::kFree, 3},    {StepKind::kFree, 1},    {StepKind::kCompute, 5}, {StepKind::kFree, 4},
      {StepKind::kFree, 0},    {StepKind::kFree, 5}};
  EXPECT_EQ(steps, expected);
  const KeepSetEvaluation e = EvaluateKeepSet(p, {true, false, true, true, true, true});
  // Peaks: a+b+c = 35 at c; after gc: a+c+gc = 20; recompute b: a+gc+b = 35; gb: a+gc+b+gb = 55.
  EXPECT_EQ(e.peak, 55);
  EXPECT_DOUBLE_EQ(e.cost, p.baseline_cost + 2.0);
  // Checkpoint-all peaks at gb too: a + b + gc + gb = 55 (c was freed after gc).
  EXPECT_EQ(p.checkpoint_all_peak, 55);
}

TEST(KeepSetSchedule, RecomputationChainsFromTheNearestResidentAncestor) {
  const ir::Graph g = SmallChain();
  const RematProblem p = Problem(g);
  // Drop a and b: gb needs b, recomputed from a, itself recomputed; a then stays until ga.
  const KeepSetEvaluation e = EvaluateKeepSet(p, {false, false, true, true, true, true});
  EXPECT_DOUBLE_EQ(e.cost, p.baseline_cost + 1.0 + 2.0);
  EXPECT_EQ(e.computes, 8);
  KeepSetScheduler ks(p);
  ExpectAgreesWithSimulator(ks, ks.FromKeep({false, false, true, true, true, true}), "drop a,b");
}

TEST(KeepSetSchedule, CandidateCutsOfATrainingGraphUseTheForwardBoundary) {
  const ir::Graph g = SmallChain();
  const RematProblem p = Problem(g);
  KeepSetScheduler ks(p);
  EXPECT_EQ(ks.forward_boundary(), 3);
  // a: consumers b (1) and ga (5) -> one cut at the boundary; c's only consumer gc is at 3 = boundary.
  ASSERT_EQ(ks.CutsOf(0).size(), 1u);
  EXPECT_EQ(ks.cut(ks.CutsOf(0)[0]).at, 3);
  EXPECT_EQ(ks.BoundaryCut(0), ks.CutsOf(0)[0]);
  // gc (position 3) is read by gb at 4 only: no gap, no cut; ga has no consumer: not cuttable.
  EXPECT_TRUE(ks.CutsOf(3).empty());
  EXPECT_FALSE(ks.Cuttable(5));
}

// a -> b; c (reads a) runs between b and the loss d (reads b); the first backward op gd reads b right
// after d. b has no boundary cut (nothing runs between its last forward and first backward use), but a
// forward cut at d (c runs between b and d). Dropping b must not take that cut: Chen's family never
// recomputes inside the forward pass, and recomputing b (and a) for d would recompute them again for
// the backward (the ckpt-dots baseline recomputed the GPT-3 13B layers' tensors twice so).
TEST(KeepSetSchedule, ATensorWithoutABoundaryCutIsNotCutInTheForwardPass) {
  ir::Graph g("loss-input");
  const ir::NodeId a = AddOpaque(g, "a", 10, 1, {});
  const ir::NodeId b = AddOpaque(g, "b", 10, 1, {a});
  const ir::NodeId c = AddOpaque(g, "c", 10, 1, {a});
  const ir::NodeId d = AddOpaque(g, "d", 1, 1, {b, c});
  const ir::NodeId gd = AddOpaque(g, "gd", 10, 1, {d, b}, ir::Pass::kBackward);
  AddOpaque(g, "ga", 10, 1, {gd, a}, ir::Pass::kBackward);
  const RematProblem p = Problem(g);
  KeepSetScheduler ks(p);
  ASSERT_EQ(ks.forward_boundary(), 4);
  ASSERT_EQ(ks.CutsOf(b).size(), 1u);  // the forward cut at d (position 3)
  EXPECT_EQ(ks.cut(ks.CutsOf(b)[0]).at, 3);
  EXPECT_LT(ks.BoundaryCut(b), 0);
  const KeepPolicy drop_b = ks.FromKeep({true, false, true, true, true, true});
  EXPECT_EQ(drop_b, ks.KeepAll());  // b stays: nothing to free around the boundary
  EXPECT_TRUE(ks.Recomputations(drop_b).empty());
  // Dropping a as well: a is recomputed once, for the backward (ga), not for d.
  const KeepPolicy drop_ab = ks.FromKeep({false, false, true, true, true, true});
  const std::vector<Recomputation> r = ks.Recomputations(drop_ab);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].node, a);
  EXPECT_GE(r[0].position, ks.forward_boundary());
  ExpectAgreesWithSimulator(ks, drop_ab, "drop a and b");
}

TEST(KeepSetSchedule, ForwardOnlyGraphCutsAtDistantConsumers) {
  ir::Graph g("skip");
  const ir::NodeId a = AddOpaque(g, "a", 100, 1, {});
  const ir::NodeId b = AddOpaque(g, "b", 1, 1, {a});
  const ir::NodeId c = AddOpaque(g, "c", 1, 1, {b});
  const ir::NodeId d = AddOpaque(g, "d", 1, 1, {c});
  AddOpaque(g, "e", 1, 1, {d, a});
  const RematProblem p = Problem(g);
  KeepSetScheduler ks(p);
  EXPECT_FALSE(ks.has_backward());
  ASSERT_EQ(ks.CutsOf(a).size(), 1u);
  EXPECT_EQ(ks.cut(ks.CutsOf(a)[0]).at, 4);
  // Keep-all holds a (100) until e: peak 100 + 1 + 1 = 102 at c (b freed after c), and at e: a+d+e.
  EXPECT_EQ(ks.Evaluate(ks.KeepAll()).peak, 102);
  // Cut a: freed after b, recomputed for e: peak a+b = 101 at b, and d + a + e = 102 at e.
  const KeepPolicy cut_a = ks.FromKeep({false, true, true, true, true});
  const KeepSetEvaluation e = ks.Evaluate(cut_a);
  EXPECT_EQ(e.peak, 102);
  EXPECT_DOUBLE_EQ(e.cost, 6.0);
  ExpectAgreesWithSimulator(ks, cut_a, "cut a");
}

// x (1 B, cost 10) -> y (100 B) read by z2 and, at the end, by e5 after the chain z2 -> z3 -> z4.
ir::Graph HoldGraph() {
  ir::Graph g("hold");
  const ir::NodeId x = AddOpaque(g, "x", 1, 10, {});
  const ir::NodeId y = AddOpaque(g, "y", 100, 1, {x});
  const ir::NodeId z2 = AddOpaque(g, "z2", 1, 1, {y});
  const ir::NodeId z3 = AddOpaque(g, "z3", 1, 1, {z2});
  const ir::NodeId z4 = AddOpaque(g, "z4", 1, 1, {z3});
  AddOpaque(g, "e", 1, 1, {z4, y});
  return g;
}

TEST(KeepSetSchedule, HoldingAnInputStopsTheRecomputationThere) {
  const ir::Graph g = HoldGraph();
  const RematProblem p = Problem(g);
  KeepSetScheduler ks(p);
  KeepPolicy policy = ks.FromKeep({true, false, true, true, true, true});
  // Without a hold, e's step recomputes x (freed after y) and then y: cost 15 + 10 + 1.
  KeepSetEvaluation e = ks.Evaluate(policy);
  EXPECT_DOUBLE_EQ(e.cost, 26.0);
  EXPECT_EQ(e.peak, 102);  // z4 + x + y, then e
  // Holding x until position 5 keeps its byte resident: only y is recomputed.
  policy.hold[0] = 5;
  e = ks.Evaluate(policy);
  EXPECT_DOUBLE_EQ(e.cost, 16.0);
  // x + y + z2 = 102 at z2; at e's step x goes right after recomputing y: z4 + y + e = 102.
  EXPECT_EQ(e.peak, 102);
  EXPECT_EQ(e.peak_position, 2);
  ExpectAgreesWithSimulator(ks, policy, "hold x until 5");
}

TEST(KeepSetSchedule, AHoldEndingWithoutAUseFreesAtTheEndOfItsStep) {
  const ir::Graph g = HoldGraph();
  const RematProblem p = Problem(g);
  KeepSetScheduler ks(p);
  KeepPolicy policy = ks.FromKeep({true, false, true, true, true, true});
  policy.hold[0] = 3;  // x stays through z3's step, then goes; e's step recomputes it anyway
  const std::vector<Step> steps = ks.Schedule(policy);
  const auto z3 = std::find(steps.begin(), steps.end(), Step{StepKind::kCompute, 3});
  ASSERT_NE(z3, steps.end());
  // After computing z3: free z2 (its input), then the expired hold of x.
  EXPECT_EQ(*(z3 + 1), (Step{StepKind::kFree, 2}));
  EXPECT_EQ(*(z3 + 2), (Step{StepKind::kFree, 0}));
  EXPECT_DOUBLE_EQ(ks.Evaluate(policy).cost, 26.0);
  ExpectAgreesWithSimulator(ks, policy, "hold x until 3");
}

TEST(KeepSetSchedule, OverflowCountsBytesOverBudgetAfterEachCompute) {
  const ir::Graph g = SmallChain();
  const RematProblem p = Problem(g);
  KeepSetScheduler ks(p);
  const KeepSetEvaluation e = ks.Evaluate(ks.KeepAll(), 34);
  // Resident after each compute: a 10, b 30, c 35, gc 40 (a b c gc), gb 55 (a b gc gb), ga 40 (a gb ga).
  EXPECT_DOUBLE_EQ(e.overflow, (35 - 34) + (40 - 34) + (55 - 34) + (40 - 34));
}

TEST(KeepSetSchedule, SnapshotListsIdleTensorsAtThePeak) {
  const ir::Graph g = SmallChain();
  const RematProblem p = Problem(g);
  KeepSetScheduler ks(p);
  const KeepSetEvaluation e = ks.Evaluate(ks.KeepAll());
  EXPECT_EQ(e.peak_position, 4);  // gb
  const ResidentSnapshot s = ks.Snapshot(ks.KeepAll(), e.peak_compute);
  EXPECT_EQ(s.position, 4);
  EXPECT_EQ(s.computed, 4);
  // Resident after gb: a, b, gc, gb; b and gc were gb's inputs (freed right after, not idle), gb just computed.
  EXPECT_EQ(s.idle, (std::vector<ir::NodeId>{0}));
}

TEST(KeepSetSchedule, AgreesWithTheSimulatorOnRandomTrainingGraphs) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const ir::Graph g = RandomTrainingGraph(rng, 3 + trial % 25);
    const RematProblem p = Problem(g);
    KeepSetScheduler ks(p);
    for (unsigned percent : {0u, 20u, 60u, 100u}) {
      ExpectAgreesWithSimulator(ks, RandomPolicy(ks, rng, percent), "trial " + std::to_string(trial));
      std::vector<bool> keep(static_cast<size_t>(g.size()));
      for (size_t i = 0; i < keep.size(); ++i) keep[i] = rng() % 100 >= percent;
      ExpectAgreesWithSimulator(ks, ks.FromKeep(keep), "keep, trial " + std::to_string(trial));
    }
    EXPECT_EQ(ks.Evaluate(ks.KeepAll()).peak, p.checkpoint_all_peak);
    EXPECT_DOUBLE_EQ(ks.Evaluate(ks.KeepAll()).cost, p.baseline_cost);
  }
}

TEST(KeepSetSchedule, SchedulesAreCheckmateStageSchedules) {
  // The MILP is warm-started from keep-set schedules: their stage form must be valid, same peak and cost.
  std::mt19937 rng(29);
  for (int trial = 0; trial < 30; ++trial) {
    const ir::Graph g = trial % 2 ? RandomTrainingGraph(rng, 5 + trial) : RandomForwardGraph(rng, 8 + trial);
    const RematProblem p = Problem(g);
    KeepSetScheduler ks(p);
    const KeepPolicy policy = RandomPolicy(ks, rng, 40);
    const std::optional<StageSolution> stages = StoredSetsOfSchedule(p, ks.Schedule(policy));
    ASSERT_TRUE(stages.has_value());
    const StageGraph sg = MakeStageGraph(p);
    const Status valid = CheckStageSolution(sg, *stages);
    EXPECT_TRUE(valid.ok()) << (valid.ok() ? "" : valid.error().message);
    const KeepSetEvaluation e = ks.Evaluate(policy);
    EXPECT_EQ(StagePeakMemory(sg, *stages), e.peak) << "trial " << trial;
    EXPECT_NEAR(StageCost(sg, *stages), e.cost, 1e-9 * e.cost) << "trial " << trial;
  }
}

TEST(KeepSetSchedule, AgreesWithTheSimulatorOnRandomForwardGraphs) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const ir::Graph g = RandomForwardGraph(rng, 4 + trial);
    const RematProblem p = Problem(g);
    KeepSetScheduler ks(p);
    for (unsigned percent : {10u, 50u, 100u}) ExpectAgreesWithSimulator(ks, RandomPolicy(ks, rng, percent), "fwd");
    EXPECT_EQ(ks.Evaluate(ks.KeepAll()).peak, p.checkpoint_all_peak);
  }
}

TEST(KeepSetSchedule, AgreesWithTheSimulatorOnTheBenchmarkGraphs) {
  const std::filesystem::path dir = std::filesystem::path(KIWI_SHARED_DIR) / "benchmarks" / "remat";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  std::mt19937 rng(3);
  int graphs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    Result<ir::Graph> g = io::ReadGraphFile(entry.path().string());
    ASSERT_TRUE(g.ok()) << g.error().message;
    const RematProblem p = Problem(*g);
    KeepSetScheduler ks(p);
    EXPECT_EQ(ks.Evaluate(ks.KeepAll()).peak, p.checkpoint_all_peak) << entry.path();
    EXPECT_EQ(ks.has_backward(), g->NumNodes(ir::Pass::kBackward) > 0);
    ExpectAgreesWithSimulator(ks, ks.FromKeep(std::vector<bool>(static_cast<size_t>(g->size()), false)), "none");
    for (unsigned percent : {5u, 30u}) ExpectAgreesWithSimulator(ks, RandomPolicy(ks, rng, percent), entry.path());
    ++graphs;
  }
  EXPECT_GE(graphs, 5);
}

}  // namespace
}  // namespace kiwi::solve::remat
