// The exhaustive layer-level planners (layer_planners.h): every plan of a uniform space simulated,
// the fastest that fits kept. Megatron-LM's 3D grid, PyTorch FSDP with and without checkpointing, and
// kiwi's own uniform plans.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "kiwi/cost/layer_cost.h"
#include "kiwi/solve/hybrid/layer_planners.h"
#include "kiwi/solve/hybrid/search.h"
#include "kiwi/solve/hybrid/uniform_plans.h"
#include "kiwi/solve/remat/recompute_frontier.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::hybrid {
namespace {

using Clock = std::chrono::steady_clock;

// The experts every layer of `model` has (0 unless all have the same number): what a uniform plan's
// expert parallelism can split.
int64_t UniformExperts(const cost::LayerModel& model) {
  const int64_t experts = model.layers.empty() ? 0 : model.layers.front().experts;
  for (const cost::LayerProfile& p : model.layers)
    if (p.experts != experts) return 0;
  return experts;
}

// Simulates the compact `plans` until `deadline`: the fastest that fits is the candidate's.
Result<PlanCandidate> BestOf(PlanCandidate c, const std::vector<NamedLayerPlan>& plans, const PlanRequest& g,
                             Clock::time_point deadline) {
  const Clock::time_point start = Clock::now();
  const int layers = static_cast<int>(g.model.layers.size());
  for (const NamedLayerPlan& p : plans) {
    if (Clock::now() > deadline) {
      c.timed_out = true;
      break;
    }
    if (!cost::MakeLayerMesh(g.cluster, p.plan.pp_degree, p.plan.layers.front()).ok()) continue;  // stages split nodes
    plan::LayerPlan expanded = ExpandUniform(p.plan, layers);
    Result<sim::LayerSimResult> r = sim::SimulateLayerPlan(g.model, expanded, g.cluster, g.cost_model);
    if (!r) return r.error();
    ++c.plans_evaluated;
    const int64_t peak = r->summary.peak_memory_bytes;
    if (peak > g.memory_budget_bytes) {
      if (!c.found && (c.smallest_peak_bytes == 0 || peak < c.smallest_peak_bytes)) c.smallest_peak_bytes = peak;
      continue;
    }
    if (c.found && r->throughput_samples_per_second <= c.simulated.throughput_samples_per_second) continue;
    c.found = true;
    c.smallest_peak_bytes = 0;
    c.plan = std::move(expanded);
    c.simulated = *std::move(r);
  }
  c.proven = !c.timed_out;
  c.seconds = SecondsSince(start);
  return c;
}

std::vector<NamedLayerPlan> Keep(std::vector<NamedLayerPlan> plans, auto keep) {
  std::erase_if(plans, [&](const NamedLayerPlan& p) { return !keep(p.plan); });
  return plans;
}

// Megatron-LM's grid: TP within a node, ZeRO-1 at most (its distributed optimizer), no recompute sets.
std::vector<NamedLayerPlan> MegatronPlans(const cost::LayerModel& model, const cost::Cluster& cluster, int64_t batch) {
  UniformPlanOptions o = UniformSpace(model, cluster, batch);
  o.recompute_sets.clear();
  o.allow_sdp = false;
  o.sweep_micro_batches = true;
  o.interleave = true;
  return Keep(UniformLayerPlans(o), [](const plan::LayerPlan& p) {
    return p.layers.front().ZeroStage() <= plan::Zero::kOptimizerStates;
  });
}

// PyTorch FSDP's FULL_SHARD: every layer ZeRO-3 over all devices, one stage, micro-batches searched.
std::vector<NamedLayerPlan> FsdpPlans(const cost::LayerModel& model, const cost::Cluster& cluster, int64_t batch,
                                      bool checkpoint) {
  UniformPlanOptions o = UniformSpace(model, cluster, batch);
  o.recompute_sets.clear();
  o.allow_zero12 = false;
  o.allow_sequence_parallel = false;
  o.allow_selective_recompute = false;
  o.experts = 0;
  o.context_sequence = 0;
  o.sweep_micro_batches = true;
  return Keep(UniformLayerPlans(o), [&](const plan::LayerPlan& p) {
    const plan::LayerStrategy& s = p.layers.front();
    return p.pp_degree == 1 && s.tp == 1 && s.ZeroStage() == plan::Zero::kParameters && s.checkpoint == checkpoint;
  });
}

}  // namespace

UniformPlanOptions UniformSpace(const cost::LayerModel& model, const cost::Cluster& cluster, int64_t batch) {
  return {.num_layers = static_cast<int>(model.layers.size()),
          .num_devices = cluster.NumDevices(),
          .global_batch = batch,
          .allow_selective_recompute = model.HasAttentionCore(),
          .experts = UniformExperts(model),
          .context_sequence = model.ContextParallelSequence(),
          .recompute_sets = remat::CommonRecomputeSets(model.layers, HybridSearchOptions::kDefaultRecomputeSets),
          .max_tp = cluster.devices_per_node,
          .compact = true};
}

Result<PlanCandidate> PlanMegatronGrid(const PlanRequest& r) {
  return BestOf({}, MegatronPlans(r.model, r.cluster, r.global_batch), r, DeadlineAfter(Clock::now(), r.time_limit_seconds));
}

Result<PlanCandidate> PlanFsdp(const PlanRequest& r) {
  return BestOf({}, FsdpPlans(r.model, r.cluster, r.global_batch, false), r, DeadlineAfter(Clock::now(), r.time_limit_seconds));
}

Result<PlanCandidate> PlanFsdpCheckpointed(const PlanRequest& r) {
  return BestOf({}, FsdpPlans(r.model, r.cluster, r.global_batch, true), r, DeadlineAfter(Clock::now(), r.time_limit_seconds));
}

Result<PlanCandidate> PlanUniform(const PlanRequest& r) {
  return BestOf({}, UniformLayerPlans(UniformSpace(r.model, r.cluster, r.global_batch)), r,
                DeadlineAfter(Clock::now(), r.time_limit_seconds));
}

}  // namespace kiwi::solve::hybrid
