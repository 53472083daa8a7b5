#pragma once
// Solving a milp::Model. The contract (after MathOpt): Solve() returns an Error only for bad input or
// a backend failure; every solver outcome (optimal, infeasible, limit reached with or without a
// solution) is a SolveResult whose `termination` says which.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiwi/solve/milp/model.h"
#include "kiwi/util/result.h"

namespace kiwi::milp {

enum class Termination : uint8_t {
  kOptimal,       // proven optimal within relative_gap
  kFeasible,      // a limit was reached with a feasible solution (values set, gap known)
  kInfeasible,    // proven infeasible
  kNoSolution,    // a limit was reached without any feasible solution
  kUnbounded,
};

struct Incumbent {
  double objective = 0.0;
  double best_bound = 0.0;
  double seconds = 0.0;
};

// CBC's own knobs (cbc_solve.cpp); another backend gets its own struct beside it in SolveOptions.
struct CbcParameters {
  // When fewer than ~10 root LPs fit in the time left (the search will be root cut rounds), leave
  // out the cut family whose rounds cost most for the bound they add and run one thread. CBC's
  // two-row MIR cuts took 10 of the root's 31 s on a 192k-row Checkmate model while Gomory cuts made
  // the bound, and its parallel search overran a 50 s limit by up to 9 s; on a 39k-row model (root
  // LP 0.4 s) those cuts halve the solve, and they stay.
  bool lean_search_when_root_is_slow = false;
  // CBC's integer preprocessing (CglPreProcess), when the root LP is fast enough for it. Checkmate
  // models solve faster without (random_layered_n100 at 0.8: 3.5 s instead of a 0.42% gap after 60 s).
  bool integer_preprocessing = true;
};

enum class Backend : uint8_t {
  kCbc,  // COIN-OR CBC for MILPs, CLP for LPs and relaxations (Debian's coinor-libcbc-dev)
};

struct SolveOptions {
  double time_limit_seconds = kInf;
  double relative_gap = 1e-4;     // stop when (incumbent - bound) / |incumbent| <= relative_gap
  int threads = 0;                // 0 = all cores
  bool relax_integrality = false; // solve the LP relaxation instead of the MILP
  std::optional<std::vector<double>> warm_start{};  // a full assignment (one value per variable)
  std::function<void(const Incumbent&)> on_incumbent{};  // on each improvement, from a solver thread, one call at a time
  bool log = false;               // backend log to stderr
  Backend backend = Backend::kCbc;
  CbcParameters cbc{};            // read when backend is kCbc
};

struct SolveResult {
  Termination termination = Termination::kNoSolution;
  std::vector<double> values;     // one per variable when a solution exists
  double objective = 0.0;         // of `values`
  double best_bound = 0.0;        // proven bound on the optimum (LP: the optimum itself)
  double seconds = 0.0;
  // Why the backend was not run at all (milp/load_estimate.h: too large for the time or memory left);
  // empty when it ran. The warm start, if any, is the solution then.
  std::string not_loaded;
  bool has_solution() const { return termination == Termination::kOptimal || termination == Termination::kFeasible; }
  // (objective - best_bound) / max(|objective|, 1e-9); 0 when optimal.
  double relative_gap() const;
};

// Solves with options.backend (CBC for MILPs, CLP for LPs: the only backend so far).
Result<SolveResult> Solve(const Model& model, const SolveOptions& options = {});

}  // namespace kiwi::milp
