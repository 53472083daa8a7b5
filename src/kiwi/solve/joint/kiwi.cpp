// KIWI's reduced formulation solved end to end (kiwi.h): least peak, warm starts, MILP, replay, and
// the portfolio check against the plans it was given.
#include "kiwi/solve/joint/kiwi.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "kiwi/solve/joint/alternating.h"
#include "kiwi/solve/joint/baselines.h"
#include "kiwi/solve/joint/model_spec.h"
#include "kiwi/solve/joint/solve_milp.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::joint {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }
using Clock = std::chrono::steady_clock;

void Say(const JointSolveOptions& o, const std::string& line) {
  if (o.progress) o.progress("kiwi: " + line);
}

// Warm starts: the least-peak decision, and every portfolio plan projected onto the family (both
// ways of resolving eq. 9) and without its recomputation.
std::vector<JointSolution> WarmStarts(const JointProblem& p, const JointSolveOptions& o, const JointSolution& least) {
  std::vector<JointSolution> starts = {least};
  starts.insert(starts.end(), o.hints.begin(), o.hints.end());
  for (const JointResult* r : o.portfolio) {
    if (r == nullptr || r->solution.strategy.size() != Z(p.graph->size())) continue;
    starts.push_back(ProjectOntoReduced(p, *r, true));
    starts.push_back(ProjectOntoReduced(p, *r, false));
    starts.push_back(WithoutRecompute(r->solution.strategy));
  }
  return starts;
}

// Alternating descent (alternating.h) from the fastest strategies known: the unconstrained optimum's
// and the feasible portfolio plans', fastest first, then the layer search (ImproveByLayers) on the best.
constexpr double kAlternatingShare = 0.5;  // of the time left: descents get half of it, the layer search the rest
Result<std::vector<JointSolution>> AlternatingStarts(const JointProblem& p, const JointSolveOptions& o,
                                                     const JointSolution& least, double seconds) {
  std::vector<const JointResult*> from;
  if (o.unconstrained != nullptr && o.unconstrained->feasible) from.push_back(o.unconstrained);
  for (const JointResult* r : o.portfolio)
    if (r != nullptr && r->feasible && r->sim.peak_memory_bytes <= p.budget) from.push_back(r);
  std::stable_sort(from.begin(), from.end(), [](const JointResult* a, const JointResult* b) { return a->seconds() < b->seconds(); });
  std::vector<const ir::Solution*> strategies;
  for (const JointResult* r : from)
    if (r->solution.strategy.size() == Z(p.graph->size())) strategies.push_back(&r->solution.strategy);
  strategies.push_back(&least.strategy);  // always fits (its recomputation reaches the least peak)
  std::vector<JointSolution> out;
  size_t best = 0;  // the cheapest in `out`
  int64_t best_cost = 0;
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < strategies.size(); ++i) {
    const double share = (0.5 * seconds - SecondsSince(start)) / static_cast<double>(strategies.size() - i);
    if (share <= 0.5) break;
    Result<std::optional<JointSolution>> s = AlternateFrom(p, *strategies[i], o, share);
    if (!s) return s.error();
    if (!*s) continue;
    const int64_t cost = EvaluateJoint(p, **s).cost;
    if (out.empty() || cost < best_cost) best = out.size(), best_cost = cost;
    out.push_back(**s);
  }
  if (!out.empty()) {  // the best descent result, polished layer by layer with the rest of the time
    Result<JointSolution> polished = ImproveByLayers(p, out[best], o, seconds - SecondsSince(start));
    if (!polished) return polished.error();
    out.push_back(*std::move(polished));
  }
  return out;
}

// `solution` (not from a MILP) as the reduced family's plan.
Result<JointResult> PlanOf(const JointProblem& p, const JointSolution& solution, JointResult partial,
                           std::string note, Clock::time_point start) {
  const JointEvaluation e = EvaluateJoint(p, solution);
  partial.solution = solution;
  partial.claimed_cost = e.cost;
  partial.claimed_peak = e.peak;
  partial.optimal = false;
  partial.note = std::move(note);
  Result<plan::OperatorPlan> plan = JointPlan(p, solution);
  if (!plan) return plan.error();
  partial.solve_seconds = SecondsSince(start);
  return FinishJoint(p, *std::move(plan), std::move(partial));
}

