#pragma once
// The KIWI paper's baselines (§4.1), through the same cost model, MILP machinery and simulator as KIWI:
//  - Alpa: sharding only, on the checkpoint-all schedule, within the memory limit;
//  - checkpoint-dots + Alpa, Megatron selective recompute + Alpa: the remat heuristic's keep set
//    (solve/remat/baselines.h) applied to the graph as its keep-set schedule (non-kept forward tensors
//    dropped after the forward pass and recomputed, with their missing ancestors, before their first
//    backward use), then the sharding that is fastest within the memory limit on that schedule.
// Each solves the sharding of a fixed schedule (FixedScheduleSpec) exactly: the smallest peak it can
// reach is closed-form (every node at its smallest layout), the unconstrained optimum is tried first,
// then the budgeted MILP warm-started from the smallest layouts.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kiwi/plan/plan.h"
#include "kiwi/solve/joint/joint.h"
#include "kiwi/solve/joint/problem.h"
#include "kiwi/solve/joint/solve_milp.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::joint {

// The schedule a method runs: checkpoint-all for kAlpa, the heuristic's keep-set schedule for
// kCkptDots / kMegatronSelective (kInternal for other methods).
Result<std::vector<plan::Step>> BaselineSchedule(const JointProblem& problem, JointMethod method);

// Per node, the allowed strategy with the least memory (ties: least cost, then lowest index).
ir::Solution SmallestStrategies(const JointProblem& problem);

// The smaller of two smallest known budgets, where 0 means none is known.
inline int64_t LeastKnownBudget(int64_t a, int64_t b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); }
// The least smallest known budget of the portfolio's results (0: none known).
int64_t PortfolioSmallestKnownBudget(const JointSolveOptions& options);

// The MILP options of a method's options with `seconds` of time.
JointMilpOptions MilpOptions(const JointSolveOptions& options, double seconds);

// The spec's optimum without a memory limit (options.unconstrained's when that is admitted by the
// spec, else solved within `seconds`), when its peak fits problem.budget; nullopt otherwise.
Result<std::optional<JointMilpResult>> UnconstrainedOptimumIfItFits(const JointProblem& problem,
                                                                    const JointModelSpec& spec,
                                                                    const JointSolveOptions& options, double seconds);

// The best sharding of a fixed schedule within problem.budget.
Result<JointResult> SolveFixedSchedule(const JointProblem& problem, const std::vector<plan::Step>& schedule,
                                       const std::string& method, const JointSolveOptions& options);

}  // namespace kiwi::solve::joint
