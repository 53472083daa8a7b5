// `kiwi plan`: kiwi's main job. Plans a model on a cluster within a memory budget at the model's
// global batch: kiwi's per-layer search beside the best plan of each alternative a practitioner would
// pick (Megatron-LM's grid, FSDP, Galvatron-BMW, DeepSpeed 3D, uniform plans), all on one cost model
// and verified by the simulator (solve/hybrid/alternatives.h); prints the fastest that fits and why it
// wins over the next best.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <tuple>
#include <variant>

#include <unistd.h>

#include "kiwi/cli/command.h"
#include "kiwi/cli/common.h"
#include "kiwi/cli/plan_uniform.h"
#include "kiwi/cost/throughput.h"
#include "kiwi/io/cluster_json.h"
#include "kiwi/io/file_io.h"
#include "kiwi/io/graph_json.h"
#include "kiwi/io/megatron_args.h"
#include "kiwi/io/torchtitan_config.h"
#include "kiwi/io/plan_json.h"
#include "kiwi/models/layer_model.h"
#include "kiwi/report/layer_plan_table.h"
#include "kiwi/report/plan_breakdown.h"
#include "kiwi/report/plan_report.h"
#include "kiwi/report/sim_report.h"
#include "kiwi/report/table.h"
#include "kiwi/sim/layer_simulator.h"
#include "kiwi/sim/pipeline_timeline.h"
#include "kiwi/solve/hybrid/alternatives.h"
#include "kiwi/solve/hybrid/search.h"
#include "kiwi/solve/layer_refinement.h"
#include "kiwi/util/units.h"

namespace kiwi::cli {
namespace {

namespace hybrid = solve::hybrid;

struct PlanOptions {
  ModelFlags model;
  std::string hf_config;
  std::string batch;        // --batch N|auto; empty: the model's
  int64_t max_batch = 512;  // with --batch auto
  std::string cluster = "v100-nvlink-8";
  std::string memory;
  std::string out;
  std::string report;
  SearchFlags search;
  CostFlags cost;
  bool json = false;
  bool quiet = false;
  bool progress = false;
  bool uniform = false;
  bool refine = true;           // operator-level refinement of the best plan's strategies (KIWI)
  double refine_seconds = 10.0;
  std::string refine_out;       // a directory for each refined layer's graph and KIWI's plan of it
  std::string compare_to;       // the user's Megatron-LM arguments or torchtitan TOML, simulated beside the planners
  std::string megatron_out;     // Megatron-LM arguments of the fastest plan Megatron-LM can run
  std::string torchtitan_out;   // torchtitan's job config of the fastest plan torchtitan can run
};

// Tokens per sample (a transformer's sequence; 1 for an MLP) and the dtype it computes in.
struct ModelUnits {
  int64_t tokens_per_sample = 1;
  ir::DType dtype = ir::DType::kF32;
};
ModelUnits UnitsOf(const models::ModelSpec& spec) {
  return std::visit(
      [](const auto& c) {
        if constexpr (requires { c.seq; }) return ModelUnits{c.seq, c.dtype};
        else return ModelUnits{1, c.dtype};
      },
      spec.config);
}

std::string ScheduleOf(const plan::LayerPlan& p) {
  const std::string stages = fmt::format("{} pipeline stage{} [{}]", p.pp_degree, p.pp_degree == 1 ? "" : "s",
                                         p.pp_partition.empty() ? std::to_string(p.layers.size())
                                                                : fmt::format("{}", fmt::join(p.pp_partition, ", ")));
  const std::string schedule = p.virtual_stages > 1 ? fmt::format("interleaved 1F1B, {} chunks per stage", p.virtual_stages)
                               : p.pipeline == plan::PipelineSchedule::kGPipe ? "GPipe"
                                                                              : "1F1B";
  return fmt::format("{}, {} micro-batch{} ({})", stages, p.micro_batches, p.micro_batches == 1 ? "" : "es", schedule);
}

std::string Percent(double fraction) { return fraction > 0.0 ? fmt::format("{:.1f}%", 100.0 * fraction) : "n/a"; }

const std::vector<std::string> kCandidateHeader = {"planner", "samples/s", "tokens/s/GPU", "MFU", "iteration",
                                                   "peak memory", "vs best", "search"};

std::vector<std::vector<std::string>> CandidateRows(const hybrid::PlanAllResult& r,
                                                    const std::vector<cost::TrainingThroughput>& units) {
  std::vector<std::vector<std::string>> rows;
  const double best = r.candidates[static_cast<size_t>(r.best)].simulated.throughput_samples_per_second;
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const hybrid::PlanCandidate& c = r.candidates[i];
    const std::string search = fmt::format("{}{}", FormatSeconds(c.seconds),
                                           c.proven ? ", optimal" : c.timed_out ? ", time limit" : "");
    if (!c.found) {
      rows.push_back({c.name, "-", "-", "-", "-",
                      c.none_faster                ? "none faster"
                      : c.smallest_peak_bytes > 0 ? fmt::format("needs {}", FormatBytes(c.smallest_peak_bytes))
                      : c.plans_evaluated == 0  ? "no plan at this batch"
                                                : "none fits",
                      "-", search});
      continue;
    }
    const cost::TrainingThroughput& u = units[i];
    rows.push_back({c.name + (static_cast<int>(i) == r.best ? " *" : ""), fmt::format("{:.1f}", u.samples_per_second),
                    fmt::format("{:.0f}", u.tokens_per_second_per_device), Percent(u.mfu),
                    FormatSeconds(c.simulated.summary.iteration_seconds), FormatBytes(c.simulated.summary.peak_memory_bytes),
                    fmt::format("{:.2f}x", c.simulated.throughput_samples_per_second / best), search});
  }
  return rows;
}

std::string CandidateTable(const hybrid::PlanAllResult& r, const std::vector<cost::TrainingThroughput>& units) {
  report::Table t(kCandidateHeader);
  for (std::vector<std::string>& row : CandidateRows(r, units)) t.AddRow(std::move(row));
  return t.Render();
}

// The fastest candidate that fits other than the best (-1: none).
int RunnerUp(const hybrid::PlanAllResult& r) {
  int second = -1;
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const hybrid::PlanCandidate& c = r.candidates[i];
    if (!c.found || static_cast<int>(i) == r.best) continue;
    if (second < 0 ||
        c.simulated.throughput_samples_per_second > r.candidates[static_cast<size_t>(second)].simulated.throughput_samples_per_second)
      second = static_cast<int>(i);
  }
  return second;
}

