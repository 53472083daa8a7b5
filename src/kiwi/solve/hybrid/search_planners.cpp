// The layer-level planners that are searches (layer_planners.h): kiwi's own per-layer search and the
// Table II baselines kiwi plan compares with, each SearchHybridPlan at the request's batch.
#include "kiwi/solve/hybrid/layer_planners.h"
#include "kiwi/solve/hybrid/search.h"

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

}  // namespace

// On a model FSDP2 runs the searches plan for kiwi.torch.parallelize (SearchHybridPlan).
Result<PlanCandidate> PlanWithKiwi(const PlanRequest& r) { return Search(Method::kKiwi, r); }
Result<PlanCandidate> PlanGalvatronBmw(const PlanRequest& r) { return Search(Method::kBmw, r); }
Result<PlanCandidate> PlanDeepSpeed3d(const PlanRequest& r) { return Search(Method::k3d, r); }

}  // namespace kiwi::solve::hybrid
