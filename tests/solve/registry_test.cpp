// The one solver contract (solve/registry.h): every registered solver runs through Run on a small
// target of its family and its plan replays to its claims; names are unique per family; a target of
// another family is bad input; a solver whose claims the judge denies is an internal error.
#include "kiwi/solve/registry.h"

#include <gtest/gtest.h>

#include <set>

#include "joint_test_util.h"
#include "kiwi/cost/cluster.h"
#include "kiwi/models/layer_model.h"
#include "kiwi/models/presets.h"
#include "kiwi/solve/remat/chain.h"
#include "kiwi/solve/remat/solvers.h"
#include "remat_test_util.h"
#include "sharding_test_util.h"

namespace kiwi::solve {
namespace {

// Small targets of each family, built once.
struct Targets {
  ir::Graph chain;  // a training chain (every remat solver, the chain DP too, takes it)
  remat::RematProblem remat;
  ir::ShardingProblem sharding;
  ir::Graph transformer;
  joint::JointProblem joint;
  cost::Cluster cluster;
  std::optional<cost::CostModel> layer_costs;
  cost::LayerModel layers;
  std::optional<hybrid::PlanRequest> plan_request;
  hybrid::HybridSearchOptions hybrid_options;
  std::vector<joint::JointResult> joint_baselines;  // KIWI's portfolio, as kiwi joint gives it

  Targets() {
    remat::TrainingChainSpec spec;
    spec.forward_bytes = {4, 6, 5, 7, 3, 6, 4, 5};
    spec.backward_bytes = {5, 4, 6, 3, 7, 4, 6, 5};
    spec.forward_cost = {1, 2, 1, 3, 2, 1, 2, 1};
    spec.backward_cost = {2, 3, 2, 4, 3, 2, 3, 2};
    chain = remat::BuildTrainingChain(spec);
    remat = remat::test_util::Problem(chain, int64_t{1} << 40);
    remat.budget = remat.checkpoint_all_peak;  // every baseline fits; the tighter budget is auto's test below
    sharding = sharding::test_util::RandomShardingProblem(7, 12, 3, 0.3, 0.5);
    transformer = joint::test_util::SmallTransformer("gpt", 1);
    joint = joint::test_util::Problem(transformer, sharding::test_util::Mesh1d(2), int64_t{1} << 40);
    Result<models::ModelSpec> gpt = models::LoadModel("gpt", {.layers = 2});
    Result<cost::Cluster> c = cost::ClusterPreset("v100-nvlink-8");
    EXPECT_TRUE(gpt && c);
    cluster = *c;
    layer_costs.emplace(cluster.device);
    Result<cost::LayerModel> m = models::BuildSpecLayerModel(*gpt, *layer_costs);
    EXPECT_TRUE(m);
    layers = *m;
    plan_request.emplace(hybrid::PlanRequest{.model = layers,
                                             .cluster = cluster,
                                             .cost_model = *layer_costs,
                                             .memory_budget_bytes = cluster.device.memory_bytes,
                                             .global_batch = models::SpecBatch(*gpt)});
    hybrid_options.memory_budget_bytes = cluster.device.memory_bytes;
    hybrid_options.global_batch = models::SpecBatch(*gpt);
    for (joint::JointMethod m : {joint::JointMethod::kAlpa, joint::JointMethod::kCkptDots}) {
      joint::JointSolveOptions o;
      o.time_limit_seconds = 20;
      o.threads = 1;
      Result<joint::JointResult> r = joint::SolveJoint(joint, m, o);
      EXPECT_TRUE(r && r->feasible);
      if (r) joint_baselines.push_back(*std::move(r));
    }
  }

  std::vector<const joint::JointResult*> Portfolio() const {
    std::vector<const joint::JointResult*> out;
    for (const joint::JointResult& r : joint_baselines) out.push_back(&r);
    return out;
  }