nlohmann::json LayerRunsJson(const plan::LayerPlan& p) {
  nlohmann::json runs = nlohmann::json::array();
  for (const plan::LayerRun& run : plan::LayerRuns(p)) {
    const plan::LayerStrategy& s = p.layers[static_cast<size_t>(run.first)];
    nlohmann::json j = io::LayerStrategyJson<nlohmann::json>(s, /*contract_sdp=*/true);
    j.update({{"first_layer", run.first}, {"last_layer", run.last}, {"stage", run.stage}, {"name", plan::StrategyName(s)}});
    runs.push_back(std::move(j));
  }
  return runs;
}

nlohmann::json BreakdownJson(const report::PlanBreakdown& b) {
  const sim::TimeBreakdown& t = b.simulated.summary.time;
  return {{"time_seconds",
           {{"compute", t.compute}, {"recompute", t.recompute}, {"communication", t.communication},
            {"resharding", t.resharding}, {"pipeline_bubble", b.simulated.pipeline_bubble_seconds},
            {"iteration", b.simulated.summary.iteration_seconds}}},
          {"communication_seconds", report::ToJson(b.simulated.communication)},
          {"sent_bytes",
           {{"tensor_parallel", b.traffic.tensor_parallel}, {"data_parallel", b.traffic.data_parallel},
            {"expert_parallel", b.traffic.expert_parallel}, {"context_parallel", b.traffic.context_parallel},
            {"pipeline", b.traffic.pipeline}, {"resharding", b.traffic.resharding}}},
          {"memory_bytes", report::ToJson(b.LargestStage().memory, b.LargestStage().peak_memory_bytes)}};
}

nlohmann::json CandidateJson(const hybrid::PlanCandidate& c, const cost::TrainingThroughput& u) {
  nlohmann::json j = {{"name", c.name}, {"space", c.space}, {"fits", c.found}, {"optimal", c.proven},
                      {"timed_out", c.timed_out}, {"none_faster", c.none_faster}, {"plans_evaluated", c.plans_evaluated}, {"search_seconds", c.seconds}};
  if (!c.found) {
    j["smallest_peak_bytes"] = c.smallest_peak_bytes;
    return j;
  }
  const plan::LayerPlan& p = c.plan;
  j.update({{"throughput_samples_per_second", c.simulated.throughput_samples_per_second},
            {"tokens_per_second_per_device", u.tokens_per_second_per_device},
            {"mfu", u.mfu},
            {"iteration_seconds", c.simulated.summary.iteration_seconds},
            {"peak_memory_bytes", c.simulated.summary.peak_memory_bytes},
            {"pp_degree", p.pp_degree},
            {"pp_partition", p.pp_partition.empty() ? std::vector<int>{static_cast<int>(p.layers.size())} : p.pp_partition},
            {"micro_batches", p.micro_batches},
            {"virtual_stages", p.virtual_stages},
            {"pipeline", p.pipeline == plan::PipelineSchedule::kGPipe ? "gpipe" : "1f1b"},
            {"layers", LayerRunsJson(p)}});
  return j;
}

