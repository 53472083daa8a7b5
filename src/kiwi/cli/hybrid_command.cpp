// `kiwi hybrid --model NAME --cluster NAME --memory SIZE [--batch N|auto] [--method M] --json`
// (CONTRACT.md): the Galvatron-BMW layer-level planner, per-layer DP/SDP/TP/CKPT with pipeline
// parallelism, batch and micro-batch search; or one of the paper's baselines through the same search.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "kiwi/cli/command.h"
#include "kiwi/cli/common.h"
#include "kiwi/cli/galvatron_flags.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/io/cluster_json.h"
#include "kiwi/io/file_io.h"
#include "kiwi/io/galvatron_config.h"
#include "kiwi/io/plan_json.h"
#include "kiwi/models/layer_model.h"
#include "kiwi/report/layer_plan_table.h"
#include "kiwi/solve/hybrid/search.h"
#include "kiwi/solve/registry.h"
#include "kiwi/util/units.h"

namespace kiwi::cli {
namespace {

namespace hybrid = solve::hybrid;

struct HybridOptions {
  ModelFlags model;
  std::string cluster = "rtx-titan-pcie-8";
  std::string memory;
  std::string batch = "auto";
  int64_t max_batch = 512;
  std::string method = "kiwi";
  std::string out;
  std::string hf_config;                        // a HuggingFace config.json instead of --model
  std::string galvatron_out;                    // plan as Galvatron strategy config
  GalvatronFlags galvatron;                     // Galvatron's profiles instead of --model
  SearchFlags search;
  CostFlags cost;
  bool no_accumulation = false;
  bool no_context_parallel = false;
  int recompute_sets = hybrid::HybridSearchOptions::kDefaultRecomputeSets;
  bool no_recompute_sets = false;
  bool offload = true;
  bool quiet = false;
  bool json = false;
};

Result<hybrid::HybridSearchOptions> SearchOptions(const HybridOptions& o, const cost::Cluster& cluster) {
  hybrid::HybridSearchOptions s;
  if (solve::FindSolver(solve::Family::kHybrid, o.method) == nullptr)
    return BadInput(fmt::format("--method: '{}' is not one of {}", o.method,
                                fmt::join(solve::SolverNames(solve::Family::kHybrid), ", ")));
  s.method = *hybrid::ParseMethod(o.method);  // the registry's names are the methods' (registry_test.cpp)
  s.memory_budget_bytes = cluster.device.memory_bytes;
  if (!o.memory.empty()) {
    Result<int64_t> budget = ParseBytes(o.memory, "--memory");
    if (!budget) return budget.error();
    if (*budget < 0) return BadInput(fmt::format("--memory: must not be negative, got '{}'", o.memory));
    s.memory_budget_bytes = *budget;
  }
  Result<std::optional<int64_t>> batch = ParseBatch(o.batch);
  if (!batch) return batch.error();
  s.global_batch = *batch;
  if (o.max_batch < 1) return BadInput(fmt::format("--max-batch: must be positive, got {}", o.max_batch));
  s.max_batch = o.max_batch;
  s.accumulation = !o.no_accumulation;
  s.context_parallel = !o.no_context_parallel;
  s.recompute_sets = o.no_recompute_sets ? 0 : o.recompute_sets;
  s.tp_sequence_parallel = o.galvatron.sequence_parallel;  // Galvatron's run-wide sequence_parallel
  s.offload = o.offload;
  s.time_limit_seconds = o.search.SecondsLeft();
  if (!o.quiet) s.progress = [](const std::string& line) { std::cerr << "kiwi hybrid: " << line << '\n'; };
  return s;
}

nlohmann::json ResultJson(const hybrid::HybridSearchResult& r, const HybridOptions& o, const std::string& model,
                          const std::string& cluster, int64_t budget) {
  nlohmann::json layers = nlohmann::json::array();
  for (const plan::LayerStrategy& s : r.plan.layers) {
    nlohmann::json layer = io::LayerStrategyJson<nlohmann::json>(s, /*contract_sdp=*/true);
    layer["name"] = plan::StrategyName(s);
    layers.push_back(std::move(layer));
  }
  const plan::LayerPlan& p = r.plan;
  return {{"feasible", r.feasible},
          {"method", o.method},
          {"model", model},
          {"cluster", cluster},
          {"memory_budget_bytes", budget},
          {"throughput_samples_per_second", r.simulated.throughput_samples_per_second},
          {"iteration_seconds", r.simulated.summary.iteration_seconds},
          {"global_batch", p.global_batch},
          {"micro_batches", p.micro_batches},
          {"pp_degree", p.pp_degree},
          {"pp_partition", p.pp_partition.empty() ? std::vector<int>{static_cast<int>(p.layers.size())} : p.pp_partition},
          {"pipeline", p.pipeline == plan::PipelineSchedule::kGPipe ? "gpipe" : "1f1b"},
          {"virtual_stages", p.virtual_stages},
          {"layers", std::move(layers)},
          {"peak_memory_bytes", r.simulated.summary.peak_memory_bytes},
          {"optimal", r.proven},
          {"strategies_optimal", r.strategies_proven},
          {"timed_out", r.timed_out},
          {"search_seconds", r.search_seconds},
          {"configurations", r.configurations},
          {"configurations_searched", r.evaluated},
          {"partitions_solved", r.partitions},
          {"dp_runs", r.dp_runs}};
}

std::string ResultText(const hybrid::HybridSearchResult& r, const std::string& model, const cost::Cluster& cluster,
                       int64_t budget) {
  const plan::LayerPlan& p = r.plan;
  std::string out = fmt::format("kiwi hybrid\n  model       {}\n  cluster     {}\n  memory      {} per device\n\n", model,
                                DescribeCluster(cluster), FormatBytes(budget));
  out += fmt::format("  throughput  {:.2f} samples/s ({} per iteration)\n", r.simulated.throughput_samples_per_second,
                     FormatSeconds(r.simulated.summary.iteration_seconds));
  const std::string schedule = p.virtual_stages > 1 ? fmt::format("interleaved 1F1B, {} chunks per stage", p.virtual_stages)
                               : p.pipeline == plan::PipelineSchedule::kGPipe ? "GPipe"
                                                                              : "1F1B-flush";
  out += fmt::format("  batch       {} in {} micro-batches, {} pipeline stage(s) [{}] ({})\n", p.global_batch,
                     p.micro_batches, p.pp_degree, fmt::join(p.pp_partition, ", "), schedule);
  out += fmt::format("  peak memory {} per device (largest stage)\n", FormatBytes(r.simulated.summary.peak_memory_bytes));
  out += fmt::format("  search      {} ({} of {} configurations searched, {} partitions, {}){}\n\n",
                     FormatSeconds(r.search_seconds), r.evaluated, r.configurations, r.partitions,
                     r.proven ? "optimal" : (r.strategies_proven ? "optimal strategies per partition" : "best found"),
                     r.timed_out ? ", time limit reached" : "");
  return out + report::LayerPlanTable(p);
}

Error NoPlan(const hybrid::HybridSearchResult& r, const hybrid::HybridSearchOptions& s, double time_limit) {
  if (r.timed_out)
    return {ErrorCode::kTimeLimit, fmt::format("no plan found within {} per device before the time limit ({} s)",
                                               FormatBytes(s.memory_budget_bytes), time_limit)};
  if (r.smallest_feasible_memory <= 0)
    return Infeasible(fmt::format("the method has no plan on this cluster at any batch up to {}", s.max_batch));
  return Infeasible(fmt::format(
      "nothing fits {} ({} bytes) per device; at batch {} the smallest per-device memory that works is {} ({} bytes): "
      "use --memory {} or more",
      FormatBytes(s.memory_budget_bytes), s.memory_budget_bytes, r.smallest_batch, FormatBytes(r.smallest_feasible_memory),
      r.smallest_feasible_memory, r.smallest_feasible_memory));
}

// What the search runs on: a model-zoo model priced by the cost model, or Galvatron's profiles with
// its measured hardware and its memory reserve for the budget.
Result<LayerProblem> LoadProblem(const HybridOptions& o, cost::Cluster cluster, int64_t memory_budget_bytes) {
  if (o.galvatron.Given()) return o.galvatron.Load(std::move(cluster), memory_budget_bytes);
  Result<models::ModelSpec> spec = o.hf_config.empty() ? o.model.Load() : o.model.LoadHfConfig(o.hf_config, /*with_batch=*/false);  // --batch: the global batch
  if (!spec) return spec.error();
  return SpecLayerProblem(*spec, std::move(cluster), o.cost);
}

// The Galvatron config is made first: a plan it cannot express leaves no file written.
Status WriteOutputs(const HybridOptions& o, const hybrid::HybridSearchResult& r, int64_t memory_budget_bytes) {
  Result<std::string> config = o.galvatron_out.empty() ? std::string() : io::WriteGalvatronConfig(r.plan, o.galvatron.sequence_parallel);
  if (!config)
    return BadInput(fmt::format("--galvatron-out {}: {} (search with --method bmw, Galvatron's own space)",
                                o.galvatron_out, config.error().message));
  const plan::GalvatronSource source = o.galvatron.Source(memory_budget_bytes);
  if (!o.out.empty())
    KIWI_RETURN_IF_ERROR(WriteLayerPlanFile(o.out, o.model, o.hf_config, o.cluster, "hybrid:" + o.method, r.plan,
                                            r.simulated, o.galvatron.Given() ? &source : nullptr));
  if (!o.galvatron_out.empty()) KIWI_RETURN_IF_ERROR(io::WriteFileAtomically(o.galvatron_out, *config));
  return Status::Ok();
}

int RunHybrid(const HybridOptions& o) {
  Result<cost::Cluster> named = io::LoadCluster(o.cluster);
  if (!named) return ReportError(named.error());
  Result<hybrid::HybridSearchOptions> search = SearchOptions(o, *named);
  if (!search) return ReportError(search.error());
  Result<LayerProblem> problem = LoadProblem(o, std::move(*named), search->memory_budget_bytes);
  if (!problem) return ReportError(problem.error());
  Result<cost::CostModel> cm = o.cost.Make(problem->cluster, problem->cost_options, problem->collectives);
  if (!cm) return ReportError(cm.error());
  Result<solve::SolveOutcome> solved =
      solve::RunSolver(*solve::FindSolver(solve::Family::kHybrid, o.method),
                       {.target = solve::HybridTarget{problem->model, problem->cluster, *cm, *search},
                        .time_limit_seconds = std::max(search->time_limit_seconds, 0.0),
                        .progress = search->progress});
  if (!solved) return ReportError(solved.error());
  const hybrid::HybridSearchResult* r = &std::get<hybrid::HybridSearchResult>(solved->result);
  if (!r->feasible) return ReportError(NoPlan(*r, *search, o.search.time_limit_seconds));
  Status written = WriteOutputs(o, *r, search->memory_budget_bytes);
  if (!written) return ReportError(written.error());
  const std::string& described = problem->description;
  const cost::Cluster* cluster = &problem->cluster;
  if (o.json) {
    PrintJson(ResultJson(*r, o, described, cluster->name, search->memory_budget_bytes));
  } else {
    std::cout << ResultText(*r, described, *cluster, search->memory_budget_bytes);
    if (!o.out.empty()) std::cout << PlanWrittenLine(o.out, o.hf_config);
  }
  return 0;
}

}  // namespace

Command AddHybridCommand(CLI::App& root) {
  auto o = std::make_shared<HybridOptions>();
  CLI::App* app = root.add_subcommand(
      "hybrid", "layer-level hybrid parallelism (Galvatron-BMW): per-layer DP/ZeRO-1/2/3/TP/CKPT, pipelines, batch search");
  o->model.Add(app, "bert-huge-32");
  app->remove_option(app->get_option("--batch"));  // here --batch is the global batch of the plan, or auto
  app->add_option("--batch", o->batch, "global batch size, or auto to search it (up to --max-batch)")->capture_default_str();
  app->add_option("--max-batch", o->max_batch, "largest batch the auto search tries")->capture_default_str();
  app->add_flag("--no-accumulation", o->no_accumulation,
                "no gradient accumulation: 1 micro-batch without pipelining, P..4P with P stages (the paper's setting)");
  app->add_flag("--no-context-parallel", o->no_context_parallel,
                "leave context parallelism (ring attention) out of the search: plans for kiwi.torch.distributed, "
                "which does not run it");
  app->add_option("--recompute-sets", o->recompute_sets,
                  "with --method kiwi: recompute sets per layer type the search may give a layer (its ops' Pareto "
                  "frontier of activation bytes against recompute seconds), beside none, selective and CKPT")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  app->add_flag("--no-recompute-sets", o->no_recompute_sets,
                "leave recompute sets out of the search (--recompute-sets 0): plans for kiwi.torch.distributed, which "
                "checkpoints whole layers only");
  app->add_flag("--offload,!--no-offload", o->offload,
                "with --method kiwi (on by default): the search may also offload layers' optimizer states and step to "
                "the host (ZeRO-Offload), on clusters whose device has a host link and host memory bandwidth; "
                "--no-offload leaves it out: plans for kiwi.torch.distributed, which steps on the devices");
  app->add_option("--cluster", o->cluster, ClusterHelp())->capture_default_str();
  app->add_option("--memory", o->memory, "memory budget per device (default: the device's memory)");
  CLI::Option* method =
      app->add_option("--method", o->method,
                      fmt::format("{} (default kiwi; with --galvatron-out bmw, Galvatron's own space, which its "
                                  "configs can express)",
                                  fmt::join(solve::SolverNames(solve::Family::kHybrid), " | ")));
  app->add_option("--out", o->out, "write the plan as plan JSON to this file (replay with kiwi simulate)")->check(OutputFile());
  CLI::Option* model = app->get_option("--model");
  CLI::Option* hf = app->add_option("--hf-config", o->hf_config,
                                    "plan a HuggingFace config.json (gpt2, bert, t5, vit, swin, llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe) "
                                    "instead of --model");
  app->add_option("--galvatron-out", o->galvatron_out, "write the plan as a Galvatron strategy config (JSON)")
      ->check(OutputFile());
  // One source of the model: a preset (--model), a config or Galvatron's profiles; the profiles' own
  // options need the profiles (issue 18: contradictory flags were silently accepted).
  CLI::Option* profiles = o->galvatron.Add(app, model);
  hf->excludes(model)->excludes(profiles);
  o->search.Add(app);
  o->cost.Add(app);
  app->add_flag("--quiet", o->quiet, "no progress lines on stderr");
  app->add_flag("--json", o->json, "print one JSON object");
  return {app, [o, method] {
            if (!o->galvatron_out.empty() && method->count() == 0) o->method = "bmw";
            return RunHybrid(*o);
          }};
}

}  // namespace kiwi::cli
