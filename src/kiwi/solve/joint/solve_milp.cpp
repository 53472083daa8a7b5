// Solve and extract (solve_milp.h): pick the MIP start, run CBC, read and judge the answer.
#include "kiwi/solve/joint/solve_milp.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kiwi/solve/joint/milp_builder.h"
#include "kiwi/solve/milp/solve.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::joint {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }
using Clock = std::chrono::steady_clock;


void Say(const JointMilpOptions& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

// The objective a result is ranked by: cost units, or the peak with min_peak.
double Score(const SpecEvaluation& e, bool min_peak) {
  return min_peak ? static_cast<double>(e.peak) : static_cast<double>(e.cost);
}

int64_t Budget(const JointProblem& p, const JointMilpOptions& o) { return o.budget.value_or(p.budget); }

bool Fits(int64_t budget, const SpecEvaluation& e, bool min_peak) {
  return min_peak || (e.peak <= budget && e.cost < ir::kForbiddenCost);
}

// The best admitted, fitting warm start, or none.
std::optional<JointSolution> BestWarmStart(const JointProblem& p, const JointModelSpec& spec, const JointMilpOptions& o) {
  std::optional<JointSolution> best;
  double best_score = 0.0;
  for (const JointSolution& s : o.warm_starts) {
    if (!AdmittedBySpec(p, spec, s)) continue;
    const SpecEvaluation e = EvaluateSpec(p, spec, s);
    if (!Fits(Budget(p, o), e, o.min_peak)) continue;
    if (!best || Score(e, o.min_peak) < best_score) best = s, best_score = Score(e, o.min_peak);
  }
  return best;
}

std::string Describe(const milp::SolveResult& r) {
  switch (r.termination) {
    case milp::Termination::kOptimal: return "optimal";
    case milp::Termination::kFeasible: return fmt::format("time limit, gap {:.3g}%", 100.0 * r.relative_gap());
    case milp::Termination::kInfeasible: return "proven infeasible";
    case milp::Termination::kNoSolution: return "time limit without a solution";
    case milp::Termination::kUnbounded: return "unbounded";
  }
  return "unknown";
}

// Keeps the better of CBC's answer and the warm start (CBC's may fail the exact check by tolerance).
void TakeBest(const JointProblem& p, const JointModelSpec& spec, const JointMilpOptions& o, const JointModel& m,
              const milp::SolveResult& r, const std::optional<JointSolution>& warm, JointMilpResult& out) {
  if (r.has_solution()) {
    JointSolution s = ReadModelSolution(m, p, r.values);
    const SpecEvaluation e = EvaluateSpec(p, spec, s);
    if (AdmittedBySpec(p, spec, s) && Fits(Budget(p, o), e, o.min_peak)) {
      out.has_solution = true, out.solution = std::move(s), out.evaluation = e;
    } else {
      out.note += "; CBC's answer fails the exact check";
    }
  }
  if (warm) {
    const SpecEvaluation e = EvaluateSpec(p, spec, *warm);
    if (!out.has_solution || Score(e, o.min_peak) < Score(out.evaluation, o.min_peak)) {
      if (out.has_solution) out.note += "; the warm start is better";
      out.has_solution = true, out.solution = *warm, out.evaluation = e;
    }
  }
}

// CBC checks the gap only after its root cut loop, which on these models runs far longer than finding
// an incumbent within a few tenths of a percent of the root bound. So it first runs with a short time
// limit; only if that answer is not within the gap does a second run (warm-started from it) get the
// rest of the time.
Result<milp::SolveResult> RunStages(const JointModel& m, const JointProblem& p, const JointModelSpec& spec,
                                    const JointMilpOptions& o, const std::optional<JointSolution>& warm,
                                    Clock::time_point start) {
  constexpr double kFirstStageMin = 20.0, kFirstStageShare = 0.2;
  milp::SolveOptions so;
  so.relative_gap = o.relative_gap;
  so.threads = o.threads;
  so.on_incumbent = [&](const milp::Incumbent& inc) {
    Say(o, fmt::format("milp: incumbent {:.6g}, bound {:.6g} at {:.1f} s", inc.objective, inc.best_bound, inc.seconds));
  };
  if (warm) so.warm_start = ModelAssignment(m, p, spec, *warm);
  const double total = std::max(0.0, o.time_limit_seconds - SecondsSince(start));
  const double first = std::max(kFirstStageMin, kFirstStageShare * total);
  if (total <= 2.0 * first) {
    so.time_limit_seconds = total;
    return milp::Solve(m.model, so);
  }
  so.time_limit_seconds = first;
  Result<milp::SolveResult> r = milp::Solve(m.model, so);
  const bool open = r && (r->termination == milp::Termination::kNoSolution ||
                          (r->termination == milp::Termination::kFeasible && r->relative_gap() > o.relative_gap));
  if (!open) return r;
  Say(o, r->has_solution() ? fmt::format("milp: gap {:.3g}% after the first stage; continuing", 100.0 * r->relative_gap())
                           : std::string("milp: no solution after the first stage; continuing"));
  if (r->has_solution()) {  // restart from its decisions, as an exact assignment (CBC asserts on inexact starts)
    const JointSolution s = ReadModelSolution(m, p, r->values);
    if (AdmittedBySpec(p, spec, s) && Fits(Budget(p, o), EvaluateSpec(p, spec, s), o.min_peak))
      so.warm_start = ModelAssignment(m, p, spec, s);
  }
  so.time_limit_seconds = std::max(0.0, o.time_limit_seconds - SecondsSince(start));
  Result<milp::SolveResult> second = milp::Solve(m.model, so);
  if (second && second->has_solution() && std::isfinite(r->best_bound))
    second->best_bound = std::max(second->best_bound, r->best_bound);  // both are proven
  return second;
}

}  // namespace

