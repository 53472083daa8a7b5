#include "kiwi/solve/hybrid/layer_planners.h"

#include <fmt/format.h>

namespace kiwi::solve::hybrid {

const std::vector<LayerPlanner>& LayerPlanners() {
  static const std::vector<LayerPlanner> planners = {
      {"kiwi (per-layer)", "per-layer DP/ZeRO-1/2/3/TP/SP/EP/CP, recomputation, offload, pipelines, micro-batches",
       PlanWithKiwi},
      {"Megatron-LM",
       "uniform TP (SP) x PP x DP (distributed optimizer) x micro-batches x interleaving, full / selective / no "
       "recompute, exhaustive",
       PlanMegatronGrid},
      {"FSDP (ZeRO-3)", "every layer ZeRO-3 over all devices, micro-batches", PlanFsdp},
      {"FSDP (ZeRO-3) + CKPT", "every layer ZeRO-3 and checkpointed, micro-batches", PlanFsdpCheckpointed},
      {"Galvatron-BMW", "per-layer DP/SDP/TP/CKPT, bi-objective pipeline partitions", PlanGalvatronBmw},
      {"DeepSpeed 3D", "2-way TP x 2-way PP x the rest DP", PlanDeepSpeed3d},
      {"uniform", "every layer one strategy of kiwi's space", PlanUniform},
  };
  return planners;
}

Result<PlanCandidate> RunNamed(const LayerPlanner& planner, const PlanRequest& request) {
  Result<PlanCandidate> c = planner.run(request);
  if (!c) return c.error();
  c->name = planner.name;
  c->space = planner.space;
  return c;
}

Result<PlanCandidate> RunVerified(const LayerPlanner& planner, const PlanRequest& request) {
  Result<PlanCandidate> c = RunNamed(planner, request);
  if (!c || !c->found) return c;
  Result<sim::LayerSimResult> replay = sim::SimulateLayerPlan(request.model, c->plan, request.cluster, request.cost_model);
  if (!replay)
    return Internal(fmt::format("{}: its plan does not simulate: {}", planner.name, replay.error().message));
  const int64_t peak = replay->summary.peak_memory_bytes;
  if (peak > request.memory_budget_bytes || peak != c->simulated.summary.peak_memory_bytes ||
      replay->summary.iteration_seconds != c->simulated.summary.iteration_seconds)
    return Internal(fmt::format("{}: the simulator says {} bytes and {} s per iteration, the planner {} bytes and {} s "
                                "within {} bytes",
                                planner.name, peak, replay->summary.iteration_seconds, c->simulated.summary.peak_memory_bytes,
                                c->simulated.summary.iteration_seconds, request.memory_budget_bytes));
  return c;
}

}  // namespace kiwi::solve::hybrid
