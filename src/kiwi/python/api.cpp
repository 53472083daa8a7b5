#include "kiwi/python/api.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "kiwi/cli/common.h"
#include "kiwi/cli/cost_model_loader.h"
#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/cost/step_op_calibration.h"
#include "kiwi/io/cluster_json.h"
#include "kiwi/io/graph_json.h"
#include "kiwi/io/plan_json.h"
#include "kiwi/ir/annotate.h"
#include "kiwi/ir/backward.h"
#include "kiwi/models/layer_model.h"
#include "kiwi/models/presets.h"
#include "kiwi/sim/layer_simulator.h"
#include "kiwi/sim/simulator.h"
#include "kiwi/solve/remat/keep_set_schedule.h"
#include "kiwi/solve/registry.h"
#include "kiwi/solve/remat/solvers.h"

namespace kiwi::python {
namespace {

using nlohmann::json;

Result<cost::Cluster> LoadTarget(const Target& target) {
  if (!target.cluster.empty() && target.cluster.front() == '{') return io::ParseClusterJson(target.cluster, "cluster");
  return io::LoadCluster(target.cluster, "cluster");
}

json ScheduleJson(const std::vector<plan::Step>& steps) {
  json out = json::array();
  for (const plan::Step& s : steps)
    out.push_back({{"op", s.kind == plan::StepKind::kCompute ? "compute" : "free"}, {"node", s.node}});
  return out;
}

json OptionalJson(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

// The cost model on the cluster's device with the target's profile: JSON text here, a path (or none)
// as the CLI's --profile reads it.
Result<cost::CostModel> MakeCostModel(const cost::Cluster& cluster, const Target& target) {
  if (target.profile.empty() || target.profile.front() != '{') return cli::CostFlags{target.profile}.Make(cluster);
  Result<cost::Profile> read = io::ParseProfileJson(target.profile, "profile");
  if (!read) return read.error();
  return cli::MakeCostModel(cluster, {}, std::move(*read), "profile");
}

// A parsed graph, its cluster and a cost model on the cluster's device: what most calls need.
struct Loaded {
  ir::Graph graph;
  cost::Cluster cluster;
  cost::CostModel cm;
};

Result<Loaded> Load(const std::string& graph_json, const Target& target) {
  Result<ir::Graph> g = io::ParseGraphJson(graph_json, "graph");
  if (!g) return g.error();
  Result<cost::Cluster> c = LoadTarget(target);
  if (!c) return c.error();
  Result<cost::CostModel> cm = MakeCostModel(*c, target);
  if (!cm) return cm.error();
  return Loaded{std::move(*g), std::move(*c), std::move(*cm)};
}

}  // namespace

Result<std::string> NormalizeGraphJson(const std::string& text, const std::string& source, bool annotate) {
  Result<ir::Graph> g = io::ParseGraphJson(text, source);
  if (!g) return g.error();
  if (annotate) ir::AnnotateFlopsAndBytes(*g);
  return io::WriteGraphJson(*g);
}

Result<std::string> BuildTrainingGraphJson(const std::string& forward, const std::string& optimizer,
                                           bool master_weights) {
  ir::TrainingOptions options;
  std::optional<ir::Optimizer> parsed = ir::ParseOptimizer(optimizer);
  if (!parsed) return BadInput(fmt::format("optimizer: must be one of {}, got '{}'", ir::kOptimizerNames, optimizer));
  options.optimizer = *parsed;
  options.master_weights = master_weights;
  Result<ir::Graph> g = io::ParseGraphJson(forward, "forward graph");
  if (!g) return g.error();
  Result<ir::Graph> training = ir::BuildTrainingGraph(*g, options);
  if (!training) return training.error();
  ir::AnnotateFlopsAndBytes(*training);
  return io::WriteGraphJson(*training);
}

Result<std::string> GraphSummaryJson(const std::string& graph, const Target& target) {
  Result<Loaded> l = Load(graph, target);
  if (!l) return l.error();
  const cost::CostModel& cm = l->cm;
  Result<solve::remat::RematProblem> p = solve::remat::MakeRematProblem(l->graph, cm, 0);
  if (!p) return p.error();
  json j = {{"nodes", l->graph.size()},
            {"edges", l->graph.NumEdges()},
            {"forward_nodes", l->graph.NumNodes(ir::Pass::kForward)},
            {"backward_nodes", l->graph.NumNodes(ir::Pass::kBackward)},
            {"checkpoint_all_peak_bytes", p->checkpoint_all_peak},
            {"memory_lower_bound_bytes", solve::remat::MemoryLowerBound(*p)},
            {"compute_cost", p->baseline_cost},
            {"node_costs", p->cost}};
  return j.dump();
}

Result<std::string> CalibratedOpSecondsJson(const std::string& graph, double seconds, const Target& target) {
  Result<Loaded> l = Load(graph, target);
  if (!l) return l.error();
  Result<double> per_op = cost::CalibratedStepOpSeconds(l->graph, seconds, l->cm);
  if (!per_op) return per_op.error();
  return json{{"op_seconds", *per_op}}.dump();
}

Result<std::string> SolveRematJson(const std::string& graph, const RematRequest& request, const Target& target) {
  // The solver of that name in the registry, run by its driver (the schedule replayed: solve/registry.h).
  const solve::Solver* solver = solve::FindSolver(solve::Family::kRemat, request.solver);
  if (solver == nullptr)
    return BadInput(fmt::format("solver: '{}' is not one of {}", request.solver,
                                fmt::join(solve::SolverNames(solve::Family::kRemat), ", ")));
  Result<Loaded> l = Load(graph, target);
  if (!l) return l.error();
  const cost::CostModel& cm = l->cm;
  Result<solve::remat::RematProblem> p = solve::remat::MakeRematProblem(l->graph, cm, request.budget);
  if (!p) return p.error();
  solve::SolveRequest solve_request{.target = solve::RematTarget{*p, cm},
                                    .time_limit_seconds = request.time_limit_seconds,
                                    .threads = request.threads};
  if (request.progress)
    solve_request.progress = [](const std::string& line) { fmt::print(stderr, "kiwi remat: {}\n", line); };
  Result<solve::SolveOutcome> out = solve::RunSolver(*solver, solve_request);
  if (!out) return out.error();
  const solve::remat::RematResult* r = &std::get<solve::remat::RematResult>(out->result);
  json j = {{"feasible", r->feasible},
            {"solver", r->solver},
            {"compute_cost", r->cost},
            {"baseline_cost", p->baseline_cost},
            {"peak_memory_bytes", r->peak_memory},
            {"budget_bytes", p->budget},
            {"checkpoint_all_peak_bytes", p->checkpoint_all_peak},
            {"memory_lower_bound_bytes", solve::remat::MemoryLowerBound(*p)},
            {"smallest_known_budget_bytes", r->smallest_known_budget},
            {"lower_bound", OptionalJson(r->lower_bound)},
            {"gap", OptionalJson(r->gap())},
            {"optimal", r->optimal},
            {"solve_seconds", r->solve_seconds},
            {"note", r->note},
            {"schedule", ScheduleJson(r->schedule)}};
  return j.dump();
}

Result<std::string> KeepSetScheduleJson(const std::string& graph, const std::vector<bool>& keep,
                                        const Target& target) {
  Result<Loaded> l = Load(graph, target);
  if (!l) return l.error();
  if (keep.size() != static_cast<size_t>(l->graph.size()))
    return BadInput(fmt::format("keep: has {} entries, the graph has {} nodes", keep.size(), l->graph.size()));
  const cost::CostModel& cm = l->cm;
  Result<solve::remat::RematProblem> p = solve::remat::MakeRematProblem(l->graph, cm, 0);
  if (!p) return p.error();
  solve::remat::KeepSetScheduler scheduler(*p);
  const solve::remat::KeepPolicy policy = scheduler.FromKeep(keep);
  const solve::remat::KeepSetEvaluation e = scheduler.Evaluate(policy);
  json j = {{"schedule", ScheduleJson(scheduler.Schedule(policy))},
            {"peak_memory_bytes", e.peak},
            {"compute_cost", e.cost},
            {"baseline_cost", p->baseline_cost},
            {"checkpoint_all_peak_bytes", p->checkpoint_all_peak}};
  return j.dump();
}

Result<std::string> SimulateJson(const std::string& graph, const std::string& plan_text, const Target& target) {
  Result<Loaded> l = Load(graph, target);
  if (!l) return l.error();
  Result<plan::Plan> plan = io::ParsePlanJson(plan_text, "plan");
  if (!plan) return plan.error();
  if (!plan->op) return BadInput("plan: operator: missing (only operator-level plans replay on a graph)");
  const cost::CostModel& cm = l->cm;
  Result<sim::SimResult> r = sim::SimulateOperatorPlan(l->graph, *plan->op, cm, l->cluster.FlatMesh());
  if (!r) return r.error();
  json timeline = json::array();
  for (const sim::MemoryEvent& e : r->timeline) timeline.push_back(e.bytes_after);
  const auto& steps = plan->op->schedule.empty() ? plan::CheckpointAllSchedule(l->graph) : plan->op->schedule;
  const int32_t peak_step = r->peak_step;
  json j = {{"peak_memory_bytes", r->peak_memory_bytes},
            {"peak_step", peak_step},
            {"peak_node", peak_step >= 0 ? json(steps[static_cast<size_t>(peak_step)].node) : json(nullptr)},
            {"iteration_seconds", r->iteration_seconds},
            {"time", {{"compute", r->time.compute}, {"recompute", r->time.recompute},
                      {"communication", r->time.communication}, {"resharding", r->time.resharding}}},
            {"recomputations", r->recomputations},
            {"timeline", std::move(timeline)}};
  return j.dump();
}

namespace {

json TrafficJson(const sim::LayerTraffic& t) {
  return {{"tp_all_reduce_bytes", t.tp_all_reduce_bytes},       {"tp_all_reduces", t.tp_all_reduces},
          {"sdp_all_gather_bytes", t.sdp_all_gather_bytes},     {"sdp_all_gathers", t.sdp_all_gathers},
          {"dp_all_reduce_bytes", t.dp_all_reduce_bytes},       {"sdp_reduce_scatter_bytes", t.sdp_reduce_scatter_bytes},
          {"slice_gather_bytes", t.slice_gather_bytes},         {"slice_gather_backward_bytes", t.slice_gather_backward_bytes},
          {"step_all_gather_bytes", t.step_all_gather_bytes},
          {"sp_all_gather_bytes", t.sp_all_gather_bytes},       {"sp_reduce_scatter_bytes", t.sp_reduce_scatter_bytes},
          {"sp_collectives", t.sp_collectives},                 {"sp_gradient_all_reduce_bytes", t.sp_gradient_all_reduce_bytes},
          {"sequence_gather_bytes", t.sequence_gather_bytes},
          {"sequence_gather_backward_bytes", t.sequence_gather_backward_bytes},
          {"all_to_all_bytes", t.all_to_all_bytes},             {"all_to_alls", t.all_to_alls},
          {"expert_dp_all_reduce_bytes", t.expert_dp_all_reduce_bytes},
          {"expert_reduce_scatter_bytes", t.expert_reduce_scatter_bytes},
          {"expert_step_all_gather_bytes", t.expert_step_all_gather_bytes},
          {"ring_bytes", t.ring_bytes},                         {"ring_sends", t.ring_sends},
          {"ulysses_bytes", t.ulysses_bytes},                   {"ulysses_all_to_alls", t.ulysses_all_to_alls},
          {"tied_all_reduce_bytes", t.tied_all_reduce_bytes},
          {"context_reshard_bytes", t.context_reshard_bytes}};
}

json ProfileJson(const cost::LayerProfile& p) {
  return {{"name", p.name},
          {"parameter_bytes", p.parameter_bytes},
          {"replicated_parameter_bytes", p.replicated_parameter_bytes},
          {"activation_bytes_per_sample", p.activation_bytes_per_sample},
          {"boundary_bytes_per_sample", p.boundary_bytes_per_sample},
          {"backward_transient_bytes_per_sample", p.backward_transient_bytes_per_sample},
          {"tp_comm_bytes_per_sample", p.tp_comm_bytes_per_sample},
          {"tp_forward_all_reduce_bytes_per_sample", p.tp_forward_all_reduce_bytes_per_sample},
          {"tp_backward_all_reduce_bytes_per_sample", p.tp_backward_all_reduce_bytes_per_sample},
          {"forward_seconds_per_sample", p.forward_seconds_per_sample},
          {"backward_seconds_per_sample", p.backward_seconds_per_sample},
          {"replicated_forward_seconds_per_sample", p.replicated_forward_seconds_per_sample},
          {"replicated_backward_seconds_per_sample", p.replicated_backward_seconds_per_sample},
          {"forward_overhead_seconds", p.forward_overhead_seconds},
          {"backward_overhead_seconds", p.backward_overhead_seconds},
          {"forward_kernels", p.forward_kernels},
          {"backward_kernels", p.backward_kernels},
          {"tp_loss_forward_seconds_per_sample", p.tp_loss_forward_seconds_per_sample},
          {"tp_loss_backward_seconds_per_sample", p.tp_loss_backward_seconds_per_sample}};
}

json LayerModelJson(const cost::LayerModel& m) {
  json layers = json::array();
  for (const cost::LayerProfile& p : m.layers) layers.push_back(ProfileJson(p));
  return {{"name", m.name},
          {"layers", std::move(layers)},
          {"embedding", ProfileJson(m.embedding)},
          {"head", ProfileJson(m.head)},
          {"state_bytes_per_parameter_byte", m.state_bytes_per_parameter_byte}};
}

}  // namespace

Result<std::string> LayerPlanReportJson(const std::string& plan_text, const Target& target) {
  Result<plan::Plan> plan = io::ParsePlanJson(plan_text, "plan");
  if (!plan) return plan.error();
  if (!plan->layer) return BadInput("plan: layer: missing (a layer-level plan, as `kiwi hybrid --out` writes)");
  if (plan->model.empty() && plan->hf_config.empty())
    return BadInput("plan: model: missing (the model preset or hf_config the plan was made for)");
  Result<cost::Cluster> cluster = LoadTarget({target.cluster.empty() ? plan->cluster : target.cluster, ""});
  if (!cluster) return cluster.error();
  Result<models::ModelSpec> spec = cli::LoadPlanModelSpec(*plan);
  if (!spec) return spec.error();
  Result<cost::CostModel> made = MakeCostModel(*cluster, target);
  if (!made) return made.error();
  const cost::CostModel& cm = *made;
  Result<cost::LayerModel> model = models::BuildSpecLayerModel(*spec, cm);
  if (!model) return model.error();
  Result<sim::LayerSimResult> r = sim::SimulateLayerPlan(*model, *plan->layer, *cluster, cm);
  if (!r) return r.error();
  Result<sim::PlanTraffic> traffic = sim::LayerPlanTraffic(*model, *plan->layer, *cluster);
  if (!traffic) return traffic.error();
  json stage_peaks = json::array(), layers = json::array();
  for (const sim::StageResult& s : r->stages) stage_peaks.push_back(s.peak_memory_bytes);
  for (const sim::LayerTraffic& t : traffic->layers) layers.push_back(TrafficJson(t));
  json j = {{"model", LayerModelJson(*model)},
            {"cluster", cluster->name},
            {"devices", cluster->NumDevices()},
            {"simulated", {{"iteration_seconds", r->summary.iteration_seconds},
                           {"peak_memory_bytes", r->summary.peak_memory_bytes},
                           {"stage_peak_memory_bytes", std::move(stage_peaks)},
                           {"compute_seconds", r->summary.time.compute + r->summary.time.recompute},
                           {"communication_seconds", r->summary.time.communication},
                           {"resharding_seconds", r->summary.time.resharding}}},
            {"traffic", {{"layers", std::move(layers)},
                         {"embedding", TrafficJson(traffic->embedding)},
                         {"head", TrafficJson(traffic->head)},
                         {"send_forward_bytes", traffic->send_forward_bytes},
                         {"send_backward_bytes", traffic->send_backward_bytes}}}};
  return j.dump();
}

Result<std::string> NormalizePlanJson(const std::string& text, const std::string& source) {
  Result<plan::Plan> plan = io::ParsePlanJson(text, source);
  if (!plan) return plan.error();
  return io::WritePlanJson(*plan);
}

std::vector<std::string> RematSolverNames() { return solve::SolverNames(solve::Family::kRemat); }
std::vector<std::string> ClusterPresets() { return cost::ClusterPresetNames(); }

}  // namespace kiwi::python
