#pragma once
// Entry points of the rematerialization solvers. Each takes the problem and options and returns a
// RematResult whose cost and peak were measured by the simulator (FinishResult). A solver that finds
// no schedule within the budget returns feasible = false (not an error); errors are for bad input and
// bugs. `kiwi remat --solver NAME` maps onto these.
#include <functional>
#include <string>
#include <vector>

#include "kiwi/solve/remat/problem.h"

namespace kiwi::solve::remat {

struct RematOptions {
  double time_limit_seconds = 60.0;
  int threads = 0;                   // 0 = all cores
  double relative_gap = 1e-4;        // MILP stopping gap
  std::function<void(const std::string&)> progress;  // one line per event, to stderr; may be empty
};

enum class SolverKind : uint8_t {
  kIlp,              // Checkmate's MILP, frontier-advancing stages (CBC)
  kLpRound,          // LP relaxation + two-phase rounding (Checkmate §5)
  kChainDp,          // exact dynamic program for linear chains (Griewank/rotor style)
  kHeuristic,        // greedy + local improvement for any DAG
  kCheckpointAll,    // keep everything (no rematerialization)
  kSqrtN,            // Chen et al. 2016: checkpoint every sqrt(n)-th node (articulation points when any)
  kGreedy,           // Chen et al.'s greedy segment heuristic (articulation points when any)
  kCkptDots,         // JAX checkpoint_dots: keep matmul outputs only
  kMegatronSelective,// Megatron selective recompute: recompute attention softmax/dropout/score tensors
  kAuto,             // the best the project has
};

std::optional<SolverKind> ParseSolverKind(const std::string& name);
std::string SolverName(SolverKind kind);
std::vector<std::string> SolverNames();

Result<RematResult> SolveRemat(const RematProblem& problem, const cost::CostModel& cost_model, SolverKind kind,
                               const RematOptions& options);

}  // namespace kiwi::solve::remat
