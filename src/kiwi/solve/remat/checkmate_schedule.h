#pragma once
// Checkmate's stage form of a rematerialization schedule (frontier-advancing stages, Checkmate §4.2):
// stage t computes, in ascending position order, every k <= t with R[t][k] = 1 and ends with the first
// computation of order[t] (R[t][t] = 1); S[t][i] = 1 keeps i resident from stage t-1 into stage t.
// Positions are indices into problem.order. This file holds the position-indexed DAG, the (R, S)
// solution, its exact memory (Checkmate's U with its FREE rule) and the compute/free schedule.
//
//   StageGraph g = MakeStageGraph(problem);
//   StageSolution sol = CheckpointAllStages(g);        // R[t] = {t}, S keeps what is used later
//   int64_t peak = StagePeakMemory(g, sol);             // == simulator peak of StageSchedule(...)
//   std::vector<plan::Step> steps = StageSchedule(problem, g, sol);
#include <cstdint>
#include <optional>
#include <vector>

#include "kiwi/plan/plan.h"
#include "kiwi/solve/remat/problem.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::remat {

// The problem's DAG indexed by position in problem.order.
struct StageGraph {
  int32_t n = 0;
  std::vector<std::vector<int32_t>> parents;   // positions of the inputs, ascending, unique
  std::vector<std::vector<int32_t>> children;  // positions of the consumers, ascending, unique
  std::vector<int64_t> memory;                 // bytes
  std::vector<double> cost;                    // one execution
  std::vector<bool> persistent;                // computed once at its stage, resident ever after
  std::vector<int32_t> reach;                  // largest position reachable from i (-1: no consumer)

  // Whether i can be resident in stage t at all: some node at position >= t depends on it. Outside
  // this, an optimal schedule neither computes nor keeps i (nothing that is still to come needs it).
  bool Live(int32_t t, int32_t i) const { return i == t || persistent[static_cast<size_t>(i)] || reach[static_cast<size_t>(i)] >= t; }
};

StageGraph MakeStageGraph(const RematProblem& problem);

// The unit a MILP counts the tensors' bytes in: their gcd (often 1 KiB), so that memory rows are
// integral, unless the largest size would then pass 1e7 units (CBC's tolerances lose meaning): then
// the largest size / 1e7, and sizes are fractional.
struct MemoryUnit {
  double bytes = 1.0;
  bool integral = true;  // every size is a whole number of units
};
MemoryUnit ChooseMemoryUnit(const StageGraph& g);

// R[t] has t + 1 entries (positions 0..t), S[t] has t entries (0..t-1); S[0] is empty and S[T] = 0.
struct StageSolution {
  std::vector<std::vector<uint8_t>> R;
  std::vector<std::vector<uint8_t>> S;

  bool Stored(int32_t t, int32_t i) const {  // S[t][i], 0 outside the triangle (t = T included)
    return t < static_cast<int32_t>(S.size()) && i < t && S[static_cast<size_t>(t)][static_cast<size_t>(i)] != 0;
  }
  bool Computed(int32_t t, int32_t i) const { return i <= t && R[static_cast<size_t>(t)][static_cast<size_t>(i)] != 0; }
};

StageSolution EmptyStages(int32_t n);  // all zero, shaped for n stages

// Checks Checkmate's constraints in the simulator's semantics: R[t][t] = 1; every computed node's
// inputs are computed earlier in the stage or stored; S[t+1][i] <= S[t][i] + R[t][i]; never
// R[t][i] = S[t][i] = 1 (the simulator rejects recomputing a resident tensor); persistent nodes are
// computed only at their stage and stored after it. Errors (kInternal) name the stage and position.
Status CheckStageSolution(const StageGraph& g, const StageSolution& sol);

// Total compute cost: sum over t, i of C_i R[t][i] (Checkmate's objective).
double StageCost(const StageGraph& g, const StageSolution& sol);

// One step of a stage's replay, by position.
struct StageEvent {
  bool compute = true;  // false: free
  int32_t position = 0;
  int64_t resident_after = 0;  // bytes resident after the step (Checkmate's U[t][k] after a compute)
};

// Replays stage t: starts with the stored tensors S[t], computes each k with R[t][k] in ascending
// order and, after computing k < t, frees each i in parents(k) + {k} that no later computation of the
// stage reads and that S[t+1] does not keep (Checkmate's FREE[t][i][k]); after computing t, frees every
// resident tensor that S[t+1] does not keep. Persistent tensors are never freed.
std::vector<StageEvent> ReplayStage(const StageGraph& g, const StageSolution& sol, int32_t t);

// Largest resident bytes right after a compute, over all stages (the simulator's peak).
int64_t StagePeakMemory(const StageGraph& g, const StageSolution& sol);

// The compute/free schedule of all stages, by node id.
std::vector<plan::Step> StageSchedule(const RematProblem& problem, const StageGraph& g, const StageSolution& sol);

// The checkpoint-all schedule in stage form: R[t] = {t}, S[t][i] = 1 while a consumer of i is still to
// come (or i is persistent). Its schedule has the checkpoint-all peak.
StageSolution CheckpointAllStages(const StageGraph& g);

// The first stage whose checkpoint-all replay peaks above `budget` (n when none does): no earlier stage
// needs a recomputation, so the MILP may start there (CheckmateModelOptions::first_stage).
int32_t FirstOverBudgetStage(const StageGraph& g, int64_t budget);

// Reads a schedule's stage structure: stage t ends with the first compute of order[t]; S[t] is what is
// resident when stage t begins and R[t][k] = 1 if k is computed in stage t (once or more: a schedule
// not in stage form gives an R that CheckStageSolution rejects; OptimalR then rebuilds it from S).
// Returns nullopt if the first computations do not follow problem.order or a step is out of range.
std::optional<StageSolution> StoredSetsOfSchedule(const RematProblem& problem, const std::vector<plan::Step>& steps);

}  // namespace kiwi::solve::remat