// Operator-level refinement (solve/layer_refinement.h): one row per strategy of the best plan.
const std::vector<std::string> kRefinementHeader = {"layers", "strategy", "devices", "micro-batch", "ops",
                                                    "as planned", "KIWI within its memory", "speedup"};

// The devices of one data-parallel replica: "CP2xTP4", "TP8", "1 device".
std::string GroupOf(const plan::LayerStrategy& s) {
  if (s.cp > 1) return s.tp > 1 ? fmt::format("CP{}xTP{}", s.cp, s.tp) : fmt::format("CP{}", s.cp);
  return s.tp > 1 ? fmt::format("TP{}", s.tp) : "1 device";
}

std::vector<std::vector<std::string>> RefinementRows(const std::vector<solve::LayerRefinement>& refinements) {
  std::vector<std::vector<std::string>> rows;
  for (const solve::LayerRefinement& r : refinements) {
    std::vector<std::string> row = {r.layers == 1 ? fmt::format("{}", r.first_layer)
                                                  : fmt::format("{} (+{} alike)", r.first_layer, r.layers - 1),
                                    plan::ShortStrategyName(r.strategy), GroupOf(r.strategy)};
    if (!r.skipped.empty()) {
      row.insert(row.end(), {"-", "-", "not refined: " + r.skipped, "-", "-"});
    } else {
      const auto cell = [](const solve::joint::JointResult& j) {
        return fmt::format("{}, {}, {} recomputed", FormatSeconds(j.seconds()), FormatBytes(j.sim.peak_memory_bytes),
                           j.sim.recomputations);
      };
      row.insert(row.end(), {std::to_string(r.micro_batch), std::to_string(r.graph.size()), cell(r.baseline), cell(r.refined),
                             fmt::format("{:.2f}x", r.Speedup())});
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// One line under the table: what operator-level decisions add, or that they add nothing.
std::string RefinementVerdict(const std::vector<solve::LayerRefinement>& refinements) {
  const solve::LayerRefinement* most = nullptr;
  for (const solve::LayerRefinement& r : refinements)
    if (r.skipped.empty() && (most == nullptr || r.Speedup() > most->Speedup())) most = &r;
  if (most == nullptr) return "No layer was refined.\n";
  if (most->Speedup() < 1.0005)
    return "Every refined layer is already the fastest operator plan KIWI finds within its memory: operator-level "
           "decisions add nothing here.\n";
  return fmt::format("KIWI's operator plan of layer {} is {:.2f}x faster within the same memory ({} recomputed, "
                     "sharding decided per operator; --refine-out writes it). The step times above are the layer "
                     "model's and do not include it.\n",
                     most->first_layer, most->Speedup(), most->refined.sim.recomputations);
}

nlohmann::json RefinementJson(const std::vector<solve::LayerRefinement>& refinements) {
  nlohmann::json out = nlohmann::json::array();
  for (const solve::LayerRefinement& r : refinements) {
    nlohmann::json j = {{"first_layer", r.first_layer}, {"layers", r.layers}, {"strategy", plan::StrategyName(r.strategy)},
                        {"mesh_shape", r.mesh_shape}, {"refined", r.skipped.empty()}};
    if (!r.skipped.empty()) {
      j["skipped"] = r.skipped;
    } else {
      const auto side = [](const solve::joint::JointResult& x) {
        return nlohmann::json{{"method", x.method}, {"seconds", x.seconds()}, {"peak_memory_bytes", x.sim.peak_memory_bytes},
                              {"recomputations", x.sim.recomputations}, {"optimal", x.optimal}};
      };
      j.update({{"micro_batch", r.micro_batch}, {"ops", r.graph.size()}, {"baseline", side(r.baseline)},
                {"kiwi", side(r.refined)}, {"speedup", r.Speedup()}});
    }
    out.push_back(std::move(j));
  }
  return out;
}

// --megatron-out, --torchtitan-out: the fastest plan that fits and the framework can express (the
// Megatron-LM grid's always can be Megatron-LM's arguments), written in its format; `why_not_best` says
// why the best could not be, when it could not.
struct FrameworkExport {
  std::string flag;  // "--megatron-out"
  std::string path;
  int candidate = -1;
  std::string why_not_best;
};
Result<FrameworkExport> WriteFrameworkOut(const std::string& flag, const std::string& path,
                                          Result<std::string> (*write)(const plan::LayerPlan&),
                                          const hybrid::PlanAllResult& r) {
  std::vector<int> order;
  for (size_t i = 0; i < r.candidates.size(); ++i)
    if (r.candidates[i].found) order.push_back(static_cast<int>(i));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return r.candidates[static_cast<size_t>(a)].simulated.throughput_samples_per_second >
           r.candidates[static_cast<size_t>(b)].simulated.throughput_samples_per_second;
  });
  FrameworkExport out{flag, path, -1, ""};
  for (int i : order) {
    Result<std::string> args = write(r.candidates[static_cast<size_t>(i)].plan);
    if (!args) {
      if (out.why_not_best.empty()) out.why_not_best = args.error().message;
      continue;
    }
    KIWI_RETURN_IF_ERROR(io::WriteFileAtomically(path, *args));
    out.candidate = i;
    return out;
  }
  return BadInput(fmt::format("{}: no plan that fits can be written ({})", flag, out.why_not_best));
}

nlohmann::json ExportsJson(const std::vector<FrameworkExport>& exports, const hybrid::PlanAllResult& r) {
  nlohmann::json out = nlohmann::json::array();
  for (const FrameworkExport& e : exports)
    out.push_back({{"flag", e.flag}, {"file", e.path}, {"planner", r.candidates[static_cast<size_t>(e.candidate)].name},
                   {"best_not_expressible", e.why_not_best}});
  return out;
}

// --refine-out DIR, made before any search (a place it cannot be is bad input, refused at once).
Status MakeRefineOut(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec))
    return BadInput(fmt::format("--refine-out: cannot make directory '{}'{}", dir, ec ? ": " + ec.message() : ""));
  return Status::Ok();
}