// The time limit is spent before the search starts (the portfolio's setup can spend it on a large
// model; building the least-peak MILP alone takes over a second at 200 GPT layers): the smallest
// layouts without recomputation stand for the reduced family, as its plan when they fit.
Result<JointResult> OutOfTime(const JointProblem& p, JointResult partial, Clock::time_point start) {
  const JointSolution smallest = WithoutRecompute(SmallestStrategies(p));
  const int64_t peak = EvaluateJoint(p, smallest).peak;
  partial.smallest_known_budget = LeastKnownBudget(partial.smallest_known_budget, peak);
  if (peak <= p.budget)
    return PlanOf(p, smallest, std::move(partial), "time limit: the smallest layouts, no recomputation", start);
  partial.note = "the time limit was reached before the reduced family was searched";
  partial.timed_out = true;
  partial.solve_seconds = SecondsSince(start);
  return partial;
}

// The MILP's answer (or the unconstrained optimum when it fits) as a reduced-family result.
Result<JointResult> SolveReduced(const JointProblem& p, const JointSolveOptions& o, const JointSolution& least,
                                 JointResult partial, Clock::time_point start) {
  JointModelSpec spec = KiwiSpec(p);
  PruneImpliedRows(spec);
  Result<std::optional<JointMilpResult>> free = UnconstrainedOptimumIfItFits(p, spec, o, 0.3 * o.time_limit_seconds);
  if (!free) return free.error();
  JointMilpResult best;
  if (*free) {
    best = **free;
  } else {
    std::vector<JointSolution> starts = WarmStarts(p, o, least);
    Result<std::vector<JointSolution>> improved = AlternatingStarts(p, o, least, kAlternatingShare * (o.time_limit_seconds - SecondsSince(start)));
    if (!improved) return improved.error();
    starts.insert(starts.end(), improved->begin(), improved->end());
    JointMilpOptions m = MilpOptions(o, o.time_limit_seconds - SecondsSince(start));
    m.warm_starts = std::move(starts);
    m.progress = [&o](const std::string& line) { Say(o, line); };
    Result<JointMilpResult> r = SolveJointMilp(p, spec, m);
    if (!r) return r.error();
    best = *std::move(r);
  }
  if (!best.has_solution) {
    partial.note = best.note;
    partial.solve_seconds = SecondsSince(start);
    return partial;
  }
  const JointEvaluation e = EvaluateJoint(p, best.solution);
  partial.solution = best.solution;
  partial.claimed_cost = e.cost;
  partial.claimed_peak = e.peak;
  partial.optimal = best.optimal;
  if (best.lower_bound) partial.lower_bound_seconds = p.Seconds(static_cast<int64_t>(*best.lower_bound));
  partial.note = fmt::format("{}; {} tensors recomputed", best.note, e.recomputed);
  Result<plan::OperatorPlan> plan = JointPlan(p, best.solution);
  if (!plan) return plan.error();
  partial.solve_seconds = SecondsSince(start);
  return FinishJoint(p, *std::move(plan), std::move(partial));
}

// A portfolio plan the simulator finds faster (or feasible where the reduced family is not) wins.
JointResult BestOfPortfolio(const JointProblem& p, const JointSolveOptions& o, JointResult kiwi) {
  const JointResult* better = nullptr;
  for (const JointResult* r : o.portfolio) {
    if (r == nullptr || !r->feasible || r->sim.peak_memory_bytes > p.budget) continue;
    const double best = better != nullptr ? better->seconds() : kiwi.feasible ? kiwi.seconds() : 1e300;
    if (r->seconds() < best * (1.0 - 1e-12)) better = r;
  }
  if (better == nullptr) return kiwi;
  JointResult out = *better;
  out.method = kiwi.method;
  out.reduced_family = false;
  out.optimal = false;
  out.lower_bound_seconds.reset();
  out.solve_seconds = kiwi.solve_seconds;
  out.smallest_known_budget = kiwi.smallest_known_budget;
  out.note = fmt::format("the plan of {} (outside the reduced family) is faster than the reduced formulation's ({})",
                         better->method, kiwi.feasible ? fmt::format("{:.6g} s", kiwi.seconds()) : kiwi.note);
  Say(o, out.note);
  return out;
}

}  // namespace

