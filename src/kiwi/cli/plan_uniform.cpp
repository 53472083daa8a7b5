// `kiwi plan --uniform`: every uniform layer-level plan (all layers one strategy of kiwi's space: DP,
// ZeRO, TP, SP, PP, EP, CP and their recomputation) simulated and listed, fastest fitting first. The
// experts' view of the uniform space `kiwi plan` searches as one of its alternatives.
#include "kiwi/cli/plan_uniform.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "kiwi/io/file_io.h"
#include "kiwi/io/plan_json.h"
#include "kiwi/models/layer_model.h"
#include "kiwi/report/table.h"
#include "kiwi/sim/layer_simulator.h"
#include "kiwi/solve/hybrid/alternatives.h"
#include "kiwi/solve/hybrid/uniform_plans.h"
#include "kiwi/util/elapsed.h"
#include "kiwi/util/units.h"

namespace kiwi::cli {
namespace {

struct Candidate {
  std::string name;
  plan::LayerPlan plan;  // compact: its one strategy (solve::ExpandUniform gives the plan)
  sim::LayerSimResult result;
  bool fits = false;
};

// Simulates candidates until the time limit; the ones evaluated by then compete.
Result<std::vector<Candidate>> EvaluateUniformPlans(const cost::LayerModel& model, int64_t batch,
                                                    const cost::Cluster& cluster, const cost::CostModel& cm,
                                                    int64_t budget, double time_limit_seconds) {
  std::vector<Candidate> out;
  const auto plans = solve::UniformLayerPlans(solve::hybrid::UniformSpace(model, cluster, batch));
  if (plans.empty()) return solve::hybrid::NoUniformPlanAtBatch(batch, cluster);
  Result<bool> simulated = solve::hybrid::SimulateUniformPlans(
      model, cluster, cm, plans, DeadlineAfter(std::chrono::steady_clock::now(), time_limit_seconds),
      [&](const solve::NamedLayerPlan& p, plan::LayerPlan, sim::LayerSimResult r) {
        const bool fits = r.summary.peak_memory_bytes <= budget;
        out.push_back({p.name, p.plan, std::move(r), fits});  // compact: one strategy
      });
  if (!simulated) return simulated.error();
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits) return a.result.throughput_samples_per_second > b.result.throughput_samples_per_second;
    return a.result.summary.peak_memory_bytes < b.result.summary.peak_memory_bytes;
  });
  return out;
}

nlohmann::json CandidateJson(const Candidate& c) {
  const plan::LayerStrategy& s = c.plan.layers.front();
  nlohmann::json j = io::LayerStrategyJson<nlohmann::json>(s, /*contract_sdp=*/true);
  j.update({{"name", c.name},
            {"pp_degree", c.plan.pp_degree},
            {"micro_batches", c.plan.micro_batches},
            {"peak_memory_bytes", c.result.summary.peak_memory_bytes},
            {"iteration_seconds", c.result.summary.iteration_seconds},
            {"throughput_samples_per_second", c.result.throughput_samples_per_second},
            {"fits", c.fits}});
  return j;
}

std::string CandidateTable(const std::vector<Candidate>& cands) {
  report::Table t({"plan", "PP", "TP", "SP", "DP", "ZeRO", "CKPT", "micro-batches", "peak memory/device",
                   "iteration", "samples/s", "fits"});
  for (const Candidate& c : cands) {
    const plan::LayerStrategy& s = c.plan.layers.front();
    // A recompute set by its size here ("+RC7"); the JSON names its ops.
    t.AddRow({plan::ShortStrategyName(s, c.plan.pp_degree), std::to_string(c.plan.pp_degree), std::to_string(s.tp), s.SequenceParallel() ? "yes" : "no",
              std::to_string(s.dp),
              std::to_string(static_cast<int>(s.ZeroStage())),
              s.checkpoint ? "yes" : s.SelectiveRecompute() ? "selective" : s.RecomputesSet() ? fmt::format("{} ops", s.recompute.size()) : "no",
              std::to_string(c.plan.micro_batches),
              FormatBytes(c.result.summary.peak_memory_bytes), FormatSeconds(c.result.summary.iteration_seconds),
              fmt::format("{:.1f}", c.result.throughput_samples_per_second), c.fits ? "yes" : "NO"});
  }
  return t.Render();
}

}  // namespace

int RunUniformPlans(const UniformPlansRequest& o) {
  const models::ModelSpec& spec = o.spec;
  const cost::Cluster& cluster = o.cluster;
  const cost::LayerModel& layer_model = o.layer_model;
  const int64_t budget = o.budget;
  const cost::CostModel& cm = o.cost_model;
  const int64_t batch = models::SpecBatch(spec);
  Result<std::vector<Candidate>> cands =
      EvaluateUniformPlans(layer_model, batch, cluster, cm, budget, o.seconds);
  if (!cands) return ReportError(cands.error());
  if (cands->empty())
    return ReportError({ErrorCode::kTimeLimit, "the time limit expired before any plan was evaluated"});
  if (!cands->front().fits) {
    int64_t smallest = INT64_MAX;
    for (const Candidate& c : *cands) smallest = std::min(smallest, c.result.summary.peak_memory_bytes);
    return ReportError(Infeasible(fmt::format(
        "no plan fits {} per device; the smallest peak among kiwi's plans is {} ({} bytes): use --memory {} or more",
        FormatBytes(budget), FormatBytes(smallest), smallest, smallest)));
  }
  const Candidate& best = cands->front();
  if (!o.out.empty()) {
    Status written = WriteLayerPlanFile(o.out, o.model, o.hf_config, o.cluster_flag, "uniform:" + best.name,
                                        solve::ExpandUniform(best.plan, static_cast<int>(layer_model.layers.size())),
                                        best.result);
    if (!written) return ReportError(written.error());
  }
  if (o.json) {
    nlohmann::json plans = nlohmann::json::array();
    for (const Candidate& c : *cands) plans.push_back(CandidateJson(c));
    PrintJson({{"model", DescribeModel(spec)}, {"cluster", cluster.name}, {"memory_budget_bytes", budget},
               {"feasible", true}, {"best", CandidateJson(best)}, {"plans", plans}});
    return 0;
  }
  std::cout << fmt::format("kiwi plan --uniform\n  model    {}\n  cluster  {}\n  memory   {} per device\n\n",
                           DescribeModel(spec), DescribeCluster(cluster), FormatBytes(budget));
  std::cout << "Uniform layer-level plans (every layer the same strategy), simulated:\n"
            << CandidateTable(*cands) << '\n';
  std::cout << fmt::format("Best plan that fits: {} at {:.1f} samples/s, {} per device.\n", best.name,
                           best.result.throughput_samples_per_second,
                           FormatBytes(best.result.summary.peak_memory_bytes));
  if (!o.out.empty()) std::cout << PlanWrittenLine(o.out, o.hf_config);
  return 0;
}

}  // namespace kiwi::cli
