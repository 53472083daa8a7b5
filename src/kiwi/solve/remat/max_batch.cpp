#include "kiwi/solve/remat/max_batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "kiwi/solve/remat/baselines.h"
#include "kiwi/solve/remat/heuristic.h"

namespace kiwi::solve::remat {
namespace {

bool IsBaseline(SolverKind kind) {
  return kind == SolverKind::kCheckpointAll || kind == SolverKind::kSqrtN || kind == SolverKind::kGreedy ||
         kind == SolverKind::kCkptDots || kind == SolverKind::kMegatronSelective;
}

// round(value * batch / b0) without overflow; nullopt when the result does not fit an int64.
std::optional<int64_t> ScaleBytes(int64_t value, int64_t b0, int64_t batch) {
  const int64_t whole = value / b0, part = value % b0;
  if (whole > 0 && batch > std::numeric_limits<int64_t>::max() / whole) return std::nullopt;
  const int64_t rounded = (part * batch + b0 / 2) / b0;  // part < b0: small
  if (whole * batch > std::numeric_limits<int64_t>::max() - rounded) return std::nullopt;
  return whole * batch + rounded;
}

// One probe: build the graph at `batch`, solve, record.
class BatchSearch {
 public:
  BatchSearch(const GraphAtBatch& graph_at, int64_t budget, const cost::CostModel& cost_model, const BatchSolver& solve)
      : graph_at_(graph_at), budget_(budget), cost_model_(cost_model), solve_(solve) {}

  Result<bool> Fits(int64_t batch) {
    Result<ir::Graph> graph = graph_at_(batch);
    if (!graph) return graph.error();
    Result<RematProblem> problem = MakeRematProblem(*graph, cost_model_, budget_);
    if (!problem) return problem.error();
    Result<RematResult> plan = solve_(*problem);
    if (!plan) return plan.error();
    result_.probes.push_back({batch, plan->feasible, plan->cost, plan->peak_memory});
    if (plan->feasible && batch > result_.batch) {
      result_.batch = batch;
      result_.plan = std::move(*plan);
    }
    return result_.probes.back().fits;
  }

  MaxBatchResult Take() && { return std::move(result_); }
  MaxBatchResult TimedOut() && {
    result_.timed_out = true;
    return std::move(result_);
  }

 private:
  const GraphAtBatch& graph_at_;
  int64_t budget_;
  const cost::CostModel& cost_model_;
  const BatchSolver& solve_;
  MaxBatchResult result_;
};

}  // namespace

Result<ir::Graph> ScaleOpaqueGraph(const ir::Graph& graph, int64_t b0, int64_t batch) {
  if (b0 <= 0) return BadInput(fmt::format("max batch: the graph's batch must be positive, got {}", b0));
  if (batch <= 0) return BadInput(fmt::format("max batch: batch must be positive, got {}", batch));
  ir::Graph scaled = graph;
  for (const ir::Node& n : graph.nodes()) {
    if (n.is_persistent()) continue;  // parameters and optimizer state do not grow with the batch
    if (n.kind != ir::OpKind::kOpaque || n.output.dtype != ir::DType::kU8 || n.output.shape.size() != 1)
      return BadInput(fmt::format("{}: node {} '{}': only opaque byte tensors (graph files) can be rescaled; "
                                  "build the model at each batch instead",
                                  graph.name(), n.id, n.name));
    const std::optional<int64_t> bytes = ScaleBytes(n.output.shape[0], b0, batch);
    if (!bytes) return BadInput(fmt::format("{}: node {} '{}': {} bytes at batch {} overflow", graph.name(), n.id,
                                            n.name, n.output.shape[0], batch));
    ir::Node& m = scaled.mutable_node(n.id);
    m.output.shape[0] = std::max<int64_t>(*bytes, 1);
    const double factor = static_cast<double>(batch) / static_cast<double>(b0);
    if (m.measured_cost) *m.measured_cost *= factor;
    m.flops *= factor;
    m.bytes_accessed = static_cast<int64_t>(std::llround(static_cast<double>(m.bytes_accessed) * factor));
  }
  return scaled;
}

Result<MaxBatchResult> MaxBatchSize(const GraphAtBatch& graph_at, int64_t budget, const cost::CostModel& cost_model,
                                    const BatchSolver& solve, const MaxBatchOptions& options) {
  if (budget < 0) return BadInput(fmt::format("max batch: budget must be >= 0, got {}", budget));
  if (options.max_batch < 1)
    return BadInput(fmt::format("max batch: max_batch must be >= 1, got {}", options.max_batch));
  BatchSearch search(graph_at, budget, cost_model, solve);
  const auto out_of_time = [&] { return std::chrono::steady_clock::now() > options.deadline; };
  // Exponential probe for the first batch that does not fit, then bisection (fits is monotone).
  int64_t good = 0, bad = 0;
  for (int64_t b = 1; bad == 0; b = std::min(2 * b, options.max_batch)) {
    if (out_of_time()) return std::move(search).TimedOut();
    Result<bool> fits = search.Fits(b);
    if (!fits) return fits.error();
    if (!*fits) bad = b;
    else if (b == options.max_batch) return std::move(search).Take();
    else good = b;
  }
  while (bad - good > 1) {
    if (out_of_time()) return std::move(search).TimedOut();
    const int64_t mid = good + (bad - good) / 2;
    Result<bool> fits = search.Fits(mid);
    if (!fits) return fits.error();
    (*fits ? good : bad) = mid;
  }
  return std::move(search).Take();
}

Result<MaxBatchResult> MaxBatchSize(const ir::Graph& graph_at_b0, int64_t b0, int64_t budget, SolverKind kind,
                                    const cost::CostModel& cost_model, const RematOptions& options,
                                    const MaxBatchOptions& max_options) {
  if (b0 <= 0) return BadInput(fmt::format("max batch: the graph's batch must be positive, got {}", b0));
  const GraphAtBatch graph_at = [&](int64_t batch) { return ScaleOpaqueGraph(graph_at_b0, b0, batch); };
  // The heuristic and the baselines directly: the dispatcher would also search for the smallest budget
  // of every batch that does not fit, which the search does not need.
  const BatchSolver solve = [&](const RematProblem& p) -> Result<RematResult> {
    if (kind == SolverKind::kHeuristic) return SolveHeuristic(p, cost_model, options);
    if (IsBaseline(kind)) return SolveBaseline(p, cost_model, kind, options);
    return SolveRemat(p, cost_model, kind, options);
  };
  return MaxBatchSize(graph_at, budget, cost_model, solve, max_options);
}

}  // namespace kiwi::solve::remat
