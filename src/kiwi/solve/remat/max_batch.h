#pragma once
// Max-batch search (Checkmate §6.3, the VGG19 experiment: no remat 167, sqrt(n) 197, Checkmate 289):
// the largest batch size whose rematerialization plan fits a memory budget, with activation bytes and
// costs scaled linearly in the batch and parameter bytes fixed. Plan-fits-budget is assumed monotone
// in the batch (a plan at batch b+1 shrinks to one at batch b), so an exponential probe followed by a
// binary search needs O(log batch) solver calls.
//
//   Result<MaxBatchResult> r = MaxBatchSize(graph_b256, 256, 16 * kGiB, SolverKind::kHeuristic, cm, options);
//   if (r) fmt::print("batch {} (cost {}, peak {})\n", r->batch, r->plan.cost, r->plan.peak_memory);
//
// Graph files (Checkmate / random-layered node-link graphs) are opaque: every node is a u8 tensor of
// its byte size with a measured cost, so ScaleOpaqueGraph rescales them directly. Typed model-zoo
// graphs change shape with the batch (sequence x batch reshapes, flops): rebuild them at each batch
// through the GraphAtBatch overload (e.g. models::BuildTrainingGraph with the batch flag set).
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "kiwi/solve/remat/problem.h"
#include "kiwi/solve/remat/solvers.h"

namespace kiwi::solve::remat {

struct MaxBatchOptions {
  int64_t max_batch = int64_t{1} << 24;  // the search never probes beyond this
  // No probe starts after this: the largest batch that fitted so far is the answer (timed_out).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct BatchProbe {
  int64_t batch = 0;
  bool fits = false;
  double cost = 0.0;
  int64_t peak_memory = 0;
};

struct MaxBatchResult {
  int64_t batch = 0;               // the largest batch that fits (0: not even batch 1)
  RematResult plan;                // the plan at that batch (cost and peak measured by the simulator)
  std::vector<BatchProbe> probes;  // every batch tried, in order
  bool timed_out = false;          // stopped at the deadline: larger batches may fit
};

// The graph at a batch size (an error for a batch it cannot build).
using GraphAtBatch = std::function<Result<ir::Graph>(int64_t batch)>;
// Solves the problem built at one batch.
using BatchSolver = std::function<Result<RematResult>(const RematProblem&)>;

// The graph file at batch `batch` from the one at `b0`: every non-persistent node (an opaque u8
// tensor of its byte size) gets round(bytes * batch / b0) bytes (at least 1) and a measured cost
// scaled by batch / b0; persistent nodes (parameters, optimizer state) are unchanged. kBadInput for a
// non-persistent node that is not an opaque byte tensor, or for sizes that overflow.
Result<ir::Graph> ScaleOpaqueGraph(const ir::Graph& graph, int64_t b0, int64_t batch);

Result<MaxBatchResult> MaxBatchSize(const GraphAtBatch& graph_at, int64_t budget, const cost::CostModel& cost_model,
                                    const BatchSolver& solve, const MaxBatchOptions& options = {});

// The opaque-graph case with one of the solvers (solvers.h's SolveRemat).
Result<MaxBatchResult> MaxBatchSize(const ir::Graph& graph_at_b0, int64_t b0, int64_t budget, SolverKind kind,
                                    const cost::CostModel& cost_model, const RematOptions& options,
                                    const MaxBatchOptions& max_options = {});

}  // namespace kiwi::solve::remat
