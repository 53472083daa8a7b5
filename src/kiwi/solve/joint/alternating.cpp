// Block coordinate descent between recomputation and strategies (alternating.h).
#include "kiwi/solve/joint/alternating.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "kiwi/solve/joint/baselines.h"
#include "kiwi/solve/joint/model_spec.h"
#include "kiwi/solve/joint/solve_milp.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::joint {
namespace {

using Clock = std::chrono::steady_clock;

JointMilpOptions Quiet(const JointSolveOptions& o, double seconds) {
  JointMilpOptions m = MilpOptions(o, seconds);
  m.progress = nullptr;  // many small solves: the caller reports the outcome
  return m;
}

}  // namespace

JointProblem WithStrategiesFixed(const JointProblem& p, const ir::Solution& strategies) {
  JointProblem fixed = p;
  for (size_t v = 0; v < strategies.size(); ++v) fixed.allowed[v] = {strategies[v]};
  return fixed;
}

Result<std::optional<JointSolution>> BestRecomputation(const JointProblem& p, const ir::Solution& strategies,
                                                       const JointSolveOptions& o, double seconds) {
  const JointProblem fixed = WithStrategiesFixed(p, strategies);
  JointModelSpec spec = KiwiSpec(fixed);
  PruneImpliedRows(spec);
  JointMilpOptions m = Quiet(o, seconds);
  m.warm_starts = {WithoutRecompute(strategies)};
  Result<JointMilpResult> r = SolveJointMilp(fixed, spec, m);
  if (!r) return r.error();
  if (!r->has_solution || !EvaluateJoint(p, r->solution).feasible) return std::optional<JointSolution>();
  return std::optional<JointSolution>(r->solution);
}

Result<std::optional<JointSolution>> BestStrategies(const JointProblem& p, const JointSolution& start,
                                                    const JointSolveOptions& o, double seconds) {
  Result<JointModelSpec> spec = FixedScheduleSpec(p, JointSchedule(p, start.recompute));
  if (!spec) return spec.error();
  PruneImpliedRows(*spec);
  JointMilpOptions m = Quiet(o, seconds);
  m.warm_starts = {WithoutRecompute(start.strategy)};  // the schedule is fixed: no modes in this spec
  Result<JointMilpResult> r = SolveJointMilp(p, *spec, m);
  if (!r) return r.error();
  if (!r->has_solution) return std::optional<JointSolution>();
  JointSolution s{r->solution.strategy, start.recompute};
  if (!EvaluateJoint(p, s).feasible) return std::optional<JointSolution>();
  return std::optional<JointSolution>(std::move(s));
}

Result<std::optional<JointSolution>> AlternateFrom(const JointProblem& p, const ir::Solution& strategies,
                                                   const JointSolveOptions& o, double seconds) {
  const Clock::time_point start = Clock::now();
  auto left = [&] { return seconds - SecondsSince(start); };
  std::optional<JointSolution> best;
  JointEvaluation best_eval;
  // A half-step's answer replaces the best when it fits and is cheaper (eq. 2); reports it.
  auto take = [&](const std::optional<JointSolution>& s, const char* what) {
    const JointEvaluation e = s ? EvaluateJoint(p, *s) : JointEvaluation{};
    if (o.progress) o.progress(s ? fmt::format("alternating: {}: {:.6g} s", what, p.Seconds(e.cost))
                                 : fmt::format("alternating: {}: none fits", what));
    if (!s || !e.feasible || (best && e.cost >= best_eval.cost)) return false;
    best = *s, best_eval = e;
    return true;
  };
  ir::Solution current = strategies;
  for (size_t v = 0; v < current.size(); ++v)  // a strategy pruned from the problem: the first allowed
    if (!std::binary_search(p.allowed[v].begin(), p.allowed[v].end(), current[v])) current[v] = p.allowed[v].front();
  while (left() > 0.0) {
    Result<std::optional<JointSolution>> r = BestRecomputation(p, current, o, std::max(1.0, 0.2 * left()));
    if (!r) return r.error();
    if (!take(*r, "recomputation for fixed strategies") || left() <= 0.0) break;
    Result<std::optional<JointSolution>> s = BestStrategies(p, *best, o, left());
    if (!s) return s.error();
    if (!take(*s, "strategies for fixed recomputation")) break;
    current = best->strategy;
  }
  if (best && o.progress)
    o.progress(fmt::format("alternating: {:.6g} s, {} recomputed, in {:.1f} s", p.Seconds(best_eval.cost),
                           best_eval.recomputed, SecondsSince(start)));
  return best;
}

Result<JointSolution> ImproveByLayers(const JointProblem& p, const JointSolution& start, const JointSolveOptions& o,
                                      double seconds) {
  const Clock::time_point begin = Clock::now();
  auto left = [&] { return seconds - SecondsSince(begin); };
  std::map<int32_t, std::vector<ir::NodeId>> groups;  // by layer; -1: embeddings, head, loss, optimizer
  for (ir::NodeId v = 0; v < p.graph->size(); ++v) groups[p.graph->node(v).layer].push_back(v);
  JointSolution best = start;
  int64_t best_cost = EvaluateJoint(p, best).cost;
  // Passes continue while the previous one gained more than the requested gap (smaller gains are
  // left to the MILP that follows).
  for (bool improved = true; improved && left() > 0.0;) {
    improved = false;
    const int64_t pass_start = best_cost;
    for (const auto& [layer, nodes] : groups) {
      if (left() <= 0.0) break;
      JointProblem hood = WithStrategiesFixed(p, best.strategy);
      for (ir::NodeId v : nodes) hood.allowed[static_cast<size_t>(v)] = p.allowed[static_cast<size_t>(v)];
      JointModelSpec spec = KiwiSpec(hood);
      PruneImpliedRows(spec);
      JointMilpOptions m = Quiet(o, std::min(left(), std::max(5.0, seconds / static_cast<double>(groups.size()))));
      m.warm_starts = {best};
      Result<JointMilpResult> r = SolveJointMilp(hood, spec, m);
      if (!r) return r.error();
      if (!r->has_solution) continue;
      const JointEvaluation e = EvaluateJoint(p, r->solution);
      if (!e.feasible || e.cost >= best_cost) continue;
      best = r->solution, best_cost = e.cost;
      improved = static_cast<double>(pass_start - best_cost) > o.relative_gap * static_cast<double>(pass_start);
      if (o.progress) o.progress(fmt::format("layer search: layer {} -> {:.6g} s", layer, p.Seconds(best_cost)));
    }
  }
  return best;
}

}  // namespace kiwi::solve::joint
