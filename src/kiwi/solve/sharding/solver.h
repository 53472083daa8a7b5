#pragma once
// Solving an ir::ShardingProblem (KIWI §3.1, Alpa, the IOPDDL contest). Every solver returns a
// ShardingResult whose evaluation comes from ir::Evaluate, the independent judge, never from the
// solver's own bookkeeping.
//
//   ShardingSolveOptions options;
//   options.time_limit_seconds = 60;
//   Result<ShardingResult> r = SolveSharding(problem, ShardingSolverKind::kAuto, options);
//   if (r) fmt::print("cost {} (lower bound {})\n", r->evaluation.cost, r->lower_bound.value_or(-1));
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "kiwi/ir/sharding_problem.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::sharding {

struct ShardingSolveOptions {
  double time_limit_seconds = 60.0;
  int threads = 1;                   // 0 = all cores
  uint64_t seed = 1;                 // randomized searches are deterministic for a seed
  double relative_gap = 1e-4;        // exact solvers stop at this proven gap
  std::optional<ir::Solution> warm_start;  // a starting solution (any validity; solvers repair it)
  // Called on each better feasible solution (cost, seconds since start), for progress output.
  std::function<void(int64_t cost, double seconds)> on_incumbent;
};

struct ShardingResult {
  std::string solver;
  ir::Solution solution;               // empty when no feasible solution was found
  ir::Evaluation evaluation;           // ir::Evaluate(problem, solution)
  std::optional<int64_t> lower_bound;  // proven lower bound on the optimal cost, if any
  bool optimal = false;                // proven optimal within relative_gap
  double solve_seconds = 0.0;
  std::string note;                    // for humans: "time limit", "12 components, 3 solved by ILP"

  // (cost - lower_bound) / cost when a lower bound exists.
  std::optional<double> gap() const;
};

enum class ShardingSolverKind : uint8_t {
  kAuto,   // the fast solver; exact when the reduced problem is small enough
  kIlp,    // the exact ILP (CBC): one-hot strategies, linearized edge costs, usage limit per step
  kFast,   // reductions + dynamic programming + Lagrangian local search (solve/sharding/fast_solver.h)
};

// Errors: kBadInput if the problem fails ir::ValidateShardingProblem; kInfeasible when the usage
// limit is below ir::MinimumPeakUsage (the message names that bound) or a solver proves infeasibility;
// kTimeLimit when the time ran out before any feasible solution.
Result<ShardingResult> SolveSharding(const ir::ShardingProblem& problem, ShardingSolverKind kind,
                                     const ShardingSolveOptions& options);

}  // namespace kiwi::solve::sharding
