#include "kiwi/solve/remat/residency_bound.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiwi/solve/milp/model.h"
#include "kiwi/solve/milp/solve.h"

namespace kiwi::solve::remat {
namespace {

size_t Z(int32_t i) { return static_cast<size_t>(i); }

// A tensor (by position) between two positions that need it resident: if it is not resident after
// some frontier compute first..last, it is computed again before position last + 1.
struct Gap {
  int32_t tensor = 0;
  int32_t first = 0, last = 0;
};

}  // namespace

ResidencyBound SolveResidencyBound(const RematProblem& problem, const StageGraph& g, double seconds, int threads) {
  ResidencyBound result;
  result.bound = problem.baseline_cost;
  // forced[t]: bytes resident right after the frontier compute of stage t in every schedule.
  std::vector<double> forced;
  for (int64_t bytes : FrontierComputeBytes(problem)) forced.push_back(static_cast<double>(bytes));
  const auto budget = static_cast<double>(problem.budget);
  for (int32_t t = 0; t < g.n; ++t) {
    if (forced[Z(t)] > budget) {
      result.infeasible = true;
      result.note = fmt::format("stage {} needs {} bytes at its own compute", t, static_cast<int64_t>(forced[Z(t)]));
      return result;
    }
  }
  std::vector<Gap> gaps;
  for (int32_t i = 0; i < g.n; ++i) {
    if (g.persistent[Z(i)] || g.cost[Z(i)] <= 0.0) continue;  // never freed, or free to recompute
    int32_t previous = i;
    for (int32_t c : g.children[Z(i)]) {
      if (c > previous + 1) gaps.push_back({i, previous + 1, c - 1});
      previous = c;
    }
  }
  result.gaps = static_cast<int32_t>(gaps.size());
  // Only the stages where forced bytes and every gap covering them could exceed the budget bind.
  std::vector<double> most(forced);
  for (const Gap& gap : gaps)
    for (int32_t t = gap.first; t <= gap.last; ++t) most[Z(t)] += static_cast<double>(g.memory[Z(gap.tensor)]);
  // Rows in ChooseMemoryUnit's unit; the budget is not rounded down, so the model stays a relaxation.
  const double unit = ChooseMemoryUnit(g).bytes;
  milp::Model model;
  milp::Expr objective;  // sum C_i (1 - keep_g)
  std::vector<milp::Expr> rows(Z(g.n));
  for (const Gap& gap : gaps) {
    const milp::Var keep = model.AddBinary();
    const double c = g.cost[Z(gap.tensor)];
    objective.AddConstant(c), objective.Add(keep, -c);
    for (int32_t t = gap.first; t <= gap.last; ++t)
      if (most[Z(t)] > budget) rows[Z(t)].Add(keep, static_cast<double>(g.memory[Z(gap.tensor)]) / unit);
  }
  for (int32_t t = 0; t < g.n; ++t)
    if (most[Z(t)] > budget) model.AddConstraint(rows[Z(t)], -milp::kInf, (budget - forced[Z(t)]) / unit);
  model.SetObjective(objective, milp::Sense::kMinimize);
  if (model.num_constraints() == 0) {  // every gap fits: keeping all costs nothing more
    result.proven_optimal = true;
    return result;
  }
  milp::SolveOptions so;
  so.time_limit_seconds = std::max(0.0, seconds);
  so.threads = threads;
  Result<milp::SolveResult> r = milp::Solve(model, so);
  if (!r) {
    result.note = r.error().message;
    return result;
  }
  if (r->termination == milp::Termination::kInfeasible) {  // cannot be: keeping nothing fits (checked)
    result.note = "the reduced model reports infeasible";
    return result;
  }
  // CBC's bound, also when it calls the incumbent optimal (within its relative gap).
  double least = std::isfinite(r->best_bound) ? r->best_bound : -milp::kInf;
  if (!std::isfinite(least)) {  // out of time before the root: the LP relaxation is a bound too
    milp::SolveOptions lp = so;
    lp.relax_integrality = true;
    Result<milp::SolveResult> relaxed = milp::Solve(model, lp);
    least = relaxed && relaxed->has_solution() ? relaxed->objective : 0.0;
  }
  result.proven_optimal = r->termination == milp::Termination::kOptimal;
  result.bound = problem.baseline_cost + std::max(0.0, least);
  result.note = fmt::format("residency bound: {} gaps, {} binding stages{}", gaps.size(), model.num_constraints(),
                            result.proven_optimal ? "" : " (time limit: CBC's bound)");
  return result;
}

}  // namespace kiwi::solve::remat
