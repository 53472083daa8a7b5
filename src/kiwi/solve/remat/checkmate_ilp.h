#pragma once
// Checkmate's MILP (Jain et al., MLSys 2020, §4) with frontier-advancing stages: binaries R[t][i]
// (compute i in stage t, i <= t), S[t][i] (i kept from stage t-1 into t, i < t), FREE[t][i][k] (free i
// right after computing k in stage t) and continuous U[t][k] (bytes resident after computing k).
//
//   StageGraph g = MakeStageGraph(problem);
//   CheckmateModel cm = BuildCheckmateModel(problem, g);          // formulate
//   Result<milp::SolveResult> r = milp::Solve(cm.model, {...});  // solve (any backend)
//   StageSolution sol = ReadStageSolution(cm, r->values);        // extract; StageSchedule(...) -> steps
//
// Its optimum and bounds hold among frontier-advancing stage schedules in problem.order, a restriction
// of the simulator's schedules (a stage recomputes in ascending order, each node at most once): on rare
// small graphs a schedule outside it is cheaper or fits a smaller budget (see checkmate_ilp_test.cpp).
//
// Tightenings over the paper, each checked against brute force (tests/solve/remat_brute_force.h):
//  - R[t][t] = 1 and the upper triangles are constants, not variables; so are R and S of a tensor that
//    nothing at position >= t depends on (0: StageGraph::Live) and of persistent tensors (stored after
//    their stage, never recomputed);
//  - R[t][i] + S[t][i] <= 1 (the simulator rejects recomputing a resident tensor);
//  - no waste: R[t][i] <= S[t+1][i] + sum_{readers j in (i, t]} R[t][j] (dominance), so FREE[t][i][i]
//    is always 0 and is not created;
//  - FREE only for k < t (a free after the stage's last compute is the end-of-stage drop, which no U
//    row sees), linearized with rows bounded by i's residency R[t][i] + S[t][i] instead of Checkmate's
//    big-M on the hazard sum: FREE[t][i][k] <= R[t][k]; for each reader j of i in the stage,
//    sum_{k < j} FREE[t][i][k] + R[t][j] <= R[t][i] + S[t][i] (this is eq. 1b, strengthened); and
//    sum_k FREE[t][i][k] + S[t+1][i] <= R[t][i] + S[t][i] (eq. 1c, strengthened: an LP can no longer
//    free more of i than it holds); plus, when `exact_free`, FREE >= R[t][k] - S[t+1][i] -
//    sum_{readers j > k} R[t][j], which makes U the exact resident bytes (not only an upper bound);
//  - U only after computes that can happen, in units of the gcd of the tensor sizes (integral rows);
//  - no variables before the first stage whose checkpoint-all replay exceeds the budget (nothing there
//    needs a recomputation): on random_layered_n250 at 0.8, stages 187-249 only, 87k variables and 192k
//    rows instead of 189k and 413k, root LP 9 s instead of 22-30 s; see CheckmateModelOptions::first_stage.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiwi/solve/milp/model.h"
#include "kiwi/solve/remat/checkmate_schedule.h"
#include "kiwi/solve/remat/problem.h"
#include "kiwi/solve/remat/solvers.h"

namespace kiwi::solve::remat {

struct CheckmateModelOptions {
  bool exact_free = true;  // also bound FREE from below, so that U equals the replay's resident bytes
  bool no_waste = true;    // R[t][i] only if read later in the stage or kept (then FREE[t][i][i] = 0)
  // Stages before it are checkpoint-all's (constants, no rows); S[first_stage] is free over the live
  // tensors. A relaxation for any value (its bound holds); FirstOverBudgetStage's is the usual one, as
  // no stage before it needs recomputation. Readers extend checkpoint-all so that every tensor in
  // S[first_stage] is kept from its computation on, which may not fit the budget: check the peak.
  int32_t first_stage = 0;
};

// Where each Checkmate variable lives in the model. A slot holds a variable index, or kZero / kOne
// for an entry fixed by the formulation.
struct CheckmateIndex {
  static constexpr int32_t kZero = -1;
  static constexpr int32_t kOne = -2;
  struct Free {
    int32_t t = 0, i = 0, k = 0;  // free position i right after computing position k in stage t
    int32_t var = 0;
  };
  std::vector<std::vector<int32_t>> r;  // r[t][i], i <= t
  std::vector<std::vector<int32_t>> s;  // s[t][i], i < t
  std::vector<Free> frees;
  std::vector<std::vector<int32_t>> u;  // u[t][k], k <= t; -1 where position k cannot be computed in stage t
  std::vector<int32_t> u_rows;          // the row defining each U, in the order they chain
  double memory_unit = 1.0;             // bytes per unit of U and of the budget row
  bool integral_units = true;           // every size is a whole number of units
  double budget_units = 0.0;
  int32_t first_stage = 0;              // stages before it are constants (CheckmateModelOptions)

