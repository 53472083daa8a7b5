#pragma once
// The fast sharding solver (issue 4, part 4): answers problems of 30,000-65,000 nodes within a
// time limit, keeping a feasible incumbent once one is found.
//   1. Exact reductions (reduction.h): merged edges, forbidden and dominated strategies removed,
//      followers merged into the node they follow, leaves folded into their parent (with their
//      usage), degree-2 nodes without usage eliminated, fixed nodes folded into their neighbours.
//      The contest instances shrink from 28,000-35,000 nodes to 284 (A), 336 (G), 4,232 (M) and
//      6,497 (S) in 0.2-0.3 s.
//   2. Exact methods on what remains (core_ilp.h): exhaustive search when the reduced problem is
//      tiny; the ILP of the reduced core (CBC) when it is small, after a first heuristic phase
//      (30% of the time) and warm-started by its incumbent (G is solved to optimality this way).
//   3. Heuristic: greedy in node order, cost-only tree-block DP sweeps (block_dp.h,
//      local_search.h); a first feasible solution from uniform usage prices raised tenfold until
//      the priced optimum fits; then the Lagrangian search (lagrangian.h) from the cost-only
//      optimum: subgradient (Polyak) steps on per-segment usage prices, each followed by priced
//      block-DP sweeps seeded where prices or neighbours changed; every solution within the limit
//      that beats the incumbent becomes it and is polished by feasible-only block moves; after
//      300 steps without one, a restart from the perturbed incumbent with the prices reset.
//   4. Cores too large for the ILP (M and S), after the first 35% of the time: the exact
//      Lagrangian (priced_exact.h). Each step solves the priced subproblem exactly (reductions
//      without usage, then toulbar2 on the core, warm-started by the current solution), keeps its
//      minimiser when it fits, steps the prices from its usage and runs the priced local search
//      from it for 3 s. The local search alone stalls 4.5-5% above the contest winner on M and S:
//      its block moves reach priced values 4.5% above the priced optimum toulbar2 finds. Without
//      toulbar2 installed, step 3 continues instead.
// The lower bound is the largest of the edge-splitting ("star") bound of the Lagrangian, for small
// cores CBC's bound, and for large ones the Lagrangian value of a proven-optimal priced minimiser.
//
// Threads: the search is sequential (options.threads is not used; CBC and toulbar2 run
// single-threaded), so the same problem and options give the same search trajectory (seeded
// generator, stable orders) up to where the time limits of the exact solvers cut in.
// A time-limited run stops at a point that depends on the machine's speed and load, so its answer
// does too.
//
//   ShardingSolveOptions o;
//   o.time_limit_seconds = 60;
//   Result<ShardingResult> r = SolveShardingFast(problem, o);   // r->evaluation.feasible
#include "kiwi/ir/sharding_problem.h"
#include "kiwi/solve/sharding/solver.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::sharding {

// Errors: kBadInput (invalid problem), kInfeasible (usage limit below ir::MinimumPeakUsage, or below
// what the strategies left by the reductions allow, or a node without any allowed strategy),
// kTimeLimit (no feasible solution found in time).
Result<ShardingResult> SolveShardingFast(const ir::ShardingProblem& problem, const ShardingSolveOptions& options);

}  // namespace kiwi::solve::sharding