  Target Of(Family family) const {
    switch (family) {
      case Family::kRemat: return RematTarget{remat, remat::test_util::Costs()};
      case Family::kSharding: return ShardingTarget{sharding};
      case Family::kJoint: return JointTarget{joint, Portfolio()};
      case Family::kLayers: return LayersTarget{*plan_request};
      case Family::kHybrid: return HybridTarget{layers, cluster, *layer_costs, hybrid_options};
    }
    return RematTarget{remat, remat::test_util::Costs()};
  }
};

const Targets& Small() {
  static const Targets targets;
  return targets;
}

TEST(Registry, NamesAreUniquePerFamilyAndFound) {
  std::set<std::pair<Family, std::string>> seen;
  for (const Solver& s : Solvers()) {
    EXPECT_TRUE(seen.insert({s.family, s.name}).second) << s.name;
    EXPECT_EQ(FindSolver(s.family, s.name), &s);
    EXPECT_FALSE(s.summary.empty()) << s.name;
  }
  EXPECT_EQ(FindSolver(Family::kRemat, "no such solver"), nullptr);
  // the subcommands' names are the registry's
  EXPECT_EQ(SolverNames(Family::kRemat), remat::SolverNames());
  EXPECT_EQ(SolverNames(Family::kJoint), joint::JointMethodNames());
  EXPECT_EQ(SolverNames(Family::kLayers).size(), hybrid::LayerPlanners().size());
  EXPECT_EQ(SolverNames(Family::kHybrid), hybrid::MethodNames());
  EXPECT_EQ(SolverNames(Family::kSharding), (std::vector<std::string>{"auto", "fast", "ilp"}));
}

// Every solver of every family answers its small target with a plan the judge confirms (RunSolver checks;
// this asserts that it said so): the claims are the judge's numbers and a bound never exceeds them.
TEST(Registry, EverySolverRunsAndItsClaimsAreTheJudges) {
  for (const Solver& s : Solvers()) {
    SCOPED_TRACE(FamilyName(s.family) + "/" + s.name);
    // 2 s: every solver but kiwi-full (the full stage MILP: its incumbent at the limit) proves within it
    Result<SolveOutcome> out = RunSolver(s, {.target = Small().Of(s.family), .time_limit_seconds = 2, .threads = 1});
    ASSERT_TRUE(out) << out.error().message;
    EXPECT_EQ(out->solver, FamilyName(s.family) + "/" + s.name);
    EXPECT_EQ(out->family, s.family);
    EXPECT_EQ(out->result.index(), static_cast<size_t>(s.family));
    ASSERT_TRUE(out->HasPlan()) << TerminationName(out->termination) << ": " << out->notes;
    if (s.family == Family::kJoint || s.name == "ilp") {
      EXPECT_FALSE(out->notes.empty());  // they say how they ended
    }
    EXPECT_GT(out->claims.objective, 0.0);
    EXPECT_GT(out->claims.peak_bytes, 0);
    EXPECT_LE(out->bound.value_or(0.0), out->claims.objective * (1 + 1e-9));
  }
}

TEST(Registry, ATargetOfAnotherFamilyIsBadInput) {
  const Solver* ilp = FindSolver(Family::kRemat, "ilp");
  ASSERT_NE(ilp, nullptr);
  Result<SolveOutcome> out = RunSolver(*ilp, {.target = Small().Of(Family::kSharding)});
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kBadInput);
  EXPECT_NE(out.error().message.find("remat/ilp"), std::string::npos) << out.error().message;
  out = RunSolver(*ilp, {.target = Small().Of(Family::kRemat), .time_limit_seconds = -1});
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kBadInput);
}

