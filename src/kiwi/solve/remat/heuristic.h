#pragma once
// A fast rematerialization heuristic for any DAG (SolverKind::kHeuristic), and the MILP's warm start.
//
// It searches the keep-set family (keep_set_schedule.h: cuts and holds) with greedy + local search:
//  1. reduce: from a start point (keep everything, or a baseline's keep set), while the peak exceeds
//     the budget, take the move with the best memory-time reduction over the budget (or peak
//     reduction) per unit of added compute cost among the tensors idle at the peak: cut the tensor
//     (optionally holding its inputs until it is recomputed), or drop a hold. Only the 16 most
//     promising tensors per step are evaluated exactly (bytes per unit of recomputation cost), and on
//     large graphs a step also applies a few runner-up moves;
//  2. polish: re-keep any tensor whose cut the budget no longer needs, and hold a recomputed tensor
//     until its recomputation instead, whenever the cost drops within the budget;
//  3. improve (the cheapest few schedules): "remove and repair", undo one cut and re-reduce with at
//     most a few steps, accepting when the cost drops; until no move helps or the time limit (with
//     kicks to come, a tenth of the limit for each schedule after the cheapest);
//  4. optionally, kicks (HeuristicOptions::kick_seconds): an iterated local search from the best.
// Three scores x the start points are tried and the cheapest schedule within the budget is kept, so
// the heuristic is never worse than those baselines and equals checkpoint-all whenever that fits.
// Every schedule is a frontier-advancing stage schedule: a valid warm start for the MILP.
//
//   Result<RematResult> r = SolveHeuristic(problem, cost_model, {.time_limit_seconds = 1});
//   if (r && !r->feasible) ... MinimumFeasiblePeak(problem) is the smallest budget it can satisfy.
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiwi/solve/remat/keep_set_schedule.h"
#include "kiwi/solve/remat/problem.h"
#include "kiwi/solve/remat/solvers.h"

namespace kiwi::solve::remat {

struct HeuristicOptions {
  double time_limit_seconds = 10.0;
  int repair_steps = 3;            // greedy steps one remove-and-repair move may take
  bool seed_with_baselines = true; // also start from the baselines' keep sets
  // 4. kick (iterated local search): for this long after step 3, undo 2-8 random cuts of the best
  //    schedule (every third time also reducing to a budget 1-10% lower first), reduce and polish
  //    again, and improve the result unless it costs 1.5x the best; keep the best. Seeded, so a run
  //    is reproducible up to where the time runs out.
  double kick_seconds = 0.0;
  int max_kicks = -1;  // -1: until kick_seconds pass (a count makes a run independent of the clock)
  double lower_bound = 0.0;  // a proven bound on the cost: kicks stop once the best schedule meets it
  // A bound another thread is still proving (auto's residency bound, beside the kicks on a second
  // core): read before each kick, with the same rule.
  const std::atomic<double>* growing_lower_bound = nullptr;
};

struct KeepSetSolution {
  KeepPolicy policy;
  KeepSetEvaluation eval;
  std::string variant;  // which start point and score found it
  bool feasible = false;
};

// The cheapest keep-set schedule within `budget` that the search finds; when none fits, feasible =
// false and the smallest-peak schedule found (MinimumPeakKeepSet).
KeepSetSolution SearchKeepSet(KeepSetScheduler& ks, int64_t budget, const HeuristicOptions& options);

// The smallest peak the search reaches in the keep-set family (a greedy peak descent from keep-all and
// from the baselines' keep sets, the keep-nothing schedule and `extra_starts`): a budget kiwi can
// always satisfy. Never below MemoryLowerBound(problem).
KeepSetSolution MinimumPeakKeepSet(KeepSetScheduler& ks, double time_limit_seconds = 5.0,
                                   std::vector<std::pair<std::string, KeepPolicy>> extra_starts = {});
int64_t MinimumFeasiblePeak(const RematProblem& problem, double time_limit_seconds = 5.0);

// Entry point (solvers.h). Infeasible budgets give feasible = false, an empty schedule, and
// peak_memory / cost of the smallest-peak schedule found (its peak is the smallest budget it can meet).
Result<RematResult> SolveHeuristic(const RematProblem& problem, const cost::CostModel& cost_model,
                                   const RematOptions& options);
// The same with the search's options (options.time_limit_seconds bounds the whole search).
Result<RematResult> SolveHeuristic(const RematProblem& problem, const cost::CostModel& cost_model,
                                   const RematOptions& options, HeuristicOptions heuristic);

}  // namespace kiwi::solve::remat
