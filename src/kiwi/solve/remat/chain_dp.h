#pragma once
// Exact rematerialization for linear training chains (chain.h) by dynamic programming, in the
// spirit of Griewank's revolve and Beaumont et al. 2019 ("Optimal checkpointing for heterogeneous
// chains"), with heterogeneous costs, int64 sizes and the simulator's exact accounting (a tensor is
// resident from its compute to its free; the peak is read right after each compute).
//
//   Result<RematResult> r = SolveChainDp(problem, cost_model, options);  // kBadInput if not a chain
//
// Schedule class. In the backward pass the resident forward tensors form a stack of checkpoints
// 0 = c_0 < c_1 < .. < c_r (f_0 = "nothing", always available) plus maybe f_t ("top"), with b_{t+1}'s
// output and b_t next. Moves: compute b_t when its reads are resident (f_{t-1} = c_r, f_t on top);
// sweep from c_r to f_j (computing f_{c_r+1}..f_j, freeing all but f_j), pushing j or making it the
// top (j = t); and a hand-over: compute f_{c_r+1} and free f_{c_r} (its last use), so c_r + 1 replaces
// c_r (a longer hand-over sweep is a sequence of these). The forward pass is the first sweeps.
// Rotor's recursion (every checkpoint kept until its segment is done) lacks hand-overs and is not
// exact: f_1 kept through the forward pass, used once to recompute f_2 for b_3, then dropped and
// recomputed from nothing for b_2 beats it (tests/solve/chain_dp_test.cpp, HandOver...). On every
// chain we brute-forced over Checkmate's stage schedules (up to 6 layers, every integer budget, with
// parameters and all read patterns: thousands of instances, tests and offline), this class reaches
// the optimum: the DP equals Checkmate's MILP on chains.
//
// Recurrence. A "level" is a stack slot: its checkpoint c works (pushes children, computes b's) and
// may hand over to c + 1. With B the bytes the level may use (budget minus the checkpoints below it),
// D(t) = |b_{t+1}| and P_t the persistent bytes of b_t's stage:
//   Exit(c, t, top, z; B) = least cost from checkpoint c in state (t, top) until the level ends with
//     the parent in state (z, f_z on top): z = c when b_{c+1} ends it, z = t for a hand-over onto t.
//     b_t:        w_t + Exit(c, t-1, 0, z; B)         if a_c + D(t) + top a_t + |b_t| + P_t <= B
//     f_t on top: U(t) - U(c) + Exit(c, t, 1, z; B)   if the sweep's peak fits
//     child:      min_y u_{c+1} + Exit(c+1, t, top', y; B - a_c) + Exit(c, y, 1, z; B)
//                                                     if D(t) + top' a_t + a_{c+1} + P_t <= B - a_c
//     hand-over:  u_{c+1} + Exit(c+1, t, top', z; B)   if D(t) + top' a_t + a_c + a_{c+1} + P_t <= B
//   (top' = top, or f_t freed first; a longer child sweep is the child handing over at once.) Forward
//   first computations use the persistent bytes of their own stage. Floor(state) is the same
//   recursion with (max, min) for (+, min): the least budget that fits, so infeasible states and
//   budgets answer at once, and the least feasible budget is exact.
// Memory is not discretized (inexact for arbitrary bytes): each evaluation returns its cost and the
// budget interval [need, hi) on which that cost holds (need = the chosen schedule's peak, hi = the
// least budget at which any option could improve); the memo keeps these intervals per state.
//
// Complexity: O(n^3) states (c, t, z), O(n) work per evaluation (the child's end y), times the
// number of budget intervals a state is asked about; Floor is one O(n^4) pass; memory O(n^3).
// Measured on this shared 2-core VM (RelWithDebInfo, timings noisy): VGG16's 45-node export 1-13 ms
// per budget; MobileNet (93 forward ops) 0.4 s at 0.95 to 7-10 s at 0.7 of checkpoint-all; random
// heterogeneous chains (1-100 kB tensors) of 30 layers ~0.1 s, 50 layers 4-12 s, 100 layers 0.6 s
// at 0.9 but over 10 minutes at 0.5, 200 layers 15 s at 0.99. Long heterogeneous chains at tight
// budgets are out of reach: the number of budget intervals per state grows with n. Chains longer
// than kMaxChainDpLength forward ops are refused (the tables would exceed ~150 MB).
#include <cstdint>
#include <vector>

#include "kiwi/plan/plan.h"
#include "kiwi/solve/remat/chain.h"
#include "kiwi/solve/remat/problem.h"
#include "kiwi/solve/remat/solvers.h"

namespace kiwi::solve::remat {

inline constexpr int32_t kMaxChainDpLength = 256;

struct ChainDpSolution {
  bool feasible = false;
  double cost = 0.0;                // every compute of the schedule, persistent nodes included
  int64_t peak = 0;                 // the schedule's peak, from the DP's own accounting
  std::vector<plan::Step> schedule;
  // Infeasible: the least budget at which a schedule of the class fits (exact when
  // min_budget_exact), found by re-solving at the bounds the DP proves; 0 if not computed.
  int64_t min_budget = 0;
  bool min_budget_exact = false;
  bool timed_out = false;  // the time limit passed first: nothing else is set
};

// Solves `chain` for `budget` bytes (chain.n <= kMaxChainDpLength) within the time limit.
ChainDpSolution SolveChain(const Chain& chain, int64_t budget, double time_limit_seconds = 1e9);

// The solver entry point (SolverKind::kChainDp): kBadInput "chain-dp: the graph is not a linear
// chain: <reason>" for other graphs, kTimeLimit when options.time_limit_seconds passes before the DP
// ends (it has no incumbent to return). The schedule is replayed by FinishResult; optimal = true and
// lower_bound = cost when feasible; when infeasible, the note gives the least budget that fits.
Result<RematResult> SolveChainDp(const RematProblem& problem, const cost::CostModel& cost_model,
                                 const RematOptions& options);

}  // namespace kiwi::solve::remat
