#pragma once
// Weighted constraint satisfaction (cost function networks with unary and binary cost tables) solved
// by toulbar2 (Debian package `toulbar2`, INRAE's exact solver: soft arc consistency + hybrid
// best-first branch and bound), run as a subprocess on a .wcsp file. Formulations never call it
// directly; they build a WcspProblem. When the executable is missing, SolveWcsp says so (kInternal)
// and callers fall back to their own methods.
//
//   WcspProblem p;
//   p.domains = {2, 3};
//   p.unary = {{0, 5}, {1, 0, 4}};
//   p.binary.push_back({0, 1, {0, 2, 2, 7, 0, 0}});      // [a * |D_1| + b]
//   Result<WcspResult> r = SolveWcsp(p, {.time_limit_seconds = 5});
//   if (r && r->has_solution()) { /* r->x, r->cost, r->optimal */ }
//
// The same contract as the MILP layer (milp/solve.h, after MathOpt): an error only for bad input or a
// backend failure; every outcome of the search is a result whose `termination` says which.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiwi/solve/milp/solve.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::wcsp {

struct BinaryCost {
  int32_t u = 0;
  int32_t v = 0;
  std::vector<int64_t> cost;   // |D_u| x |D_v|, row-major: cost[a * |D_v| + b]
};

struct WcspProblem {
  std::vector<std::vector<int64_t>> unary;  // per variable, per value (its domain size is the length)
  std::vector<BinaryCost> binary;
  // Costs at or above `forbidden` are hard (never chosen); totals must stay below it.
  int64_t forbidden = 1'000'000'000'000'000'000;
};

struct WcspOptions {
  double time_limit_seconds = 10.0;        // wall clock, including writing the file
  std::vector<int32_t> initial = {};        // a starting assignment (upper bound and value order); may be empty
  std::string executable = "toulbar2";
};

struct WcspResult {
  // kOptimal / kFeasible: x is set; kInfeasible: toulbar2 proved that every assignment costs at least
  // `forbidden`; kNoSolution: it stopped (its time limit) without an assignment.
  milp::Termination termination = milp::Termination::kNoSolution;
  std::vector<int32_t> x;       // best assignment found; empty when none
  int64_t cost = 0;             // its cost (recomputed from the problem, not parsed)
  bool optimal = false;         // proven
  std::optional<int64_t> lower_bound;
  bool has_solution() const { return !x.empty(); }
};

// Whether the toulbar2 executable can be run.
bool ToulbarAvailable(const std::string& executable = "toulbar2");

// kBadInput for a malformed problem (a table of the wrong size, an index out of range); kInternal when
// toulbar2 cannot be started or its answer cannot be read.
Result<WcspResult> SolveWcsp(const WcspProblem& problem, const WcspOptions& options);

// The cost of an assignment (saturating at problem.forbidden).
int64_t WcspCost(const WcspProblem& problem, const std::vector<int32_t>& x);

}  // namespace kiwi::solve::wcsp