// Below the checkpoint-all peak the exact solvers recompute, and their schedule still replays to their claims.
TEST(Registry, RecomputingSchedulesReplayToTheirClaims) {
  remat::RematProblem tighter = Small().remat;
  tighter.budget = (3 * tighter.checkpoint_all_peak + remat::MemoryLowerBound(tighter)) / 4;
  for (const char* name : {"auto", "ilp", "chain-dp", "heuristic"}) {
    Result<SolveOutcome> out = RunSolver(*FindSolver(Family::kRemat, name),
                                         {.target = RematTarget{tighter, remat::test_util::Costs()}, .time_limit_seconds = 20});
    ASSERT_TRUE(out) << name << ": " << out.error().message;
    ASSERT_TRUE(out->HasPlan()) << name << ": " << out->notes;
    EXPECT_LE(out->claims.peak_bytes, tighter.budget) << name;
    EXPECT_GT(out->claims.objective, tighter.baseline_cost) << name;  // it recomputes
  }
}

// A budget below every plan: a termination (infeasible, with the smallest budget known), not an error.
TEST(Registry, AnImpossibleBudgetIsATermination) {
  const remat::RematProblem tight = remat::test_util::Problem(Small().chain, 1);
  Result<SolveOutcome> out =
      RunSolver(*FindSolver(Family::kRemat, "auto"), {.target = RematTarget{tight, remat::test_util::Costs()}, .time_limit_seconds = 5});
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->termination, Termination::kInfeasible);
  EXPECT_GT(out->smallest_known_budget, 1);
  ir::ShardingProblem impossible = Small().sharding;
  impossible.usage_limit = 0;
  out = RunSolver(*FindSolver(Family::kSharding, "auto"), {.target = ShardingTarget{impossible}, .time_limit_seconds = 5});
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->termination, Termination::kInfeasible);
  EXPECT_FALSE(out->notes.empty());
}

// KIWI's full MILP with no time to build its model and no portfolio to fall back on: no plan, because of
// the time limit (not an infeasible budget), and the note says so.
TEST(Registry, TheFullMilpOutOfTimeIsNoPlanNotInfeasible) {
  Result<SolveOutcome> out = RunSolver(*FindSolver(Family::kJoint, "kiwi-full"),
                                       {.target = JointTarget{Small().joint}, .time_limit_seconds = 0, .threads = 1});
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->termination, Termination::kNoPlan) << out->notes;
  EXPECT_NE(out->notes.find("not solved"), std::string::npos) << out->notes;
}

// A solver that reports a plan with numbers its judge does not give: RunSolver refuses it for every family.
TEST(Registry, AClaimTheJudgeDeniesIsAnInternalError) {
  for (Family family : {Family::kRemat, Family::kSharding, Family::kJoint, Family::kLayers, Family::kHybrid}) {
    SCOPED_TRACE(FamilyName(family));
    const Solver* honest = FindSolver(family, SolverNames(family).front());
    ASSERT_NE(honest, nullptr);
    const SolveRequest request{.target = Small().Of(family), .time_limit_seconds = 20, .threads = 1};
    for (int lie : {0, 1}) {
      Solver liar = *honest;
      liar.run = [honest, lie](const SolveRequest& r) -> Result<SolveOutcome> {
        Result<SolveOutcome> out = honest->run(r);
        if (out && lie == 0) out->claims.objective *= 0.5;  // faster than it is
        if (out && lie == 1) out->claims.peak_bytes -= 1;   // a byte less than it needs
        return out;
      };
      Result<SolveOutcome> out = RunSolver(liar, request);
      ASSERT_FALSE(out) << "lie " << lie;
      EXPECT_EQ(out.error().code, ErrorCode::kInternal);
    }
    Solver wrong_family = *honest;
    wrong_family.run = [](const SolveRequest&) -> Result<SolveOutcome> {
      SolveOutcome out;
      out.termination = Termination::kInfeasible;
      out.result = hybrid::PlanCandidate{};
      return out;
    };
    Result<SolveOutcome> out = RunSolver(wrong_family, request);
    EXPECT_EQ(out.ok(), family == Family::kLayers);
  }
}

}  // namespace
}  // namespace kiwi::solve
