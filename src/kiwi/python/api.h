#pragma once
// The C++ side of the Python package `kiwi` (python/kiwi): every call takes and returns JSON text
// (kiwi graph JSON, plan JSON, cluster JSON or preset names), so the binding stays generic and each
// planner's own reader does the validation. Errors come back as kiwi::Error (module.cpp raises the
// matching Python exception: BadInputError, InfeasibleError, TimeLimitError, InternalError).
//
//   Result<std::string> training = BuildTrainingGraphJson(forward_json, "adam", false);
//   Result<std::string> r = SolveRematJson(*training, {.budget = 1 << 30, .solver = "auto"});
#include <cstdint>
#include <string>
#include <vector>

#include "kiwi/util/result.h"

namespace kiwi::python {

// A cluster given as a preset name, a cluster JSON document (text starting with '{') or a file path.
// `profile`: a profile file (cost/profile.h) as a path or JSON text, empty for none.
struct Target {
  std::string cluster = "v100-nvlink-8";
  std::string profile;
};

// Parses and verifies a kiwi graph JSON (any of the three graph formats) and writes it back as kiwi
// graph JSON; `annotate` also fills flops and bytes_accessed (ir::AnnotateFlopsAndBytes).
Result<std::string> NormalizeGraphJson(const std::string& text, const std::string& source, bool annotate);

// ir::BuildTrainingGraph on a forward graph; optimizer "adam" | "sgd" | "none".
Result<std::string> BuildTrainingGraphJson(const std::string& forward, const std::string& optimizer,
                                           bool master_weights);

// {"nodes", "edges", "forward_nodes", "backward_nodes", "checkpoint_all_peak_bytes", "compute_cost",
//  "memory_lower_bound_bytes", "node_costs": [seconds per node id]} on the target's device.
Result<std::string> GraphSummaryJson(const std::string& graph, const Target& target);

// {"op_seconds"}: what each op that pays a per-op time cost beyond its priced work when `graph`'s
// forward and backward (its optimizer step left out) ran in `seconds` (cost::CalibratedStepOpSeconds
// on the target's cost model): how `kiwi profile` calibrates an executor from one timed small step.
Result<std::string> CalibratedOpSecondsJson(const std::string& graph, double seconds, const Target& target);

struct RematRequest {
  int64_t budget = 0;
  std::string solver = "auto";
  double time_limit_seconds = 60.0;
  int threads = 0;
  bool progress = false;  // solver progress lines on stderr
};

// SolveRemat: CONTRACT.md's `kiwi remat --json` fields plus "smallest_known_budget_bytes",
// "memory_lower_bound_bytes" and "note". An infeasible budget is not an error here: "feasible" is false.
Result<std::string> SolveRematJson(const std::string& graph, const RematRequest& request, const Target& target);

// The keep-set schedule (solve/remat/keep_set_schedule.h, KeepSetScheduler::FromKeep) of a per-node keep
// vector: {"schedule": [...], "peak_memory_bytes", "compute_cost"}, the peak and cost from the simulator.
Result<std::string> KeepSetScheduleJson(const std::string& graph, const std::vector<bool>& keep,
                                        const Target& target);

// Replays a plan (plan JSON) on the graph: {"peak_memory_bytes", "peak_step", "peak_node",
// "iteration_seconds", "time": {...}, "recomputations", "timeline": [bytes after each step]}.
Result<std::string> SimulateJson(const std::string& graph, const std::string& plan, const Target& target);

// A layer-level plan (plan JSON with "model", "model_flags" and a "layer" section, as `kiwi hybrid
// --out` writes it) judged by the layer simulator on the target cluster (the plan's cluster when
// target.cluster is empty): {"model": per-layer profiles, "simulated": {"iteration_seconds",
// "peak_memory_bytes", "stage_peak_memory_bytes"}, "traffic": per-layer and per-stage bytes per device
// per iteration by collective (sim::LayerPlanTraffic)}.
Result<std::string> LayerPlanReportJson(const std::string& plan, const Target& target);

// Parses a plan JSON and writes it back (validation + normalisation).
Result<std::string> NormalizePlanJson(const std::string& text, const std::string& source);

std::vector<std::string> RematSolverNames();
std::vector<std::string> ClusterPresets();

}  // namespace kiwi::python
