#pragma once
// KIWI and its baselines (KIWI paper §4.1) behind one entry point, all judged by the simulator:
//  - kKiwi: the reduced joint formulation (§3.2; problem.h, milp_builder.h), warm-started from the
//    best plan among the baselines it is given, never returning a slower plan than them;
//  - kKiwiFull: the full stage-based formulation (appendix 7.1; full_milp.h), for small graphs;
//  - kAlpa: sharding only (the sharding MILP on the checkpoint-all schedule, with the memory limit);
//  - kCkptDots / kMegatronSelective: the remat heuristic's keep set applied to the graph (the keep-set
//    schedule of solve/remat/keep_set_schedule.h), then the sharding MILP on that schedule.
//
//   Result<JointProblem> p = MakeJointProblem(graph, cost_model, mesh, budget, {});
//   Result<JointResult> alpa = SolveJoint(*p, JointMethod::kAlpa, {});
//   JointSolveOptions o;
//   o.portfolio = {&*alpa};
//   Result<JointResult> kiwi = SolveJoint(*p, JointMethod::kKiwi, o);  // kiwi->sim: the replay
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiwi/plan/plan.h"
#include "kiwi/sim/simulator.h"
#include "kiwi/solve/joint/problem.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::joint {

enum class JointMethod : uint8_t { kKiwi, kKiwiFull, kAlpa, kCkptDots, kMegatronSelective };

std::optional<JointMethod> ParseJointMethod(const std::string& name);  // "kiwi", "kiwi-full", "alpa", ...
std::string JointMethodName(JointMethod method);
std::vector<std::string> JointMethodNames();

struct JointResult;

struct JointSolveOptions {
  double time_limit_seconds = 60.0;
  double relative_gap = 1e-4;
  int threads = 0;  // 0 = all cores
  std::function<void(const std::string&)> progress;  // one line per event, may be empty
  // kKiwi / kKiwiFull: results of other methods on the same problem. Their strategies (with the
  // recomputation projected onto the reduced family) warm-start the MILP, and a feasible one that the
  // simulator finds faster than the MILP's plan is returned instead (note says so).
  std::vector<const JointResult*> portfolio;
  // The same method's result on the same problem without a memory limit (kAlpa's also serves kKiwi:
  // recomputation only adds time). When it fits the budget it is the optimum and no search runs.
  const JointResult* unconstrained = nullptr;
  // More MIP starts for kKiwi and the baselines (e.g. the same method's decisions at a smaller budget,
  // which stay feasible at a larger one: sweeps use them so that more memory is never slower).
  std::vector<JointSolution> hints;
};

struct JointResult {
  std::string method;
  bool feasible = false;              // a plan within the budget was found
  plan::OperatorPlan plan;            // shardings + schedule (empty schedule when infeasible)
  sim::SimResult sim;                 // the simulator's replay of `plan`: the numbers to report
  JointSolution solution;             // strategies (+ recomputation for the reduced family)
  bool reduced_family = false;        // `solution.recompute` describes plan.schedule (JointSchedule)
  int64_t claimed_cost = 0;           // the formulation's own time (units) and peak (bytes) ...
  int64_t claimed_peak = 0;           // ... equal to the simulator's (checked in FinishJoint)
  double solve_seconds = 0.0;
  bool optimal = false;               // proven optimal within the gap, in the method's own space
  std::optional<double> lower_bound_seconds;  // proven, in the method's own space
  std::string note;
  int64_t smallest_known_budget = 0;  // the least peak the method is known to reach (also when infeasible)
  bool timed_out = false;             // infeasible because the time limit was spent before the search

  double seconds() const { return sim.iteration_seconds; }
};

// Errors: kInternal on a backend failure or when a claim disagrees with the simulator (a bug). An
// infeasible budget or a time limit without a plan is a result with feasible = false.
Result<JointResult> SolveJoint(const JointProblem& problem, JointMethod method, const JointSolveOptions& options);

// Replays `plan` in the simulator and fills sim, feasibility and the claims' check: the claimed peak
// must equal the simulator's and the claimed time must agree within the rounding of costs to units.
Result<JointResult> FinishJoint(const JointProblem& problem, plan::OperatorPlan plan, JointResult partial);

}  // namespace kiwi::solve::joint
