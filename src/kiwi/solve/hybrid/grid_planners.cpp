// The exhaustive layer-level planners (layer_planners.h): every plan of a uniform space simulated,
// the fastest that fits kept. Megatron-LM's 3D grid, PyTorch FSDP with and without checkpointing, and
// kiwi's own uniform plans.
#include <fmt/format.h>

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

// The fastest of `plans` that fits, simulating them in what the request's time limit allows.
Result<PlanCandidate> BestOf(const std::vector<NamedLayerPlan>& plans, const PlanRequest& r) {
  const Clock::time_point start = Clock::now();
  PlanCandidate c;
  Result<bool> complete = SimulateUniformPlans(
      r.model, r.cluster, r.cost_model, plans, DeadlineAfter(start, r.time_limit_seconds),
      [&](const NamedLayerPlan&, plan::LayerPlan expanded, sim::LayerSimResult result) {
        ++c.plans_evaluated;
        const int64_t peak = result.summary.peak_memory_bytes;
        if (peak > r.memory_budget_bytes) {
          if (!c.found && (c.smallest_peak_bytes == 0 || peak < c.smallest_peak_bytes)) c.smallest_peak_bytes = peak;
          return;
        }
        if (c.found && result.throughput_samples_per_second <= c.simulated.throughput_samples_per_second) return;
        c.found = true;
        c.smallest_peak_bytes = 0;
        c.plan = std::move(expanded);
        c.simulated = std::move(result);
      });
  if (!complete) return complete.error();
  c.timed_out = !*complete;
  c.proven = *complete;
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
  // FSDP2's plans are kiwi.torch.parallelize's: no expert or context parallelism
  const bool parallelize = model.zero_runtime == cost::ZeroRuntime::kFsdp2;
  return {.num_layers = static_cast<int>(model.layers.size()),
          .num_devices = cluster.NumDevices(),
          .global_batch = batch,
          .allow_selective_recompute = model.HasAttentionCore(),
          .experts = parallelize ? 0 : UniformExperts(model),
          .context_sequence = parallelize ? 0 : model.ContextParallelSequence(),
          .recompute_sets = remat::CommonRecomputeSets(model.layers, HybridSearchOptions::kDefaultRecomputeSets),
          .max_tp = cluster.devices_per_node,
          .compact = true};
}

Result<bool> SimulateUniformPlans(
    const cost::LayerModel& model, const cost::Cluster& cluster, const cost::CostModel& cost_model,
    const std::vector<NamedLayerPlan>& plans, Clock::time_point deadline,
    const std::function<void(const NamedLayerPlan& plan, plan::LayerPlan expanded, sim::LayerSimResult result)>& visit) {
  const int layers = static_cast<int>(model.layers.size());
  for (const NamedLayerPlan& p : plans) {
    if (Clock::now() > deadline) return false;
    if (!cost::MakeLayerMesh(cluster, p.plan.pp_degree, p.plan.layers.front()).ok()) continue;  // stages split nodes
    plan::LayerPlan expanded = ExpandUniform(p.plan, layers);
    Result<sim::LayerSimResult> r = sim::SimulateLayerPlan(model, expanded, cluster, cost_model);
    if (!r) return r.error();
    visit(p, std::move(expanded), *std::move(r));
  }
  return true;
}

Error NoUniformPlanAtBatch(int64_t batch, const cost::Cluster& cluster) {
  return BadInput(fmt::format("--batch {}: no uniform plan on the {} devices of {}: the batch must divide by a "
                              "data-parallel degree (devices / (PP x TP), over CP groups where the model's attention "
                              "has a ring); try --batch {}",
                              batch, cluster.NumDevices(), cluster.name, cluster.NumDevices()));
}

Result<PlanCandidate> PlanMegatronGrid(const PlanRequest& r) { return BestOf(MegatronPlans(r.model, r.cluster, r.global_batch), r); }

Result<PlanCandidate> PlanFsdp(const PlanRequest& r) { return BestOf(FsdpPlans(r.model, r.cluster, r.global_batch, false), r); }

Result<PlanCandidate> PlanFsdpCheckpointed(const PlanRequest& r) {
  return BestOf(FsdpPlans(r.model, r.cluster, r.global_batch, true), r);
}

Result<PlanCandidate> PlanUniform(const PlanRequest& r) {
  return BestOf(UniformLayerPlans(UniformSpace(r.model, r.cluster, r.global_batch)), r);
}

}  // namespace kiwi::solve::hybrid
