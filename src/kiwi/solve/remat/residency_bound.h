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
// O(E) variables where Checkmate's MILP has O(n^2). On its own it leaves out that a recomputation
// needs its inputs (random layered graphs, in-degree 5: a bound at a third of the cost found), so
// the model also ties each dropped gap's last recomputation to its inputs: an input p with no use
// left is either held from its last use to that recomputation, or computed again (C_p, once), and
// i is resident from that recomputation to its consumer (residency_bound.cpp, BuildModel). What it
// still leaves out: the peaks within a stage, and where p is when it is computed again.
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

// max_link_rows caps the rows that tie a recomputation to its inputs (their LP is what costs time on
// graphs of thousands of nodes): past it they are written at every k-th stage only, a weaker bound.
constexpr int64_t kResidencyLinkRows = 150'000;
ResidencyBound SolveResidencyBound(const RematProblem& problem, const StageGraph& g, double seconds, int threads = 0,
                                   int64_t max_link_rows = kResidencyLinkRows);

}  // namespace kiwi::solve::remat
