// `kiwi plan`: kiwi's main job. Plans a model on a cluster within a memory budget and prints the
// candidates as a table. So far it evaluates, with the simulator, the operator-level single-device
// plan and every uniform layer-level plan (DP, SDP, TP, PP and combinations, with and without
// checkpointing), and picks the fastest that fits.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>

#include "kiwi/cli/command.h"
#include "kiwi/cli/common.h"
#include "kiwi/cost/layer_cost.h"
#include "kiwi/io/cluster_json.h"
#include "kiwi/io/file_io.h"
#include "kiwi/io/plan_json.h"
#include "kiwi/models/layer_model.h"
#include "kiwi/report/table.h"
#include "kiwi/sim/layer_simulator.h"
#include "kiwi/solve/hybrid/search.h"
#include "kiwi/solve/hybrid/uniform_plans.h"
#include "kiwi/solve/remat/recompute_frontier.h"
#include "kiwi/util/elapsed.h"
#include "kiwi/util/units.h"

namespace kiwi::cli {
namespace {

struct PlanOptions {
  ModelFlags model;
  std::string cluster = "v100-nvlink-8";
  std::string memory;
  std::string out;
  SearchFlags search;
  CostFlags cost;
  bool json = false;
};

struct Candidate {
  std::string name;
  plan::LayerPlan plan;  // compact: its one strategy (solve::ExpandUniform gives the plan)
  sim::LayerSimResult result;
  bool fits = false;
};

// The experts every layer of `model` has (0 unless all have the same number): what a uniform plan's
// expert parallelism can split.
int64_t UniformExperts(const cost::LayerModel& model) {
  const int64_t experts = model.layers.empty() ? 0 : model.layers.front().experts;
  for (const cost::LayerProfile& p : model.layers)
    if (p.experts != experts) return 0;
  return experts;
}

// Simulates candidates until the time limit; the ones evaluated by then compete.
Result<std::vector<Candidate>> EvaluateUniformPlans(const cost::LayerModel& model, int64_t batch,
                                                    const cost::Cluster& cluster, const cost::CostModel& cm,
                                                    int64_t budget, double time_limit_seconds) {
  const auto deadline = DeadlineAfter(std::chrono::steady_clock::now(), time_limit_seconds);
  std::vector<Candidate> out;
  const auto plans = solve::UniformLayerPlans({.num_layers = static_cast<int>(model.layers.size()),
                                               .num_devices = cluster.NumDevices(),
                                               .global_batch = batch,
                                               .allow_selective_recompute = model.HasAttentionCore(),
                                               .experts = UniformExperts(model),
                                               .context_sequence = model.ContextParallelSequence(),
                                               .recompute_sets = solve::remat::CommonRecomputeSets(
                                                   model.layers, solve::hybrid::HybridSearchOptions::kDefaultRecomputeSets),
                                               .compact = true});
  if (plans.empty())  // every data-parallel degree the devices allow leaves part of a sample on a device
    return BadInput(fmt::format("--batch {}: no uniform plan on the {} devices of {}: the batch must divide by a "
                                "data-parallel degree (devices / (PP x TP), over CP groups where the model's "
                                "attention has a ring); try --batch {}",
                                batch, cluster.NumDevices(), cluster.name, cluster.NumDevices()));
  for (const solve::NamedLayerPlan& p : plans) {
    if (std::chrono::steady_clock::now() > deadline) break;
    const plan::LayerStrategy& s = p.plan.layers.front();
    if (!cost::MakeLayerMesh(cluster, p.plan.pp_degree, s).ok()) continue;  // stages would split nodes
    Result<sim::LayerSimResult> r =
        sim::SimulateLayerPlan(model, solve::ExpandUniform(p.plan, static_cast<int>(model.layers.size())), cluster, cm);
    if (!r) return r.error();
    out.push_back({p.name, p.plan, *r, r->summary.peak_memory_bytes <= budget});  // compact: one strategy
  }
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
    std::string name = c.name;  // a recompute set by its size here ("+RC7"); the JSON names its ops
    if (const size_t rc = name.find("+RC["); rc != std::string::npos)
      name.replace(rc, name.find(']', rc) + 1 - rc, fmt::format("+RC{}", s.recompute.size()));
    t.AddRow({name, std::to_string(c.plan.pp_degree), std::to_string(s.tp), s.SequenceParallel() ? "yes" : "no",
              std::to_string(s.dp),
              std::to_string(static_cast<int>(s.ZeroStage())),
              s.checkpoint ? "yes" : s.SelectiveRecompute() ? "selective" : s.RecomputesSet() ? fmt::format("{} ops", s.recompute.size()) : "no",
              std::to_string(c.plan.micro_batches),
              FormatBytes(c.result.summary.peak_memory_bytes), FormatSeconds(c.result.summary.iteration_seconds),
              fmt::format("{:.1f}", c.result.throughput_samples_per_second), c.fits ? "yes" : "NO"});
  }
  return t.Render();
}

Status WriteBestPlan(const std::string& path, const Candidate& best, int num_layers, const ModelFlags& model,
                     const std::string& cluster) {
  plan::Plan p;
  p.model = model.model;
  p.model_flags = model.flags;
  p.cluster = cluster;
  p.solver = "uniform:" + best.name;
  p.layer = solve::ExpandUniform(best.plan, num_layers);
  p.claims.peak_memory_bytes = best.result.summary.peak_memory_bytes;
  p.claims.iteration_seconds = best.result.summary.iteration_seconds;
  return io::WriteFileAtomically(path, io::WritePlanJson(p));
}

int RunPlan(const PlanOptions& o) {
  Result<models::ModelSpec> spec = o.model.Load();
  if (!spec) return ReportError(spec.error());
  Result<cost::Cluster> cluster = io::LoadCluster(o.cluster);
  if (!cluster) return ReportError(cluster.error());
  int64_t budget = cluster->device.memory_bytes;
  if (!o.memory.empty()) {
    Result<int64_t> parsed = ParseBytes(o.memory, "--memory");
    if (!parsed) return ReportError(parsed.error());
    budget = *parsed;
  }
  Result<cost::CostModel> made = o.cost.Make(*cluster);
  if (!made) return ReportError(made.error());
  const cost::CostModel& cm = *made;
  const int64_t batch = models::SpecBatch(*spec);
  Result<cost::LayerModel> layer_model = models::BuildSpecLayerModel(*spec, cm);
  if (!layer_model) return ReportError(layer_model.error());
  Result<std::vector<Candidate>> cands =
      EvaluateUniformPlans(*layer_model, batch, *cluster, cm, budget, o.search.SecondsLeft());
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
    Status written = WriteBestPlan(o.out, best, static_cast<int>(layer_model->layers.size()), o.model, ClusterReference(o.cluster));
    if (!written) return ReportError(written.error());
  }
  if (o.json) {
    nlohmann::json plans = nlohmann::json::array();
    for (const Candidate& c : *cands) plans.push_back(CandidateJson(c));
    PrintJson({{"model", DescribeModel(*spec)}, {"cluster", cluster->name}, {"memory_budget_bytes", budget},
               {"feasible", true}, {"best", CandidateJson(best)}, {"plans", plans}});
    return 0;
  }
  std::cout << fmt::format("kiwi plan\n  model    {}\n  cluster  {}\n  memory   {} per device\n\n",
                           DescribeModel(*spec), DescribeCluster(*cluster), FormatBytes(budget));
  std::cout << "Uniform layer-level plans (every layer the same strategy), simulated:\n"
            << CandidateTable(*cands) << '\n';
  std::cout << fmt::format("Best plan that fits: {} at {:.1f} samples/s, {} per device.\n", best.name,
                           best.result.throughput_samples_per_second,
                           FormatBytes(best.result.summary.peak_memory_bytes));
  if (!o.out.empty()) std::cout << "Plan written to " << o.out << " (replay it with `kiwi simulate`).\n";
  return 0;
}

}  // namespace

Command AddPlanCommand(CLI::App& root) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* app = root.add_subcommand("plan", "plan a model on a cluster (the default command)");
  o->model.Add(app, "gpt");
  app->add_option("--cluster", o->cluster, ClusterHelp())->capture_default_str();
  app->add_option("--memory", o->memory, "memory budget per device (default: the device's memory)");
  app->add_option("--out", o->out, "write the best plan as plan JSON to this file")->check(OutputFile());
  o->search.Add(app);
  o->cost.Add(app);
  app->add_flag("--json", o->json, "print one JSON object");
  return {app, [o] { return RunPlan(*o); }};
}

}  // namespace kiwi::cli
