#pragma once
// The exact ILP for the sharding problem (Alpa's / KIWI §3.1 formulation, appendix 7.1.4): one-hot
// strategy vectors s_i, edge costs linearized with one variable per strategy pair (marginals equal to
// the endpoints' s), and one usage constraint per distinct set of live nodes. Solved with the MILP
// backend (CBC); meant for small problems and reduced cores (thousands of variables, not millions).
//
//   Result<ShardingResult> r = SolveShardingIlp(problem, options);
//   // r->optimal, r->lower_bound (CBC's proven bound), r->evaluation (ir::Evaluate)
#include "kiwi/ir/sharding_problem.h"
#include "kiwi/solve/sharding/solver.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::sharding {

// Errors: kInfeasible when CBC proves no solution fits the usage limit; kTimeLimit when the limit
// passed without a feasible solution; kInternal on a backend failure. options.warm_start, when it is
// feasible, is handed to CBC as the first incumbent.
Result<ShardingResult> SolveShardingIlp(const ir::ShardingProblem& problem, const ShardingSolveOptions& options);

}  // namespace kiwi::solve::sharding
