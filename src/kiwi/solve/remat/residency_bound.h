#pragma once
// A lower bound on the rematerialization cost that scales to thousands of nodes: a reduced model of
// Checkmate's MILP that keeps only which tensors are resident at each stage's frontier compute.
//
// Right after stage t computes order[t] (its last compute), Checkmate's U[t][t] holds order[t]'s
// output, its inputs, the persistent tensors computed so far and every tensor kept into stage t+1.
// Take one tensor i and the positions that force it resident (its own and its consumers'): between two
// consecutive ones, either i stays resident through every frontier compute of the gap, or a copy is
// missing at some stage of it and i is computed again before the next consumer, which costs at least
// C_i. So every schedule (of Checkmate's frontier-advancing stages) pays at least sum C_i over the gaps
// it does not keep, with kept gaps and forced tensors within the budget at each frontier compute:
//
//   min  sum_gaps C_i (1 - keep_g)   s.t.  forced_t + sum_{g covers t} M_i keep_g <= budget  for all t
//
// a multi-dimensional knapsack with one binary per gap (about one per edge) and one row per stage:
// O(E) variables where Checkmate's MILP has O(n^2). What it leaves out: that the recomputation of i
// needs i's inputs resident too (or recomputed), and the peaks within a stage.
//
//   ResidencyBound b = SolveResidencyBound(problem, MakeStageGraph(problem), 5.0);
//   b.bound  // >= problem.baseline_cost; a proven lower bound for every stage schedule
#include <cstdint>
#include <string>

#include "kiwi/solve/remat/checkmate_schedule.h"
#include "kiwi/solve/remat/problem.h"

namespace kiwi::solve::remat {

struct ResidencyBound {
  double bound = 0.0;      // baseline + proven least recomputation (CBC's bound when out of time)
  bool proven_optimal = false;  // the reduced model itself was solved to optimality
  bool infeasible = false;      // some frontier compute alone exceeds the budget: no schedule fits
  int32_t gaps = 0;             // binaries of the reduced model
  std::string note;
};

ResidencyBound SolveResidencyBound(const RematProblem& problem, const StageGraph& g, double seconds, int threads = 0);

}  // namespace kiwi::solve::remat
