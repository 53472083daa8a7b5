// `kiwi simulate PLAN [GRAPH]`: replays a plan with the simulator and reports peak memory per device,
// the time split and, when the plan carries claims, whether the simulator agrees with them.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>

#include "kiwi/cli/command.h"
#include "kiwi/cli/common.h"
#include "kiwi/cli/galvatron_flags.h"
#include "kiwi/io/cluster_json.h"
#include "kiwi/io/galvatron_config.h"
#include "kiwi/io/graph_json.h"
#include "kiwi/io/plan_json.h"
#include "kiwi/models/layer_model.h"
#include "kiwi/report/sim_report.h"
#include "kiwi/util/units.h"

namespace kiwi::cli {
namespace {

struct SimulateOptions {
  std::string plan_path;
  std::string graph_path;
  std::string galvatron_config;  // a Galvatron strategy config instead of PLAN
  GalvatronFlags galvatron;      // its model from Galvatron's profiles instead of --model
  ModelFlags model;
  std::string cluster;
  std::string memory;
  bool timeline = false;
  bool json = false;
  CostFlags cost;
};

struct Inputs {
  plan::Plan plan;  // a framework config's layer section is read once the model is built
  bool framework_config = false;
  cost::Cluster cluster;
  report::SimReportOptions report;
};

Result<Inputs> LoadInputs(const SimulateOptions& o) {
  if (IsFrameworkConfig(o.plan_path)) {  // torchtitan TOML or Megatron-LM arguments: --model, --cluster
    Result<cost::Cluster> cluster = io::LoadCluster(o.cluster.empty() ? "v100-nvlink-8" : o.cluster, "--cluster");
    if (!cluster) return cluster.error();
    Inputs in{plan::Plan{}, true, std::move(*cluster), {}};
    in.report.timeline = o.timeline;
    return in;
  }
  Result<plan::Plan> p = io::ReadPlanFile(o.plan_path);
  if (!p) return p.error();
  if (!p->op && !p->layer) return BadInput(o.plan_path + ": the plan has neither an \"operator\" nor a \"layer\" section");
  const bool from_plan = o.cluster.empty() && !p->cluster.empty();
  const std::string cluster_name = !o.cluster.empty() ? o.cluster : from_plan ? p->cluster : "v100-nvlink-8";
  Result<cost::Cluster> cluster = io::LoadCluster(cluster_name, from_plan ? o.plan_path + ": cluster" : "--cluster");
  if (!cluster) return cluster.error();
  Inputs in{std::move(*p), false, std::move(*cluster), {}};
  in.report.timeline = o.timeline;
  if (!o.memory.empty()) {
    Result<int64_t> budget = ParseBytes(o.memory, "--memory");
    if (!budget) return budget.error();
    in.report.memory_budget = *budget;
  }
  return in;
}

// A simulator's complaint about the plan, named after the plan file and the field's JSON path there
// (issue 18: "layer plan: layers[1]: ..." and "schedule[3]: ..." named no file). The simulator's
// messages start with the plan part at fault: "layer plan: ", "schedule", "plan." (the operator part).
Error InPlanFile(const std::string& plan_path, Error e) {
  if (e.code != ErrorCode::kBadInput) return e;
  std::string& m = e.message;
  if (m.rfind("layer plan: ", 0) == 0) m = fmt::format("{}: layer.{}", plan_path, m.substr(12));
  else if (m.rfind("schedule", 0) == 0) m = fmt::format("{}: operator.{}", plan_path, m);
  else if (m.rfind("plan.", 0) == 0) m = fmt::format("{}: operator.{}", plan_path, m.substr(5));
  return e;
}

// The model a plan refers to: --model with its flags, else the plan's model with the plan's flags;
// the plan's are named as its fields ("model", "model_flags.layers"), not as flags.
Result<models::ModelSpec> LoadPlanModel(const SimulateOptions& o, const CLI::App& app, plan::Plan p) {
  if (app.count("--model") > 0 || (p.model.empty() && p.hf_config.empty())) return o.model.Load();
  // --runtime prices the plan's own model as another runtime would run it (the plan's is the default).
  if (app.count("--runtime") > 0) {
    Result<models::ModelOverrides> given = o.model.Overrides();  // a bad --runtime is the flag's fault
    if (!given) return given.error();
    p.model_flags.runtime = o.model.flags.runtime;
  }
  Result<models::ModelSpec> spec = LoadPlanModelSpec(p);  // a config file's errors name the file
  if (spec || spec.error().code != ErrorCode::kBadInput || spec.error().message.rfind("--", 0) != 0) return spec;
  Error e = spec.error();
  const size_t colon = e.message.find(':');
  const std::string flag = e.message.substr(2, colon == std::string::npos ? std::string::npos : colon - 2);
  const std::string field = flag == "model" ? "model" : "model_flags." + flag;
  e.message = fmt::format("{}: {}{}", o.plan_path, field, colon == std::string::npos ? "" : e.message.substr(colon));
  return e;
}

// The graph an operator plan refers to: GRAPH, else --model, else the plan's own model preset, else the
// graph file the plan names (`kiwi remat FILE --out` writes its path). A plan of a graph that is neither
// is refused rather than replayed on the default model.
Result<ir::Graph> LoadPlanGraph(const SimulateOptions& o, const CLI::App& app, const plan::Plan& p) {
  if (!o.graph_path.empty()) return io::ReadGraphFile(o.graph_path);
  if (app.count("--model") == 0 && p.model.empty() && p.hf_config.empty() && !p.graph.empty()) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(p.graph, ec)) return io::ReadGraphFile(p.graph);
    return BadInput(fmt::format("{}: graph: the plan was made for graph \"{}\", which is not a file here: give its "
                                "graph file (kiwi simulate {} GRAPH) or --model",
                                o.plan_path, p.graph, o.plan_path));
  }
  Result<models::ModelSpec> spec = LoadPlanModel(o, app, p);
  if (!spec) return spec.error();
  return models::BuildTrainingGraph(*spec);
}

