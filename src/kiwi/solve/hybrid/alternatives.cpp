#include "kiwi/solve/hybrid/alternatives.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "kiwi/cost/layer_cost.h"
#include "kiwi/solve/hybrid/uniform_plans.h"
#include "kiwi/solve/remat/recompute_frontier.h"
#include "kiwi/util/elapsed.h"
#include "kiwi/util/units.h"

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

struct Grid {
  const cost::LayerModel& model;
  const cost::Cluster& cluster;
  const cost::CostModel& cost_model;
  int64_t budget;
};

// Simulates the compact `plans` until `deadline`: the fastest that fits is the candidate's.
Result<PlanCandidate> BestOf(PlanCandidate c, const std::vector<NamedLayerPlan>& plans, const Grid& g,
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
    if (peak > g.budget) {
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

PlanCandidate FromSearch(PlanCandidate c, const HybridSearchResult& r) {
  c.found = r.feasible;
  if (r.feasible) {
    c.plan = r.plan;
    c.simulated = r.simulated;
  }
  c.proven = r.proven;
  c.timed_out = r.timed_out;
  c.plans_evaluated = r.evaluated;
  c.seconds = r.search_seconds;
  c.smallest_peak_bytes = r.feasible ? 0 : r.smallest_feasible_memory;
  return c;
}

std::string Summary(const PlanCandidate& c) {
  const std::string searched = fmt::format("{} {} in {}{}", c.plans_evaluated, c.plans_evaluated == 1 ? "plan" : "plans",
                                           FormatSeconds(c.seconds), c.timed_out ? " (time limit)" : "");
  if (c.found)
    return fmt::format("{}: {:.2f} samples/s at {} per device ({})", c.name, c.simulated.throughput_samples_per_second,
                       FormatBytes(c.simulated.summary.peak_memory_bytes), searched);
  return fmt::format("{}: no plan fits{} ({})", c.name,
                     c.smallest_peak_bytes > 0 ? fmt::format(" (smallest {})", FormatBytes(c.smallest_peak_bytes)) : "",
                     searched);
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

Result<PlanAllResult> PlanAll(const cost::LayerModel& model, const cost::Cluster& cluster,
                              const cost::CostModel& cost_model, const PlanAllOptions& o) {
  const Clock::time_point start = Clock::now();
  const Grid grid{model, cluster, cost_model, o.memory_budget_bytes};
  const std::vector<NamedLayerPlan> uniform_plans = UniformLayerPlans(UniformSpace(model, cluster, o.global_batch));
  if (uniform_plans.empty())  // every data-parallel degree the devices allow leaves part of a sample on a device
    return BadInput(fmt::format("--batch {}: no plan on the {} devices of {}: the batch must divide by a "
                                "data-parallel degree (devices / (PP x TP), over CP groups where the model's "
                                "attention has a ring); try --batch {}",
                                o.global_batch, cluster.NumDevices(), cluster.name, cluster.NumDevices()));
  // Each alternative gets at most an eighth of the limit; kiwi's own search what they leave.
  const double share = o.time_limit_seconds / 8.0;
  const auto alternative_deadline = [&] { return DeadlineAfter(Clock::now(), share); };
  PlanAllResult out;
  out.candidates.push_back({.name = "kiwi (per-layer)", .space = "per-layer DP/ZeRO-1/2/3/TP/SP/EP/CP, recomputation, offload, pipelines, micro-batches"});
  const auto add = [&](Result<PlanCandidate> c) -> Status {
    if (!c) return c.error();
    if (o.progress) o.progress(Summary(*c));
    out.candidates.push_back(*std::move(c));
    return Status::Ok();
  };
  KIWI_RETURN_IF_ERROR(add(BestOf({.name = "Megatron-LM",
                                   .space = "uniform TP (SP) x PP x DP (distributed optimizer) x micro-batches x interleaving, "
                                            "full / selective / no recompute, exhaustive"},
                                  MegatronPlans(model, cluster, o.global_batch), grid, alternative_deadline())));
  KIWI_RETURN_IF_ERROR(add(BestOf({.name = "FSDP (ZeRO-3)", .space = "every layer ZeRO-3 over all devices, micro-batches"},
                                  FsdpPlans(model, cluster, o.global_batch, false), grid, alternative_deadline())));
  KIWI_RETURN_IF_ERROR(add(BestOf({.name = "FSDP (ZeRO-3) + CKPT",
                                   .space = "every layer ZeRO-3 and checkpointed, micro-batches"},
                                  FsdpPlans(model, cluster, o.global_batch, true), grid, alternative_deadline())));
  const auto search = [&](Method method, double seconds) -> Result<HybridSearchResult> {
    HybridSearchOptions s;
    s.method = method;
    s.memory_budget_bytes = o.memory_budget_bytes;
    s.global_batch = o.global_batch;
    s.time_limit_seconds = seconds;
    return SearchHybridPlan(model, cluster, cost_model, s);
  };
  for (const auto& [method, name, space] :
       {std::tuple{Method::kBmw, "Galvatron-BMW", "per-layer DP/SDP/TP/CKPT, bi-objective pipeline partitions"},
        std::tuple{Method::k3d, "DeepSpeed 3D", "2-way TP x 2-way PP x the rest DP"}}) {
    Result<HybridSearchResult> r = search(method, share);
    if (!r) return r.error();
    KIWI_RETURN_IF_ERROR(add(FromSearch({.name = name, .space = space}, *r)));
  }
  KIWI_RETURN_IF_ERROR(add(BestOf({.name = "uniform", .space = "every layer one strategy of kiwi's space"}, uniform_plans,
                                  grid, alternative_deadline())));
  const auto progress = o.progress;
  HybridSearchOptions s;
  s.memory_budget_bytes = o.memory_budget_bytes;
  s.global_batch = o.global_batch;
  s.time_limit_seconds = std::max(o.time_limit_seconds - SecondsSince(start), 0.01);
  if (progress) s.progress = [&](const std::string& line) { progress("kiwi (per-layer): " + line); };
  Result<HybridSearchResult> kiwi = SearchHybridPlan(model, cluster, cost_model, s);
  if (!kiwi) return kiwi.error();
  out.candidates.front() = FromSearch(std::move(out.candidates.front()), *kiwi);
  if (progress) progress(Summary(out.candidates.front()));
  for (size_t i = 0; i < out.candidates.size(); ++i) {
    const PlanCandidate& c = out.candidates[i];
    if (!c.found) continue;
    if (out.best < 0 || c.simulated.throughput_samples_per_second >
                            out.candidates[static_cast<size_t>(out.best)].simulated.throughput_samples_per_second)
      out.best = static_cast<int>(i);
  }
  return out;
}

}  // namespace kiwi::solve::hybrid