// --refine-out DIR: per refined strategy, its layer's graph and KIWI's operator plan of it (which `kiwi
// simulate PLAN GRAPH` replays to the numbers shown), written atomically.
Status WriteRefinements(const std::string& dir, const std::string& cluster,
                        const std::vector<solve::LayerRefinement>& refinements) {
  for (const solve::LayerRefinement& r : refinements) {
    if (!r.skipped.empty()) continue;
    const std::string stem = (std::filesystem::path(dir) / fmt::format("layer{}", r.first_layer)).string();
    KIWI_RETURN_IF_ERROR(io::WriteFileAtomically(stem + ".graph.json", io::WriteGraphJson(r.graph)));
    plan::Plan p;
    p.graph = fmt::format("layer{}.graph.json", r.first_layer);
    p.cluster = ClusterReference(cluster);
    p.solver = "joint:" + r.refined.method;
    p.op = r.refined.plan;
    p.claims.peak_memory_bytes = r.refined.sim.peak_memory_bytes;
    p.claims.iteration_seconds = r.refined.sim.iteration_seconds;
    KIWI_RETURN_IF_ERROR(io::WriteFileAtomically(stem + ".plan.json", OperatorPlanJson(p, r.graph)));
  }
  return Status::Ok();
}

Result<report::PlanBreakdown> BreakdownOf(const hybrid::PlanCandidate& c, const cost::LayerModel& model,
                                          const cost::Cluster& cluster) {
  Result<sim::PlanTraffic> traffic = sim::LayerPlanTraffic(model, c.plan, cluster);
  if (!traffic) return traffic.error();
  return report::PlanBreakdown{c.name, c.simulated, report::SumTraffic(*traffic)};
}

// The report's throughput-memory curve: every planner at budgets from the smallest peak of the plans
// found up to the budget (kCurvePoints, evenly on a log scale), in what --time-limit leaves.
constexpr int kCurvePoints = 8;
Result<report::LinePlot> ThroughputCurve(const cost::LayerModel& model, const cost::Cluster& cluster,
                                         const cost::CostModel& cm, const hybrid::PlanAllResult& at_budget, int64_t budget,
                                         int64_t batch, const SearchFlags& search) {
  int64_t lowest = budget;
  for (const hybrid::PlanCandidate& c : at_budget.candidates)
    if (c.found) lowest = std::min(lowest, c.simulated.summary.peak_memory_bytes);
  report::LinePlot plot;
  plot.title = "each planner's fastest plan within a budget";
  plot.x_label = "memory budget per device (GiB)";
  plot.y_label = "samples/s";
  plot.log_x = true;
  plot.width = 900;
  plot.height = 420;
  // kiwi plan's answer (the best of all) solid, each planner's dashed
  plot.series.push_back({"kiwi plan (the best)", {}, {}, "#d62728", false});
  for (const hybrid::PlanCandidate& c : at_budget.candidates) plot.series.push_back({c.name, {}, {}, "", true});
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  for (int k = 0; k < kCurvePoints; ++k) {
    const double fraction = static_cast<double>(k) / (kCurvePoints - 1);
    const int64_t point = k + 1 == kCurvePoints ? budget
                                                : static_cast<int64_t>(static_cast<double>(lowest) *
                                                                       std::pow(static_cast<double>(budget) / static_cast<double>(lowest), fraction));
    hybrid::PlanAllResult here;
    if (point == budget) {
      here = at_budget;
    } else {
      Result<hybrid::PlanAllResult> r = hybrid::PlanAll(
          model, cluster, cm,
          {.memory_budget_bytes = point, .global_batch = batch, .time_limit_seconds = search.SecondsLeft() / (kCurvePoints - k)});
      if (!r) return r.error();
      here = *std::move(r);
    }
    const auto add = [&](report::Series& series, const hybrid::PlanCandidate* c) {
      series.x.push_back(static_cast<double>(point) / kGiB);
      series.y.push_back(c != nullptr && c->found ? c->simulated.throughput_samples_per_second
                                                  : std::numeric_limits<double>::quiet_NaN());
    };
    add(plot.series.front(), here.best >= 0 ? &here.candidates[static_cast<size_t>(here.best)] : nullptr);
    for (size_t i = 0; i < here.candidates.size() && i + 1 < plot.series.size(); ++i)
      add(plot.series[i + 1], &here.candidates[i]);
  }
  return plot;
}