nlohmann::json ClaimsJson(const plan::Claims& claims, int64_t peak, double seconds) {
  nlohmann::json j = nlohmann::json::object();
  if (claims.peak_memory_bytes) j["peak_memory_bytes_matches"] = *claims.peak_memory_bytes == peak;
  if (claims.iteration_seconds)
    j["iteration_seconds_matches"] = std::fabs(*claims.iteration_seconds - seconds) <= 1e-9 * std::max(1.0, seconds);
  return j;
}

int SimulateOperator(const SimulateOptions& o, const CLI::App& app, const Inputs& in) {
  Result<ir::Graph> graph = LoadPlanGraph(o, app, in.plan);
  if (!graph) return ReportError(graph.error());
  const std::vector<int>& shape = in.plan.op->mesh_shape;
  Result<ir::DeviceMesh> mesh = shape.empty() ? Result<ir::DeviceMesh>(ir::DeviceMesh{{ir::MeshAxis{}}})
                                              : in.cluster.MakeMesh(shape);
  if (!mesh) return ReportError(mesh.error());
  Result<cost::CostModel> cm = o.cost.Make(in.cluster);
  if (!cm) return ReportError(cm.error());
  Result<sim::SimResult> r = sim::SimulateOperatorPlan(*graph, *in.plan.op, *cm, *mesh);
  if (!r) return ReportError(InPlanFile(o.plan_path, r.error()));
  if (o.json) {
    nlohmann::json j = report::ToJson(*r, in.report);
    j["level"] = "operator";
    j["claims"] = ClaimsJson(in.plan.claims, r->peak_memory_bytes, r->iteration_seconds);
    PrintJson(j);
  } else {
    std::cout << fmt::format("simulate {} (operator level) on {} mesh {}\n", o.plan_path, in.cluster.name,
                             mesh->ShapeString())
              << report::ToText(*r, &*graph, in.report);
  }
  return 0;
}

// The model a layer plan replays on: Galvatron's profiles it records (with their hardware and reserve),
// else its model (or --model) priced by the cost model.
Result<LayerProblem> LoadLayerProblem(const SimulateOptions& o, const CLI::App& app, const Inputs& in) {
  if (in.plan.galvatron) {
    if (app.count("--model") > 0)
      return BadInput(fmt::format("--model: {} was made from Galvatron's profiles (its \"galvatron\" section), which it "
                                  "replays on",
                                  o.plan_path));
    const plan::GalvatronSource& source = *in.plan.galvatron;
    return GalvatronFlags::FromSource(source).Load(in.cluster, source.memory_budget_bytes);
  }
  Result<models::ModelSpec> spec = LoadPlanModel(o, app, in.plan);
  if (!spec) return spec.error();
  return SpecLayerProblem(*spec, in.cluster, o.cost);
}

int SimulateLayer(const SimulateOptions& o, const CLI::App& app, Inputs in) {
  Result<LayerProblem> problem = LoadLayerProblem(o, app, in);
  if (!problem) return ReportError(problem.error());
  Result<cost::CostModel> made = o.cost.Make(problem->cluster, problem->cost_options, problem->collectives);
  if (!made) return ReportError(made.error());
  const cost::CostModel& cm = *made;
  if (in.framework_config) {
    Result<plan::LayerPlan> read =
        ReadFrameworkConfig(o.plan_path, problem->cluster.NumDevices(), static_cast<int>(problem->model.layers.size()));
    if (!read) return ReportError(read.error());
    in.plan.layer = *std::move(read);
  }
  Result<sim::LayerSimResult> r = sim::SimulateLayerPlan(problem->model, *in.plan.layer, problem->cluster, cm);
  if (!r) return ReportError(InPlanFile(o.plan_path, r.error()));
  if (o.json) {
    nlohmann::json j = report::ToJson(*r, in.report);
    j["level"] = "layer";
    j["claims"] = ClaimsJson(in.plan.claims, r->summary.peak_memory_bytes, r->summary.iteration_seconds);
    PrintJson(j);
  } else {
    std::cout << fmt::format("simulate {} (layer level): {} on {}\n", o.plan_path, problem->description,
                             DescribeCluster(problem->cluster))
              << report::ToText(*r, in.report);
  }
  return 0;
}

