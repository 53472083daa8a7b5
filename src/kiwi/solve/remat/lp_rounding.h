#pragma once
// Checkmate §5 (LP relaxation + two-phase rounding): solve the LP relaxation of Checkmate's MILP, round
// its stored sets S (deterministically at several thresholds and randomly with a fixed seed), give each
// rounded S its cheapest R (OptimalR) and keep the cheapest one that fits the budget. The LP value is a
// proven lower bound on the MILP's optimum (a relaxation of the same model), hence on the cost of any
// frontier-advancing stage schedule. When no rounding fits, checkpoint-all is tried last (labelled so
// in the note); a budget below MemoryLowerBound returns infeasible without solving.
//
//   RematOptions options;
//   options.time_limit_seconds = 60;
//   Result<RematResult> r = SolveLpRounding(problem, cost_model, options);
//   if (r && r->feasible) fmt::print("{} >= {}\n", r->cost, *r->lower_bound);
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiwi/solve/remat/checkmate_schedule.h"
#include "kiwi/solve/remat/problem.h"
#include "kiwi/solve/remat/solvers.h"

namespace kiwi::solve::remat {

using StoredSets = std::vector<std::vector<uint8_t>>;  // S[t][i], i < t

// Deterministic rounding: S[t][i] = 1 iff s_lp[t][i] > threshold.
StoredSets RoundStored(const std::vector<std::vector<double>>& s_lp, double threshold);

// Randomized rounding: S[t][i] = 1 with probability s_lp[t][i], from a 64-bit seed (portable: no
// std:: distribution, whose output is implementation-defined).
StoredSets RandomlyRoundStored(const std::vector<std::vector<double>>& s_lp, uint64_t seed);

// The rounding thresholds and random draws tried, in order (ties keep the first). Rounded stored sets
// often overshoot the budget by a few percent (a fractional S pays for a fraction of a tensor), so when
// none fits, the LP is solved again with the budget scaled down (leaving the roundings room) until one
// fits; the lower bound is always the LP at the full budget.
struct RoundingPlan {
  std::vector<double> thresholds = {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99};
  int random_draws = 16;
  uint64_t seed = 0x6b697769;  // "kiwi"
  std::vector<double> budget_scales = {1.0, 0.97, 0.94, 0.91, 0.88, 0.85, 0.8, 0.75, 0.7};
};

// The rounding itself, for other solvers (the ILP's warm start): the best fitting stage solution, the
// full-budget LP value (a proven lower bound) and whether that LP is infeasible (then so is the MILP).
struct LpRounding {
  std::optional<StageSolution> best;
  std::optional<double> lp_bound;
  bool lp_infeasible = false;
  std::string note;
};
LpRounding RoundLpRelaxation(const RematProblem& problem, const StageGraph& g, const RematOptions& options,
                             const RoundingPlan& plan = {});

Result<RematResult> SolveLpRounding(const RematProblem& problem, const cost::CostModel& cost_model,
                                    const RematOptions& options, const RoundingPlan& plan = {});

}  // namespace kiwi::solve::remat