Status WriteReport(const PlanOptions& o, const models::ModelSpec& spec, const cost::Cluster& cluster,
                   const cost::CostModel& cm, const cost::LayerModel& model, const hybrid::PlanAllResult& r,
                   const std::vector<cost::TrainingThroughput>& units, const std::vector<report::PlanBreakdown>& breakdowns,
                   const std::vector<solve::LayerRefinement>& refinements, int64_t budget, int64_t batch) {
  const hybrid::PlanCandidate& best = r.candidates[static_cast<size_t>(r.best)];
  Result<sim::PipelineTimeline> timeline = sim::ReplayPipeline(best.plan, best.simulated);
  if (!timeline) return timeline.error();
  Result<report::LinePlot> curve = ThroughputCurve(model, cluster, cm, r, budget, batch, o.search);
  if (!curve) return curve.error();
  const cost::TrainingThroughput& u = units[static_cast<size_t>(r.best)];
  report::PlanReport page;
  page.title = fmt::format("kiwi plan: {} on {}", spec.name, cluster.name);
  page.facts = {{"model", DescribeModel(spec)},
                {"cluster", DescribeCluster(cluster)},
                {"memory", FormatBytes(budget) + " per device"},
                {"batch", fmt::format("{} samples per iteration", batch)},
                {"schedule", ScheduleOf(best.plan)}};
  page.verdict = fmt::format("Best plan, found by {}: {:.1f} samples/s, {:.0f} tokens/s per GPU, MFU {}, {} per iteration, {} per device",
                             best.name, u.samples_per_second, u.tokens_per_second_per_device, Percent(u.mfu),
                             FormatSeconds(best.simulated.summary.iteration_seconds),
                             FormatBytes(best.simulated.summary.peak_memory_bytes));
  page.best_plan = best.plan;
  page.best = best.simulated;
  page.timeline = *std::move(timeline);
  page.budget_bytes = budget;
  page.planners = {kCandidateHeader, CandidateRows(r, units)};
  page.breakdowns = breakdowns;
  page.throughput_curve = *std::move(curve);
  if (!refinements.empty()) page.refinement = {kRefinementHeader, RefinementRows(refinements)};
  return io::WriteFileAtomically(o.report, report::RenderPlanReport(page));
}

// --batch auto: the global batch at which kiwi's per-layer search, sweeping it (kiwi hybrid --batch
// auto), is fastest within the budget; in half of what --time-limit leaves.
Result<int64_t> AutoBatch(const cost::LayerModel& model, const cost::Cluster& cluster, const cost::CostModel& cm,
                          int64_t budget, const PlanOptions& o) {
  hybrid::HybridSearchOptions s;
  s.memory_budget_bytes = budget;
  s.max_batch = o.max_batch;
  s.time_limit_seconds = o.search.SecondsLeft() / 2;
  Result<hybrid::HybridSearchResult> r = hybrid::SearchHybridPlan(model, cluster, cm, s);
  if (!r) return r.error();
  if (!r->feasible) {
    if (r->smallest_feasible_memory > 0)
      return Infeasible(fmt::format("--batch auto: no plan fits {} per device at any batch up to {}; at batch {} the smallest "
                                    "budget known to work is {} ({} bytes)",
                                    FormatBytes(budget), o.max_batch, r->smallest_batch,
                                    FormatBytes(r->smallest_feasible_memory), r->smallest_feasible_memory));
    return Error{ErrorCode::kTimeLimit, "--batch auto: no plan found before the time limit; raise --time-limit"};
  }
  return r->plan.global_batch;
}

