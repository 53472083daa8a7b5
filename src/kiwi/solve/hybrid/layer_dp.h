#pragma once
// Galvatron-BMW's dynamic program over layers (§IV-A, Eq. 4, Appendix A Algorithm 3), for a whole
// pipeline at once: C(l, E) = min_j C(l-1, E - O(l, S_j)) + c(l, S_j) + R(l, S_i, S_j), where the state
// is the memory a stage has used so far and the DP degree of the previous layer (Slice-Gather, R,
// depends on it only: under the estimator a layer's output layout is its DP split).
//
// Memory granularity: none. Instead of a dense table over E / g memory cells, each state keeps the
// Pareto set of (exact bytes used, time) labels: a label is dropped only when another one is no slower
// and needs no more memory in every completion (a label is its additive bytes and its peak: the backward
// pass's headroom, cost::StageMemory, shrinks by each later layer's activations). This is the dense DP
// with 1-byte granularity, so claimed memory is exact and, below `max_labels` labels per state, so is
// the optimum. Above it the labels are thinned to `max_labels` evenly spaced in peak (always keeping the
// (memory, peak) staircase, so feasibility is never lost): the 1 MB granularity of Galvatron's table,
// chosen adaptively.
//
// Branch and bound: a label is dropped when its cost plus a lower bound on every completion reaches
// the cutoff; the bound prices the rest of its stage within the memory the label leaves (the LP
// relaxation of completion_bound.h) and each later stage at its cheapest.
//
// Stages are solved in one pass: a stage starts from the cheapest label of each DP degree the previous
// stage ended in (its memory is its own), and pays for the boundary sends both ways (Eq. 8's C_s). The
// objective is sum_s weight_s * C_s + G_s: with weight m on one stage and 1 on the others it is Eq. 8
// when that stage is the slowest (pipeline_solver.h); with one stage and weight m it is Eq. 8 itself.
//
// Exact mode (`exact`): the objective is Eq. 8 plus the slowest stage's optimizer step, as the estimate
// has it: (m - 1) max_s C_s + sum_s (C_s + G_s) + max_s O_s. Labels also carry the current stage's C and
// O and the largest C and O of the finished stages, a label is dropped only when another is no worse
// on all of them and on memory, and a stage starts from every such label of the previous one. Slower,
// so the pipeline solver uses it only when the weighted runs could not prove their plan optimal. The
// weighted objective prices O_s with the stage's optimizer_weight (mu on the simplex: sum_s mu_s
// O_s <= max_s O_s, still a bound).
#include <chrono>
#include <cstdint>
#include <limits>
#include <vector>

#include "kiwi/solve/hybrid/layer_costs.h"

namespace kiwi::solve::hybrid {

struct DpStage {
  int first = 0;         // first model layer of the stage
  int count = 0;         // layers in the stage
  int in_flight = 1;     // micro-batches whose activations the stage holds at once
  double weight = 1.0;   // weight of the stage's micro-batch time C_s in the objective
  double optimizer_weight = 0.0;  // weight of its optimizer step O_s: mu_s <= 1 (exact mode: 0, its max_s O_s is priced apart)
};

struct LayerDpProblem {
  const CostTables* tables = nullptr;
  std::vector<DpStage> stages;     // consecutive, covering every layer
  int64_t budget = 0;              // bytes per device
  std::vector<bool> allowed;       // per strategy of the tables; empty = all
  size_t max_labels = 8192;        // per state; see above
  // Labels whose cost plus the cheapest completion reaches `cutoff` are dropped (branch and bound:
  // the caller only wants assignments with objective < cutoff).
  double cutoff = std::numeric_limits<double>::infinity();
  bool exact = false;              // minimize Eq. 8 exactly (stage weights are ignored)
  int micro_batches = 1;           // m, for exact mode
  // Checked at every layer: past it the DP stops with `timed_out` (and nothing found).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct LayerDpResult {
  bool feasible = false;
  bool cut_off = false;            // infeasible because of `cutoff` (not necessarily of memory)
  std::vector<int> strategies;     // per layer, index into tables->strategies()
  double objective = 0.0;          // sum_s weight_s * C_s + G_s of that assignment (exact mode: Eq. 8)
  bool thinned = false;            // some state exceeded max_labels (the optimum may be missed)
  bool timed_out = false;          // stopped at the deadline: not feasible says nothing
  int64_t labels = 0;              // labels created, for statistics
};

LayerDpResult SolveLayerDp(const LayerDpProblem& problem);

}  // namespace kiwi::solve::hybrid