// A Galvatron strategy config on Galvatron's profiles (with its hardware and memory reserve) or on
// --model, on --cluster; what kiwi prices differently from the config (its embeddings' strategy) is said
// on stderr.
int SimulateGalvatronConfig(const SimulateOptions& o) {
  Result<cost::Cluster> cluster = io::LoadCluster(o.cluster.empty() ? "v100-nvlink-8" : o.cluster, "--cluster");
  if (!cluster) return ReportError(cluster.error());
  report::SimReportOptions report;
  report.timeline = o.timeline;
  int64_t budget = cluster->device.memory_bytes;
  if (!o.memory.empty()) {
    Result<int64_t> given = ParseBytes(o.memory, "--memory");
    if (!given) return ReportError(given.error());
    budget = *given;
    report.memory_budget = budget;
  }
  Result<LayerProblem> problem = LayerProblem{};
  if (o.galvatron.Given()) {
    problem = o.galvatron.Load(std::move(*cluster), budget);
  } else {
    Result<models::ModelSpec> spec = o.model.Load();
    if (!spec) return ReportError(spec.error());
    problem = SpecLayerProblem(*spec, std::move(*cluster), o.cost);
  }
  if (!problem) return ReportError(problem.error());
  std::vector<std::string> notes;
  Result<plan::LayerPlan> plan = io::ReadGalvatronConfigFile(
      o.galvatron_config, {.num_devices = problem->cluster.NumDevices(), .sequence_parallel = o.galvatron.sequence_parallel},
      &notes);
  if (!plan) return ReportError(plan.error());
  if (plan->layers.size() != problem->model.layers.size())
    return ReportError(BadInput(fmt::format("{}: tp_sizes_enc: has {} layers, the model {}", o.galvatron_config,
                                            plan->layers.size(), problem->model.layers.size())));
  Result<cost::CostModel> cm = o.cost.Make(problem->cluster, problem->cost_options, problem->collectives);
  if (!cm) return ReportError(cm.error());
  Result<sim::LayerSimResult> r = sim::SimulateLayerPlan(problem->model, *plan, problem->cluster, *cm);
  if (!r) return ReportError(InPlanFile(o.galvatron_config, r.error()));
  for (const std::string& note : notes) std::cerr << "note: " << note << "\n";
  if (o.json) {
    nlohmann::json j = report::ToJson(*r, report);
    j["level"] = "layer";
    j["notes"] = notes;
    PrintJson(j);
  } else {
    std::cout << fmt::format("simulate {} (Galvatron config): {} on {}\n", o.galvatron_config, problem->description,
                             DescribeCluster(problem->cluster))
              << report::ToText(*r, report);
  }
  return 0;
}

int RunSimulate(const SimulateOptions& o, const CLI::App& app) {
  if (!o.galvatron_config.empty()) {
    if (!o.plan_path.empty())
      return ReportError(BadInput("--galvatron-config: give the Galvatron config or PLAN, not both"));
    return SimulateGalvatronConfig(o);
  }
  if (o.galvatron.Given())
    return ReportError(BadInput("--galvatron-profiles: replays a Galvatron config (--galvatron-config), not PLAN"));
  if (o.plan_path.empty()) return ReportError(BadInput("PLAN: give a plan file (or --galvatron-config CONFIG.json)"));
  Result<Inputs> in = LoadInputs(o);
  if (!in) return ReportError(in.error());
  return in->plan.op ? SimulateOperator(o, app, *in) : SimulateLayer(o, app, *std::move(in));
}

}  // namespace

Command AddSimulateCommand(CLI::App& root) {
  auto o = std::make_shared<SimulateOptions>();
  CLI::App* app = root.add_subcommand("simulate", "replay a plan: peak memory per device and time breakdown");
  app->add_option("PLAN", o->plan_path,
                  "plan JSON (docs/plan-format.md), or a torchtitan job config (.toml) or Megatron-LM arguments "
                  "to replay on --model and --cluster");
  app->add_option("GRAPH", o->graph_path, "graph file an operator-level plan refers to");
  o->model.Add(app, "gpt");
  app->add_option("--galvatron-config", o->galvatron_config,
                  "replay a Galvatron strategy config (galvatron_config_*.json) instead of PLAN, on Galvatron's "
                  "profiles (--galvatron-profiles) or --model, on --cluster");
  o->galvatron.Add(app, app->get_option("--model"));
  app->add_option("--cluster", o->cluster, ClusterHelp() + " (default: the plan's, else v100-nvlink-8)");
  app->add_option("--memory", o->memory, "memory budget per device to check the plan against");
  app->add_flag("--timeline", o->timeline, "include the per-step memory timeline (with --json)");
  AddThreadsFlag(app);
  o->cost.Add(app);
  app->add_flag("--json", o->json, "print one JSON object");
  return {app, [o, app] { return RunSimulate(*o, *app); }};
}

}  // namespace kiwi::cli