int RunPlan(const PlanOptions& options) {
  PlanOptions o = options;
  Result<std::optional<int64_t>> given_batch = o.batch.empty() ? std::optional<int64_t>{} : ParseBatch(o.batch);
  if (!given_batch) return ReportError(given_batch.error());
  const bool auto_batch = o.batch == "auto";
  if (*given_batch) o.model.flags.batch = **given_batch;
  if (!o.compare_to.empty() && (o.batch == "auto" || o.uniform))
    return ReportError(BadInput(fmt::format("--compare-to: plans at the configuration's batch; not with {}",
                                            o.uniform ? "--uniform" : "--batch auto")));
  if (!o.refine && !o.refine_out.empty())
    return ReportError(BadInput("--refine-out: writes the refinement, which --no-refine turns off"));
  if (!o.refine_out.empty()) {
    Status made = MakeRefineOut(o.refine_out);
    if (!made) return ReportError(made.error());
  }
  if (o.max_batch < 1) return ReportError(BadInput(fmt::format("--max-batch: must be positive, got {}", o.max_batch)));
  Result<models::ModelSpec> spec = o.hf_config.empty() ? o.model.Load() : o.model.LoadHfConfig(o.hf_config, /*with_batch=*/true);
  if (!spec) return ReportError(spec.error());
  Result<cost::Cluster> cluster = io::LoadCluster(o.cluster);
  if (!cluster) return ReportError(cluster.error());
  int64_t budget = cluster->device.memory_bytes;
  if (!o.memory.empty()) {
    Result<int64_t> parsed = ParseBytes(o.memory, "--memory");
    if (!parsed) return ReportError(parsed.error());
    if (*parsed <= 0) return ReportError(BadInput(fmt::format("--memory: must be positive, got '{}'", o.memory)));
    budget = *parsed;
  }
  Result<cost::CostModel> made = o.cost.Make(*cluster);
  if (!made) return ReportError(made.error());
  const cost::CostModel& cm = *made;
  int64_t batch = models::SpecBatch(*spec);
  // Progress lines on a terminal (or with --progress); scripts reading stderr get only an error's line.
  const bool show_progress = !o.quiet && (o.progress || isatty(STDERR_FILENO) != 0);
  const auto progress = [&](const std::string& line) {
    if (show_progress) std::cerr << "kiwi plan: " << line << '\n';
  };
  progress(fmt::format("building {}", DescribeModel(*spec)));
  Result<cost::LayerModel> layer_model = models::BuildSpecLayerModel(*spec, cm);
  if (!layer_model) return ReportError(layer_model.error());
  std::optional<plan::LayerPlan> yours;
  if (!o.compare_to.empty()) {
    const int layers = static_cast<int>(layer_model->layers.size());
    Result<plan::LayerPlan> read = ReadFrameworkConfig(o.compare_to, cluster->NumDevices(), layers);
    if (!read) return ReportError(read.error());
    if (*given_batch && **given_batch != read->global_batch)
      return ReportError(BadInput(fmt::format("--compare-to: {} has a global batch of {}, not --batch {}",
                                              o.compare_to, read->global_batch, **given_batch)));
    batch = read->global_batch;  // how good is this configuration, and what would kiwi do at its batch
    yours = *std::move(read);
  }
  if (o.uniform)
    return RunUniformPlans({.model = o.model, .hf_config = o.hf_config, .spec = *spec, .cluster = *cluster,
                            .cluster_flag = o.cluster, .cost_model = cm,
                            .layer_model = *layer_model, .budget = budget, .seconds = o.search.SecondsLeft(),
                            .out = o.out, .json = o.json});
  if (auto_batch) {
    progress(fmt::format("--batch auto: kiwi's search sweeping the batch up to {}", o.max_batch));
    Result<int64_t> picked = AutoBatch(*layer_model, *cluster, cm, budget, o);
    if (!picked) return ReportError(picked.error());
    batch = *picked;
    progress(fmt::format("--batch auto: batch {}", batch));
  }
  Result<hybrid::PlanAllResult> r =
      hybrid::PlanAll(*layer_model, *cluster, cm,
                      {.memory_budget_bytes = budget, .global_batch = batch, .time_limit_seconds = o.search.SecondsLeft(),
                       .progress = progress, .compare_to = yours ? &*yours : nullptr,
                       .compare_name = "yours (" + std::filesystem::path(o.compare_to).filename().string() + ")"});
  if (!r) return ReportError(r.error());
  if (r->best < 0) {
    int64_t smallest = 0;
    for (const hybrid::PlanCandidate& c : r->candidates)
      if (c.smallest_peak_bytes > 0 && (smallest == 0 || c.smallest_peak_bytes < smallest)) smallest = c.smallest_peak_bytes;
    if (smallest == 0)
      return ReportError({ErrorCode::kTimeLimit, "the time limit expired before any plan was found; raise --time-limit"});
    return ReportError(Infeasible(fmt::format(
        "no plan fits {} per device at batch {}; the smallest budget known to work is {} ({} bytes): use --memory {} or more",
        FormatBytes(budget), batch, FormatBytes(smallest), smallest, smallest)));
  }
  const ModelUnits units = UnitsOf(*spec);
  std::vector<cost::TrainingThroughput> throughput;
  for (const hybrid::PlanCandidate& c : r->candidates)
    throughput.push_back(cost::ThroughputOf(*layer_model, batch, units.tokens_per_sample,
                                            c.found ? c.simulated.summary.iteration_seconds : 0.0, *cluster, units.dtype));
  const hybrid::PlanCandidate& best = r->candidates[static_cast<size_t>(r->best)];
  std::vector<report::PlanBreakdown> breakdowns;
  for (int i : {r->best, RunnerUp(*r)}) {
    if (i < 0) continue;
    Result<report::PlanBreakdown> b = BreakdownOf(r->candidates[static_cast<size_t>(i)], *layer_model, *cluster);
    if (!b) return ReportError(b.error());
    breakdowns.push_back(*std::move(b));
  }
  std::vector<solve::LayerRefinement> refinements;
  if (o.refine) {
    progress("operator-level refinement (KIWI) of one layer per strategy of the best plan");
    Result<std::vector<solve::LayerRefinement>> refined = solve::RefineLayerPlan(
        *spec, best.plan, *cluster, cm,
        {.time_limit_seconds = std::min(o.refine_seconds, o.search.SecondsLeft()), .threads = o.search.threads,
         .progress = [&](const std::string& line) { progress("refine: " + line); }});
    if (!refined) return ReportError(refined.error());
    refinements = *std::move(refined);
    if (!o.refine_out.empty()) {
      Status written = WriteRefinements(o.refine_out, o.cluster, refinements);
      if (!written) return ReportError(written.error());
    }
  }
  if (!o.out.empty()) {
    Status written = WriteLayerPlanFile(o.out, o.model, o.hf_config, o.cluster, "plan:" + best.name, best.plan, best.simulated);
    if (!written) return ReportError(written.error());
  }
  std::vector<FrameworkExport> exports;
  for (const auto& [flag, path, write] :
       {std::tuple{"--megatron-out", o.megatron_out, &io::WriteMegatronArgs},
        std::tuple{"--torchtitan-out", o.torchtitan_out, &io::WriteTorchtitanConfig}}) {
    if (path.empty()) continue;
    Result<FrameworkExport> written = WriteFrameworkOut(flag, path, write, *r);
    if (!written) return ReportError(written.error());
    exports.push_back(*std::move(written));
  }
  if (!o.report.empty()) {
    progress(fmt::format("report: every planner at {} budgets", kCurvePoints));
    Status written = WriteReport(o, *spec, *cluster, cm, *layer_model, *r, throughput, breakdowns, refinements, budget, batch);
    if (!written) return ReportError(written.error());
  }
  if (o.json) {
    nlohmann::json candidates = nlohmann::json::array(), explained = nlohmann::json::array();
    for (size_t i = 0; i < r->candidates.size(); ++i) candidates.push_back(CandidateJson(r->candidates[i], throughput[i]));
    for (const report::PlanBreakdown& b : breakdowns) explained.push_back({{"name", b.name}, {"breakdown", BreakdownJson(b)}});
    PrintJson({{"model", DescribeModel(*spec)}, {"cluster", cluster->name}, {"memory_budget_bytes", budget},
               {"global_batch", batch}, {"feasible", true}, {"best", CandidateJson(best, throughput[static_cast<size_t>(r->best)])},
               {"candidates", candidates}, {"explained", explained},
               {"refinement", o.refine ? RefinementJson(refinements) : nlohmann::json(nullptr)},
               {"exports", ExportsJson(exports, *r)}});
    return 0;
  }
  const cost::TrainingThroughput& u = throughput[static_cast<size_t>(r->best)];
  std::cout << fmt::format("kiwi plan\n  model    {}\n  cluster  {}\n  memory   {} per device\n  batch    {} samples per "
                           "iteration ({})\n\n",
                           DescribeModel(*spec), DescribeCluster(*cluster), FormatBytes(budget), batch,
                           auto_batch ? fmt::format("--batch auto: kiwi's search is fastest there, up to --max-batch {}", o.max_batch)
                                      : "the model's; --batch changes it, --batch auto searches it");
  std::cout << fmt::format("Best plan, found by {}{}:\n  {:.1f} samples/s, {:.0f} tokens/s per GPU, MFU {}: {} per iteration, {} per "
                           "device\n  {}\n",
                           best.name, best.proven ? " (optimal in its space)" : "", u.samples_per_second,
                           u.tokens_per_second_per_device, Percent(u.mfu), FormatSeconds(best.simulated.summary.iteration_seconds),
                           FormatBytes(best.simulated.summary.peak_memory_bytes), ScheduleOf(best.plan));
  std::cout << report::LayerPlanTable(best.plan) << '\n';
  std::cout << "Each planner's fastest plan that fits, on the same cost model (* the best):\n"
            << CandidateTable(*r, throughput) << '\n';
  if (breakdowns.size() == 2)
    std::cout << fmt::format("Why: {} beside {}, the next best:\n", breakdowns[0].name, breakdowns[1].name);
  std::cout << report::BreakdownTable(breakdowns);
  if (o.refine) {
    report::Table t(kRefinementHeader);
    for (std::vector<std::string>& row : RefinementRows(refinements)) t.AddRow(std::move(row));
    std::cout << "\nOperator-level refinement (KIWI): one layer of each strategy on the devices of one data-parallel "
                 "replica, priced by the operator-level simulator\n"
              << t.Render() << RefinementVerdict(refinements);
  }
  if (!o.out.empty()) std::cout << "\n" << PlanWrittenLine(o.out, o.hf_config);
  if (!o.report.empty()) std::cout << "Report written to " << o.report << ".\n";
  for (const FrameworkExport& e : exports)
    std::cout << fmt::format("{}: {}'s plan written to {}{}.\n", e.flag,
                             r->candidates[static_cast<size_t>(e.candidate)].name, e.path,
                             e.why_not_best.empty() ? "" : fmt::format(" (the best plan cannot be: {})", e.why_not_best));
  return 0;
}

}  // namespace

