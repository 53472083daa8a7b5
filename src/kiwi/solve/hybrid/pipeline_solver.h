#pragma once
// The best per-layer strategies for one pipeline configuration and partition (Galvatron_Search of
// Algorithm 1, for all stages at once), minimizing Eq. 8: T = (m - 1) max_s C_s + sum_s (C_s + G_s).
//
// Eq. 8 is not a sum over layers because of the max. For every stage b, V_b = (m - 1) C_b +
// sum_s (C_s + G_s) is (the DP objective with weight m on stage b and 1 elsewhere), and T = max_b V_b,
// so min_x V_b(x) <= T* for each b. The solver runs the DP for the stage it expects to be the slowest;
// when that stage is the slowest of the plan found, the plan's T equals the bound: optimal. Otherwise it
// weights the plan's slowest stage next, and so on; the plan is proven optimal once its T meets the
// largest bound. The optimizer step adds a second max, max_s O_s (every stage steps after the flush),
// bounded the same way by its own weights mu_s, which follow the stage with the slowest step. If no
// weighting proves it, one exact run of the DP (layer_dp.h exact mode: labels
// carry the stage times, so Eq. 8's max is evaluated, not bounded) finds the optimum. `proven` is
// false only when a DP had to thin its labels. Interleaved 1F1B (config.virtual_stages v > 1, the
// tables of one round): weights 1/v + (m - 1/v) lambda_s, and no exact run (it evaluates Eq. 8 at v = 1):
// a plan is proven only by the weighted bounds.
#include <chrono>
#include <cstdint>
#include <limits>
#include <vector>

#include "kiwi/solve/hybrid/layer_costs.h"
#include "kiwi/solve/hybrid/layer_dp.h"

namespace kiwi::solve::hybrid {

struct PartitionProblem {
  const CostTables* tables = nullptr;
  PipelineConfig config;
  std::vector<int> partition;   // layers per stage
  int64_t budget = 0;
  std::vector<bool> allowed;    // per strategy of the tables; empty = all
  size_t max_labels = 8192;
  double cutoff = std::numeric_limits<double>::infinity();  // only iteration times below it are wanted
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();  // of every DP run
};

struct PartitionSolution {
  bool feasible = false;          // an assignment fits the budget and beats the cutoff
  bool cut_off = false;           // not feasible: no assignment that fits beats the cutoff
  std::vector<int> strategies;  // per layer, index into tables->strategies()
  PipelineEstimate estimate;
  double lower_bound = 0.0;     // on the iteration time of any assignment on this partition
  bool proven = false;          // estimate.iteration_seconds meets lower_bound
  // A DP state of the (full) run was thinned: neither a plan nor cut_off is proven optimal.
  bool thinned = false;
  int dp_runs = 0;
  bool timed_out = false;       // a DP run stopped at the deadline: not feasible says nothing
};

PartitionSolution SolvePartition(const PartitionProblem& problem);

}  // namespace kiwi::solve::hybrid
