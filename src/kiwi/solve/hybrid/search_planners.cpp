// The layer-level planners that are searches (layer_planners.h): kiwi's own per-layer search and the
// Table II baselines kiwi plan compares with, each SearchHybridPlan at the request's batch.
#include <algorithm>
#include <chrono>

#include "kiwi/solve/hybrid/layer_planners.h"
#include "kiwi/solve/hybrid/search.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::hybrid {
namespace {

PlanCandidate FromSearch(PlanCandidate c, const HybridSearchResult& r) {
  c.found = r.feasible;
  if (r.feasible) {
    c.plan = r.plan;
    c.simulated = r.simulated;
  }
  c.proven = r.proven;
  c.timed_out = r.timed_out;
  c.none_faster = r.none_faster;
  c.plans_evaluated = r.evaluated;
  c.seconds = r.search_seconds;
  c.smallest_peak_bytes = r.feasible || r.none_faster ? 0 : r.smallest_feasible_memory;
  return c;
}

HybridSearchOptions OptionsOf(Method method, const PlanRequest& r) {
  HybridSearchOptions s;
  s.method = method;
  s.memory_budget_bytes = r.memory_budget_bytes;
  s.global_batch = r.global_batch;
  s.time_limit_seconds = r.time_limit_seconds;
  s.beat_throughput = r.beat_samples_per_second;
  s.progress = r.progress;
  return s;
}

Result<PlanCandidate> Search(Method method, const PlanRequest& r) {
  Result<HybridSearchResult> found = SearchHybridPlan(r.model, r.cluster, r.cost_model, OptionsOf(method, r));
  if (!found) return found.error();
  return FromSearch({}, *found);
}

// A plan for FSDP2 (cost::ZeroRuntime::kFsdp2) is one for kiwi.torch.parallelize: a per-layer space
// narrowed to what it runs (one TP mesh: every layer's TP degree the same; no recompute sets, offloading,
// context or expert parallelism), searched once per TP degree, each search wanting only plans faster
// than the best so far; the fastest wins (proven when every search is).
Result<PlanCandidate> SearchForParallelize(Method method, const PlanRequest& r) {
  const auto start = std::chrono::steady_clock::now();
  PlanCandidate best;
  bool all_proven = true, all_none_faster = true;
  for (int tp = 1; tp <= r.cluster.NumDevices(); tp *= 2) {
    HybridSearchOptions s = OptionsOf(method, r);
    s.tp = tp;
    s.offload = s.context_parallel = s.expert_parallel = false;
    s.recompute_sets = 0;
    s.time_limit_seconds = std::max(r.time_limit_seconds - SecondsSince(start), 0.01);
    if (best.found) s.beat_throughput = std::max(s.beat_throughput, best.simulated.throughput_samples_per_second);
    Result<HybridSearchResult> found = SearchHybridPlan(r.model, r.cluster, r.cost_model, s);
    if (!found) return found.error();
    const PlanCandidate c = FromSearch({}, *found);
    all_proven &= c.proven || c.none_faster;
    all_none_faster &= c.none_faster;
    best.timed_out |= c.timed_out;
    best.plans_evaluated += c.plans_evaluated;
    if (c.found) {  // faster than every earlier degree's (it beat their best)
      best.found = true;
      best.plan = c.plan;
      best.simulated = c.simulated;
    } else if (c.smallest_peak_bytes > 0 && (best.smallest_peak_bytes == 0 || c.smallest_peak_bytes < best.smallest_peak_bytes)) {
      best.smallest_peak_bytes = c.smallest_peak_bytes;
    }
  }
  best.proven = all_proven && !best.timed_out;
  best.none_faster = !best.found && all_none_faster;
  if (best.found || best.none_faster) best.smallest_peak_bytes = 0;
  best.seconds = SecondsSince(start);
  return best;
}

}  // namespace

Result<PlanCandidate> PlanWithKiwi(const PlanRequest& r) {
  if (r.model.zero_runtime == cost::ZeroRuntime::kFsdp2) return SearchForParallelize(Method::kKiwi, r);
  return Search(Method::kKiwi, r);
}
Result<PlanCandidate> PlanGalvatronBmw(const PlanRequest& r) {
  if (r.model.zero_runtime == cost::ZeroRuntime::kFsdp2) return SearchForParallelize(Method::kBmw, r);
  return Search(Method::kBmw, r);
}
Result<PlanCandidate> PlanDeepSpeed3d(const PlanRequest& r) { return Search(Method::k3d, r); }

}  // namespace kiwi::solve::hybrid
