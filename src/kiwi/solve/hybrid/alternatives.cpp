#include "kiwi/solve/hybrid/alternatives.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "kiwi/solve/hybrid/uniform_plans.h"
#include "kiwi/util/elapsed.h"
#include "kiwi/util/units.h"

namespace kiwi::solve::hybrid {
namespace {

std::string Summary(const PlanCandidate& c) {
  const std::string searched = fmt::format("{} {} in {}{}", c.plans_evaluated, c.plans_evaluated == 1 ? "plan" : "plans",
                                           FormatSeconds(c.seconds), c.timed_out ? " (time limit)" : "");
  if (c.found)
    return fmt::format("{}: {:.2f} samples/s at {} per device ({})", c.name, c.simulated.throughput_samples_per_second,
                       FormatBytes(c.simulated.summary.peak_memory_bytes), searched);
  if (c.none_faster) return fmt::format("{}: no plan faster than the others' ({})", c.name, searched);
  return fmt::format("{}: no plan fits{} ({})", c.name,
                     c.smallest_peak_bytes > 0 ? fmt::format(" (smallest {})", FormatBytes(c.smallest_peak_bytes)) : "",
                     searched);
}

// The user's configuration as a candidate: simulated as given; it fits or says what it needs.
Result<PlanCandidate> CompareTo(const cost::LayerModel& model, const cost::Cluster& cluster,
                                const cost::CostModel& cost_model, const PlanAllOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  if (o.compare_to->global_batch != o.global_batch)
    return BadInput(fmt::format("{}: its global batch {} is not the one planned, {}", o.compare_name,
                                o.compare_to->global_batch, o.global_batch));
  Result<sim::LayerSimResult> simulated = sim::SimulateLayerPlan(model, *o.compare_to, cluster, cost_model);
  if (!simulated) return BadInput(fmt::format("{}: {}", o.compare_name, simulated.error().message));
  PlanCandidate c;
  c.name = o.compare_name;
  c.space = "the configuration given, simulated as it is";
  c.plans_evaluated = 1;
  c.found = simulated->summary.peak_memory_bytes <= o.memory_budget_bytes;
  if (c.found) {
    c.plan = *o.compare_to;
    c.simulated = *std::move(simulated);
  } else {
    c.smallest_peak_bytes = simulated->summary.peak_memory_bytes;
  }
  c.seconds = SecondsSince(start);
  return c;
}

}  // namespace

Result<PlanAllResult> PlanAll(const cost::LayerModel& model, const cost::Cluster& cluster,
                              const cost::CostModel& cost_model, const PlanAllOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  if (UniformLayerPlans(UniformSpace(model, cluster, o.global_batch)).empty())  // no DP degree leaves whole samples
    return NoUniformPlanAtBatch(o.global_batch, cluster);
  const std::vector<LayerPlanner>& planners = LayerPlanners();
  PlanAllResult out;
  out.candidates.resize(planners.size());
  std::optional<PlanCandidate> yours;
  if (o.compare_to != nullptr) {
    Result<PlanCandidate> c = CompareTo(model, cluster, cost_model, o);
    if (!c) return c.error();
    if (o.progress) o.progress(Summary(*c));
    yours = *std::move(c);
  }
  PlanRequest request{.model = model,
                      .cluster = cluster,
                      .cost_model = cost_model,
                      .memory_budget_bytes = o.memory_budget_bytes,
                      .global_batch = o.global_batch};
  // The alternatives first, each in at most an eighth of the limit; kiwi's own search (the first) in
  // what they leave.
  for (size_t i = 1; i <= planners.size(); ++i) {
    const size_t k = i % planners.size();
    request.time_limit_seconds =
        k == 0 ? std::max(o.time_limit_seconds - SecondsSince(start), 0.01) : o.time_limit_seconds / 8.0;
    request.progress = {};
    // kiwi's search wants only plans faster than the alternatives' best: it skips what cannot beat it.
    if (k == 0 && o.seed_with_alternatives) {
      for (const PlanCandidate& alternative : out.candidates)
        if (alternative.found)
          request.beat_samples_per_second =
              std::max(request.beat_samples_per_second, alternative.simulated.throughput_samples_per_second);
      if (yours && yours->found)
        request.beat_samples_per_second =
            std::max(request.beat_samples_per_second, yours->simulated.throughput_samples_per_second);
    }
    if (k == 0 && o.progress)
      request.progress = [&](const std::string& line) { o.progress(std::string(planners[k].name) + ": " + line); };
    Result<PlanCandidate> c = RunVerified(planners[k], request);
    if (!c) return c.error();
    if (o.progress) o.progress(Summary(*c));
    out.candidates[k] = *std::move(c);
  }
  if (yours) out.candidates.push_back(*std::move(yours));
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
