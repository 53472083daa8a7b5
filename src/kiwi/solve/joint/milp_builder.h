#pragma once
// The joint MILP (KIWI eq. 2-11, linearized; appendix 7.2) built from a JointModelSpec, in the
// disaggregated form that is exact and tighter than the paper's big-M linearization:
//  - one binary x[v][a][m] per node v, allowed strategy a and mode m (0 kept, 1 recomputed when the
//    node is recomputable), sum = 1: s_va = x[v][a][0] + x[v][a][1] and r_v = sum_a x[v][a][1], so
//    (1 + r_v) s_v^T (c_v + d_v) is linear (eq. 2's product without a product);
//  - resharding e_uv^T R_uv (1 + r_v) with one continuous variable per (producer class, consumer
//    class, mode) whose marginals equal the producer's one-hot s_u and the consumer's x[v][.][m]
//    (Alpa's linearization; strategies with identical rows / columns of R share a class, parallel
//    edges are summed, matrices that depend on one side only become linear terms);
//  - memory: a continuous s_v^T mem_v per node and s_v^T mem_v (1 - r_v) per candidate; kExtension
//    terms (eq. 10's h_i) use y[a] = s_xa r_w (sum_a y = r_w, y_a <= s_xa) and one variable per
//    segment bounded below by each consumer's product (a max, exactly as the schedule holds x);
//  - eq. 9 as r_w + r_i <= 1 for each recomputable input i of a recomputable w;
//  - one budget row per needed row of the spec (PruneImpliedRows), skipped when it cannot bind.
// With min_peak the objective is a peak variable bounding every row (the smallest budget the spec's
// family can meet) instead of time.
#include <array>
#include <cstdint>
#include <vector>

#include "kiwi/solve/joint/model_spec.h"
#include "kiwi/solve/joint/problem.h"
#include "kiwi/solve/milp/model.h"

namespace kiwi::solve::joint {

struct JointModelOptions {
  int64_t budget = 0;     // bytes per device (ignored with min_peak)
  bool min_peak = false;  // minimize the peak memory instead of the time
  // Resharding costs that depend on the producer's strategy only become terms on the producer's
  // variables. false keeps every edge's cost on pair variables owned by the consumer (full_milp.h
  // needs each node's execution cost as its own expression).
  bool fold_producer_side = true;
};

struct JointModel {
  milp::Model model;
  // x[v][a][m]: variable index, or -1 (mode absent). a indexes problem.allowed[v].
  std::vector<std::vector<std::array<int32_t, 2>>> x;
  std::vector<int32_t> mem;   // per node: s^T mem in memory units, or -1 (constant or unused)
  std::vector<int32_t> kept;  // per node: s^T mem (1 - r), or -1
  std::vector<std::vector<int32_t>> segment;  // per node, per extension segment
  struct Product {
    ir::NodeId node = ir::kNoNode;     // the kept tensor x
    ir::NodeId consumer = ir::kNoNode; // w
    std::vector<int32_t> y;            // per allowed strategy of x; empty when x's memory is constant
  };
  std::vector<Product> products;
  struct Pair {
    ir::NodeId u = ir::kNoNode, v = ir::kNoNode;
    std::vector<int32_t> producer_class;  // per allowed strategy of u
    std::vector<int32_t> consumer_class;  // per allowed strategy of v
    int32_t consumer_classes = 0, modes = 1;
    std::vector<int32_t> vars;            // [f][g][m], row-major
  };
  std::vector<Pair> pairs;
  int32_t peak = -1;            // min_peak: the peak variable
  double memory_unit = 1.0;     // bytes per memory unit
  double objective_unit = 1.0;  // cost units per objective unit
  int32_t budget_rows = 0;
};

JointModel BuildJointModel(const JointProblem& problem, const JointModelSpec& spec, const JointModelOptions& options);

// The budget in the model's memory units, as its rows use it.
double BudgetUnits(const JointModel& m, int64_t budget);

// A full assignment of the model's variables for a solution (a MIP start).
std::vector<double> ModelAssignment(const JointModel& m, const JointProblem& problem, const JointModelSpec& spec,
                                    const JointSolution& solution);

// The decisions of a (rounded) model solution: per node the (strategy, mode) of largest value.
JointSolution ReadModelSolution(const JointModel& m, const JointProblem& problem, const std::vector<double>& values);

}  // namespace kiwi::solve::joint