bool AdmittedBySpec(const JointProblem& p, const JointModelSpec& spec, const JointSolution& s) {
  const auto n = Z(p.graph->size());
  if (s.strategy.size() != n || s.recompute.size() != n) return false;
  for (size_t v = 0; v < n; ++v) {
    if (!std::binary_search(p.allowed[v].begin(), p.allowed[v].end(), s.strategy[v])) return false;
    if (s.recompute[v] && !spec.recomputable[v]) return false;
  }
  return std::none_of(spec.exclusive.begin(), spec.exclusive.end(),
                      [&](const auto& pair) { return s.recompute[Z(pair.first)] && s.recompute[Z(pair.second)]; });
}

Result<JointMilpResult> SolveJointMilp(const JointProblem& p, const JointModelSpec& spec, const JointMilpOptions& o) {
  const Clock::time_point start = Clock::now();
  const JointModel m = BuildJointModel(p, spec, {.budget = Budget(p, o), .min_peak = o.min_peak});
  JointMilpResult out;
  out.variables = m.model.num_vars(), out.constraints = m.model.num_constraints();
  Say(o, fmt::format("milp: {} variables, {} constraints ({} memory rows), built in {:.2f} s", out.variables,
                     out.constraints, m.budget_rows, SecondsSince(start)));
  std::optional<JointSolution> warm = BestWarmStart(p, spec, o);
  if (warm) Say(o, fmt::format("milp: warm start with objective {:.6g}", m.model.Evaluate(ModelAssignment(m, p, spec, *warm))));
  Result<milp::SolveResult> r = RunStages(m, p, spec, o, warm, start);
  if (!r) return r.error();
  if (r->termination == milp::Termination::kUnbounded) return Internal("joint milp: CBC reports the model unbounded");
  out.note = Describe(*r);
  out.proven_infeasible = r->termination == milp::Termination::kInfeasible && !warm;
  TakeBest(p, spec, o, m, *r, warm, out);
  const double unit = o.min_peak ? m.memory_unit : m.objective_unit;
  if (r->has_solution() && std::isfinite(r->best_bound)) {
    out.lower_bound = r->best_bound * unit;
    if (out.has_solution) out.lower_bound = std::min(*out.lower_bound, Score(out.evaluation, o.min_peak));
  }
  const bool within_gap = out.has_solution && out.lower_bound &&
                          Score(out.evaluation, o.min_peak) - *out.lower_bound <=
                              o.relative_gap * std::max(1.0, Score(out.evaluation, o.min_peak));
  out.optimal = out.has_solution && (r->termination == milp::Termination::kOptimal || within_gap);
  out.seconds = SecondsSince(start);
  Say(o, fmt::format("milp: {} in {:.2f} s", out.note, out.seconds));
  return out;
}

}  // namespace kiwi::solve::joint