JointSolution ProjectOntoReduced(const JointProblem& p, const JointResult& result, bool prefer_consumers) {
  JointSolution s = WithoutRecompute(result.solution.strategy);
  std::vector<int32_t> computes(Z(p.graph->size()), 0);
  for (const plan::Step& step : result.plan.schedule)
    if (step.kind == plan::StepKind::kCompute) ++computes[Z(step.node)];
  for (size_t v = 0; v < computes.size(); ++v) s.recompute[v] = computes[v] > 1 && p.timing[v].candidate;
  if (result.reduced_family && result.solution.recompute.size() == computes.size()) s.recompute = result.solution.recompute;
  std::vector<ir::NodeId> by_position = p.order;
  if (prefer_consumers) std::reverse(by_position.begin(), by_position.end());
  for (ir::NodeId v : by_position) {
    if (!s.recompute[Z(v)]) continue;
    for (ir::NodeId in : p.graph->node(v).inputs) {
      if (!s.recompute[Z(in)]) continue;
      if (prefer_consumers) s.recompute[Z(in)] = 0;
      else s.recompute[Z(v)] = 0;
    }
  }
  for (size_t v = 0; v < s.strategy.size(); ++v)  // a strategy pruned since: fall back to the first allowed
    if (!std::binary_search(p.allowed[v].begin(), p.allowed[v].end(), s.strategy[v])) s.strategy[v] = p.allowed[v].front();
  return s;
}

Result<int64_t> SmallestReducedPeak(const JointProblem& p, const JointSolveOptions& o, JointSolution* best) {
  const ir::Solution smallest = SmallestStrategies(p);
  const JointProblem least = WithStrategiesFixed(p, smallest);  // every node at its smallest layout
  JointModelSpec spec = KiwiSpec(least);
  PruneImpliedRows(spec);
  // A tenth of the time, at least a second where the limit allows it (never over half: a 1 s floor
  // took 0.96 s of a 0.1 s limit).
  const double limit = o.time_limit_seconds;
  JointMilpOptions m = MilpOptions(o, std::min(0.5 * limit, std::max(1.0, 0.1 * limit)));
  m.min_peak = true;
  m.relative_gap = 0.0;
  m.warm_starts = {WithoutRecompute(smallest)};
  Result<JointMilpResult> r = SolveJointMilp(least, spec, m);
  if (!r) return r.error();
  if (!r->has_solution) return Internal("kiwi: no decision for the least peak (the warm start always is one)");
  if (best != nullptr) *best = r->solution;
  return r->evaluation.peak;
}

Result<JointResult> SolveKiwi(const JointProblem& p, const JointSolveOptions& o) {
  const Clock::time_point start = Clock::now();
  JointResult partial;
  partial.method = "kiwi";
  partial.reduced_family = true;
  partial.smallest_known_budget = PortfolioSmallestKnownBudget(o);
  if (o.time_limit_seconds <= 0.0) {
    Say(o, "the time limit is reached: the smallest layouts stand for the reduced family");
    Result<JointResult> spent = OutOfTime(p, std::move(partial), start);
    if (!spent) return spent.error();
    return BestOfPortfolio(p, o, *std::move(spent));
  }
  JointSolution least;
  Result<int64_t> floor = SmallestReducedPeak(p, o, &least);
  if (!floor) return floor.error();
  partial.smallest_known_budget = LeastKnownBudget(partial.smallest_known_budget, *floor);
  Say(o, fmt::format("least peak of the reduced family: {} bytes", *floor));
  if (*floor > p.budget) {
    partial.note = fmt::format("the budget is below the least peak of the reduced family ({} bytes)", *floor);
    partial.solve_seconds = SecondsSince(start);
    return BestOfPortfolio(p, o, std::move(partial));
  }
  Result<JointResult> kiwi =
      SecondsSince(start) >= o.time_limit_seconds  // the least-peak decision fits: the plan when no time is left
          ? PlanOf(p, least, partial, "time limit: the least-peak decision of the reduced family", start)
          : SolveReduced(p, o, least, partial, start);
  if (!kiwi) return kiwi.error();
  return BestOfPortfolio(p, o, *std::move(kiwi));
}

}  // namespace kiwi::solve::joint