  int32_t R(int32_t t, int32_t i) const { return r[static_cast<size_t>(t)][static_cast<size_t>(i)]; }
  int32_t S(int32_t t, int32_t i) const {  // S[T][i] = 0
    return static_cast<size_t>(t) < s.size() ? s[static_cast<size_t>(t)][static_cast<size_t>(i)] : kZero;
  }
};

struct CheckmateModel {
  milp::Model model;
  CheckmateIndex index;
};

CheckmateModel BuildCheckmateModel(const RematProblem& problem, const StageGraph& g,
                                   const CheckmateModelOptions& options = {});

// The R and S binaries BuildCheckmateModel creates from stage `first_stage` on, counted in O(n^2)
// without building: the model's size (FREE, U and the rows grow with it) before paying for it.
int64_t CountStageBinaries(const StageGraph& g, int32_t first_stage);

// Why the model from `first_stage` on should not even be built with `seconds_left`: at the fewest
// nonzeros per R/S binary measured, it would not load into CBC/CLP in that time or in the memory
// available (milp::WhyNotLoad). nullopt: build it (milp::Solve checks the exact size again).
std::optional<std::string> WhyNotBuildCheckmate(const StageGraph& g, int32_t first_stage, double seconds_left);

// Re-targets a built model at another budget (only U's upper bounds change; first_stage stays, so at a
// smaller budget the stages before it go unchecked: LP rounding's scaled budgets, a heuristic).
void SetMemoryBudget(CheckmateModel& cm, int64_t budget);

// Rounds a solution's R and S (values > 0.5); fixed entries read as their constant, except that a
// tensor stored into the first variable stage is kept from its computation on.
StageSolution ReadStageSolution(const CheckmateModel& cm, const std::vector<double>& values);

// S[t][i] values of a (possibly fractional) solution, fixed entries included, for rounding.
std::vector<std::vector<double>> ReadStoredValues(const CheckmateModel& cm, const std::vector<double>& values);

// A full assignment of the model's variables for a valid stage solution (warm start): R and S as
// given, FREE as ReplayStage frees, U the resident bytes in memory units.
std::vector<double> StageSolutionValues(const CheckmateModel& cm, const StageGraph& g, const StageSolution& sol);

// Largest U of an assignment, in bytes (the MILP's own peak).
double MaxResidentBytes(const CheckmateModel& cm, const std::vector<double>& values);

// Solves the MILP with CBC. optimal = proven within
// options.relative_gap; at the time limit, the best incumbent with its gap (feasible = false if none).
// `warm_start`: a schedule from another solver, turned into stage form (its stored sets, with
// OptimalR's recomputations) and passed as the MIP start when it fits the budget. Without one, the MIP
// start is checkpoint-all when it fits, else the LP rounding's best (SolveLpRounding's, given half the
// time limit; its LP bound also counts, and an infeasible LP ends the solve). lower_bound is the best
// of CBC's bound, the LP's and the baseline cost (every node once), also when no solution was found.
Result<RematResult> SolveCheckmateIlp(const RematProblem& problem, const cost::CostModel& cost_model,
                                      const RematOptions& options,
                                      const std::vector<plan::Step>* warm_start = nullptr);

}  // namespace kiwi::solve::remat
