// The baselines (baselines.h): their schedules and the exact sharding of a fixed schedule.
#include "kiwi/solve/joint/baselines.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>

#include "kiwi/solve/joint/model_spec.h"
#include "kiwi/solve/joint/solve_milp.h"
#include "kiwi/solve/remat/baselines.h"
#include "kiwi/solve/remat/keep_set_schedule.h"
#include "kiwi/solve/remat/problem.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::joint {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }
using Clock = std::chrono::steady_clock;

void Say(const JointSolveOptions& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

}  // namespace

JointMilpOptions MilpOptions(const JointSolveOptions& o, double seconds) {
  JointMilpOptions m;
  m.time_limit_seconds = std::max(0.0, seconds);
  m.relative_gap = o.relative_gap;
  m.threads = o.threads;
  m.progress = o.progress;
  return m;
}

int64_t PortfolioSmallestKnownBudget(const JointSolveOptions& o) {
  int64_t least = 0;
  for (const JointResult* r : o.portfolio)
    if (r != nullptr) least = LeastKnownBudget(least, r->smallest_known_budget);
  return least;
}

Result<std::vector<plan::Step>> BaselineSchedule(const JointProblem& p, JointMethod method) {
  if (method == JointMethod::kAlpa) return plan::CheckpointAllSchedule(*p.graph);
  if (method != JointMethod::kCkptDots && method != JointMethod::kMegatronSelective)
    return Internal(fmt::format("BaselineSchedule: {} is not a baseline", JointMethodName(method)));
  Result<remat::RematProblem> rp = remat::MakeRematProblem(*p.graph, *p.cost_model, 0);
  if (!rp) return rp.error();
  remat::KeepSetScheduler ks(*rp);
  const std::vector<bool> keep =
      method == JointMethod::kCkptDots ? remat::CheckpointDotsKeep(ks) : remat::MegatronSelectiveKeep(ks);
  if (std::all_of(keep.begin(), keep.end(), [](bool k) { return k; })) return plan::CheckpointAllSchedule(*p.graph);
  return ks.Schedule(ks.FromKeep(keep));
}

Result<std::optional<JointMilpResult>> UnconstrainedOptimumIfItFits(const JointProblem& p, const JointModelSpec& spec,
                                                             const JointSolveOptions& o, double seconds) {
  if (o.unconstrained != nullptr && AdmittedBySpec(p, spec, o.unconstrained->solution)) {
    const SpecEvaluation e = EvaluateSpec(p, spec, o.unconstrained->solution);
    if (e.peak > p.budget) return std::optional<JointMilpResult>();
    JointMilpResult r;
    r.has_solution = r.optimal = o.unconstrained->optimal;
    r.solution = o.unconstrained->solution;
    r.evaluation = e;
    r.note = "the unconstrained optimum fits the budget";
    if (r.has_solution) return std::optional<JointMilpResult>(r);
  }
  JointMilpOptions m = MilpOptions(o, seconds);
  m.budget = std::numeric_limits<int64_t>::max();
  Result<JointMilpResult> r = SolveJointMilp(p, spec, m);
  if (!r) return r.error();
  if (!r->has_solution || r->evaluation.peak > p.budget) return std::optional<JointMilpResult>();
  r->note = "the unconstrained optimum fits the budget (" + r->note + ")";
  return std::optional<JointMilpResult>(*std::move(r));
}

ir::Solution SmallestStrategies(const JointProblem& p) {
  ir::Solution s;
  for (ir::NodeId v = 0; v < p.graph->size(); ++v) {
    const ir::ShardingNode& n = p.lowered.problem.nodes[Z(v)];
    int32_t best = p.allowed[Z(v)].front();
    for (int32_t k : p.allowed[Z(v)])
      if (n.usage[Z(k)] < n.usage[Z(best)] || (n.usage[Z(k)] == n.usage[Z(best)] && n.cost[Z(k)] < n.cost[Z(best)])) best = k;
    s.push_back(best);
  }
  return s;
}

Result<JointResult> SolveFixedSchedule(const JointProblem& p, const std::vector<plan::Step>& schedule,
                                       const std::string& method, const JointSolveOptions& o) {
  const Clock::time_point start = Clock::now();
  Result<JointModelSpec> spec = FixedScheduleSpec(p, schedule);
  if (!spec) return spec.error();
  PruneImpliedRows(*spec);
  JointResult partial;
  partial.method = method;
  const JointSolution smallest = WithoutRecompute(SmallestStrategies(p));
  partial.smallest_known_budget = EvaluateSpec(p, *spec, smallest).peak;  // exact: every term is kMemory
  if (partial.smallest_known_budget > p.budget) {
    partial.note = fmt::format("the budget is below the least peak of this schedule ({} bytes)", partial.smallest_known_budget);
    partial.solve_seconds = SecondsSince(start);
    Say(o, method + ": " + partial.note);
    return partial;
  }
  Result<std::optional<JointMilpResult>> free = UnconstrainedOptimumIfItFits(p, *spec, o, 0.3 * o.time_limit_seconds);
  if (!free) return free.error();
  JointMilpResult best;
  if (*free) {
    best = **free;
  } else {
    JointMilpOptions m = MilpOptions(o, o.time_limit_seconds - SecondsSince(start));
    m.warm_starts = {smallest};
    m.warm_starts.insert(m.warm_starts.end(), o.hints.begin(), o.hints.end());
    Result<JointMilpResult> r = SolveJointMilp(p, *spec, m);
    if (!r) return r.error();
    best = *std::move(r);
  }
  partial.solution = best.solution;
  partial.claimed_cost = best.evaluation.cost;
  partial.claimed_peak = best.evaluation.peak;
  partial.optimal = best.optimal;
  if (best.lower_bound) partial.lower_bound_seconds = p.Seconds(static_cast<int64_t>(*best.lower_bound));
  partial.note = best.note;
  Result<plan::OperatorPlan> plan = sharding::ToOperatorPlan(p.lowered, best.solution.strategy, p.mesh);
  if (!plan) return plan.error();
  plan->schedule = schedule;
  partial.solve_seconds = SecondsSince(start);
  return FinishJoint(p, *std::move(plan), std::move(partial));
}

}  // namespace kiwi::solve::joint
