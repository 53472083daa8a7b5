#pragma once
// Exact methods for what the reductions leave (issue 4, part 4: "ILP on small cores"):
//  - EnumerateReduced: depth-first branch and bound over every assignment of a tiny reduced problem;
//  - SolveReducedIlp: the sharding ILP (one-hot strategies, edge costs linearized by pair variables
//    whose marginals equal the endpoints' choices, one usage row per time segment where the usage
//    can rise) written over the reduced problem, whose nodes carry several usage intervals, solved
//    by CBC through milp::Solve. Usage rows are generated lazily: rows at the segments the warm
//    start nearly fills first, then rows wherever CBC's answer overflows, until it fits; an
//    optimum of the relaxed rows that fits is optimal for all of them. Where the time runs out
//    first, the last answer (over the limit at a few segments) is returned for a repair.
//
//   std::optional<ExactResult> e = SolveReducedIlp(reduced, incumbent, {.time_limit_seconds = 10});
//   if (e && e->optimal) { /* e->x is optimal */ }
#include <cstdint>
#include <optional>
#include <vector>

#include "kiwi/solve/sharding/reduction.h"

namespace kiwi::solve::sharding {

struct ExactResult {
  std::vector<int32_t> x;     // empty when no feasible assignment exists / was found
  int64_t cost = 0;           // ReducedCost of x
  double lower_bound = 0.0;   // proven bound on the reduced optimum
  bool optimal = false;       // x is optimal (or, x empty, the problem is infeasible)
  // When the time (or max_rounds) ran out before an answer fitted every usage row: CBC's last answer,
  // optimal or not over the rows added so far, which overflows at a few segments (a start for a repair).
  std::vector<int32_t> overflowing;
};

// Exhaustive search when the product of the strategy counts is at most `max_assignments`;
// std::nullopt otherwise.
std::optional<ExactResult> EnumerateReduced(const ReducedProblem& problem, int64_t max_assignments);

struct ReducedIlpOptions {
  double time_limit_seconds = 10.0;
  double relative_gap = 1e-6;
  int threads = 1;
  int64_t max_variables = 200'000;   // larger models are refused (std::nullopt)
  bool relax = false;                 // the LP relaxation only: lower_bound, no x
  int max_rounds = -1;                // CBC solves (rows added between them); -1: until the time is up
};

// Variables the ILP of `problem` would have (strategies plus allowed edge entries).
int64_t ModelSizeForIlp(const ReducedProblem& problem);

// `warm` (may be empty) is a feasible reduced solution handed to CBC. std::nullopt when the model is
// too large or the backend failed.
std::optional<ExactResult> SolveReducedIlp(const ReducedProblem& problem, const std::vector<int32_t>& warm,
                                           const ReducedIlpOptions& options);

}  // namespace kiwi::solve::sharding