Command AddPlanCommand(CLI::App& root) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* app = root.add_subcommand("plan", "plan a model on a cluster (the default command)");
  o->model.Add(app, "gpt");
  app->remove_option(app->get_option("--batch"));  // the global batch, kept, or auto: searched
  app->add_option("--batch", o->batch,
                  "global batch size (default: the model's), kept: only micro-batches are searched; auto: the batch at "
                  "which kiwi's per-layer search is fastest, up to --max-batch");
  app->add_option("--max-batch", o->max_batch, "with --batch auto: the largest batch tried")->capture_default_str();
  app->add_option("--hf-config", o->hf_config,
                  "plan a HuggingFace config.json (gpt2, bert, t5, vit, swin, llama, mistral, mixtral, qwen2, qwen2_moe, "
                  "qwen3, qwen3_moe) instead of --model; --batch, --seq, --dtype still apply")
      ->excludes(app->get_option("--model"));
  app->add_option("--cluster", o->cluster, ClusterHelp())->capture_default_str();
  app->add_option("--memory", o->memory, "memory budget per device (default: the device's memory)");
  app->add_option("--out", o->out, "write the best plan as plan JSON to this file")->check(OutputFile());
  app->add_option("--report", o->report,
                  "write an HTML page (one file, no external resources) with the plans, why the best wins, its "
                  "pipeline timeline, memory per stage, layers' strategies and throughput against the budget")
      ->check(OutputFile());
  o->search.Add(app);
  o->cost.Add(app);
  app->add_flag("--json", o->json, "print one JSON object");
  app->add_flag("--quiet", o->quiet, "no progress lines on stderr");
  app->add_flag("--progress", o->progress, "progress lines on stderr even when it is not a terminal");
  app->add_option("--compare-to", o->compare_to,
                  "your configuration: a torchtitan job config (.toml) or Megatron-LM arguments (a launch script or "
                  "the flags); its parallelism, batch and checkpointing are simulated beside the planners, at its "
                  "global batch, and beaten if kiwi can")
      ->check(CLI::ExistingFile);
  app->add_option("--torchtitan-out", o->torchtitan_out,
                  "write the fastest plan torchtitan can run as its job config's [training], [parallelism] and "
                  "[activation_checkpoint] sections (TOML)")
      ->check(OutputFile());
  app->add_option("--megatron-out", o->megatron_out,
                  "write the fastest plan Megatron-LM can run as its arguments (the best plan, unless it mixes "
                  "strategies per layer or uses what Megatron-LM lacks)")
      ->check(OutputFile());
  app->add_flag("--refine,!--no-refine", o->refine,
                "operator-level refinement (the default; --no-refine skips it): KIWI's joint sharding + recomputation "
                "of one layer of each of the best plan's strategies on one data-parallel replica's devices, beside the "
                "layer as planned, both priced by the operator-level simulator");
  app->add_option("--refine-seconds", o->refine_seconds, "seconds for the refinement of all the strategies together")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app->add_option("--refine-out", o->refine_out,
                  "write each refined layer's operator graph and KIWI's plan of it into this directory "
                  "(layerN.graph.json, layerN.plan.json: replay with `kiwi simulate layerN.plan.json layerN.graph.json`)");
  app->add_flag("--uniform", o->uniform,
                "list every uniform plan (all layers one strategy) simulated, fastest fitting first, instead");
  return {app, [o] { return RunPlan(*o); }};
}

}  // namespace kiwi::cli
