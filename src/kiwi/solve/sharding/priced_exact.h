#pragma once
// The Lagrangian subproblem of the fast sharding solver solved exactly: with the usage limit priced
// into node costs (lagrangian.h), what is left is a pure pairwise cost problem (a cost function
// network). The exact reductions (reduction.h) go further on it than under a usage limit (no usage
// to track: every leaf folds, every degree-2 node is eliminated); the core left is enumerated,
// solved by the ILP (core_ilp.h) when small, else by toulbar2 (wcsp/toulbar2.h); cores of 1,000
// nodes and more are first reparametrised by message passing (message_passing.h), which gives
// toulbar2 a far better starting bound (then its answer is not claimed optimal). The contest's
// first-placed team solved penalized subproblems with a complete weighted-CSP solver too; on M the
// exact minimiser's priced cost is 4.5% below what kiwi's block-DP local search reached.
//
//   NodePrices prices = ...;                                       // per node and strategy
//   std::optional<PricedSolution> s = SolvePricedExactly(core, prices, x, {.seconds = 5});
//   if (s) { /* s->x minimizes cost + prices (proven when s->optimal) */ }
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kiwi/solve/sharding/block_dp.h"
#include "kiwi/solve/sharding/reduction.h"

namespace kiwi::solve::sharding {

struct PricedSolution {
  std::vector<int32_t> x;   // a solution of the reduced problem
  bool optimal = false;     // x minimizes cost(x) + prices (prices rounded to integers)
  std::string method;       // "reductions", "enumeration", "ilp", "toulbar2" or "toulbar2, reparametrised"
};

struct PricedSolveOptions {
  double seconds = 5.0;        // for the exact solver, after the priced problem's reductions
  // For the whole call, reductions included: near a deadline the exact solver gets only what is left.
  // (Taking the reductions out of every step's `seconds` cost toulbar2 a whole CPU second on R.)
  double total_seconds = std::numeric_limits<double>::infinity();
  int64_t max_enumeration = 200'000;   // cores with at most this many assignments are enumerated
  int64_t max_ilp_variables = 20'000;  // then the ILP; larger cores go to toulbar2 (CBC is slow on them)
};

// Minimizes ReducedCost(problem, x) + sum_r round(prices[r][x_r]) ignoring the usage limit.
// `warm` (a reduced solution, may be empty) starts the exact solver. std::nullopt when the core is
// too large for enumeration and the ILP and toulbar2 is not installed, or nothing was found in time.
std::optional<PricedSolution> SolvePricedExactly(const ReducedProblem& problem, const NodePrices& prices,
                                                 const std::vector<int32_t>& warm, const PricedSolveOptions& options);

}  // namespace kiwi::solve::sharding
