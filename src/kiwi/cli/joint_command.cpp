// `kiwi joint` (CONTRACT.md): operator-level sharding + rematerialization (KIWI) or one of its
// baselines, for a model-zoo model or a graph file, on a device mesh within a per-device memory
// budget. The numbers printed are the simulator's replay of the plan.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>

#include "kiwi/cli/command.h"
#include "kiwi/cli/common.h"
#include "kiwi/io/cluster_json.h"
#include "kiwi/io/file_io.h"
#include "kiwi/io/plan_json.h"
#include "kiwi/report/table.h"
#include "kiwi/solve/joint/joint.h"
#include "kiwi/solve/registry.h"
#include "kiwi/util/units.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::cli {
namespace {

using solve::joint::JointResult;

struct JointCliOptions {
  std::string path;
  ModelFlags model;
  std::string mesh;
  std::string cluster = "v100-nvlink-8";
  std::string memory;
  std::string method = "kiwi";
  std::string out;
  double bandwidth_scale = 1.0;
  SearchFlags search;
  CostFlags cost;
  bool json = false;
  bool quiet = false;
};

// Everything a run needs, loaded and checked.
struct JointInputs {
  ir::Graph graph;
  cost::Cluster cluster;
  ir::DeviceMesh mesh;
  int64_t budget = 0;
  const solve::Solver* method = nullptr;  // of Family::kJoint
};

// Link bandwidths scaled by X (KIWI §4.3: 1/10 and 1/100 of NVLink), before the mesh is laid out.
Status ScaleBandwidth(cost::Cluster& cluster, double scale) {
  if (!(std::isfinite(scale) && scale > 0.0 && scale <= 1e6))
    return BadInput(fmt::format("--bandwidth-scale: must be a positive number, got {}", scale));
  cluster.intra_node.bandwidth *= scale;
  cluster.inter_node.bandwidth *= scale;
  if (scale != 1.0) cluster.name += fmt::format(" (bandwidth x{:g})", scale);
  return Status::Ok();
}

Result<JointInputs> LoadInputs(const JointCliOptions& o, const CLI::App& app) {
  JointInputs in;
  in.method = solve::FindSolver(solve::Family::kJoint, o.method);
  if (in.method == nullptr)
    return BadInput(fmt::format("--method: '{}' is not one of {}", o.method,
                                fmt::join(solve::SolverNames(solve::Family::kJoint), ", ")));
  Result<ir::Graph> graph = LoadGraphOrModel(o.path, o.model, app);
  if (!graph) return graph.error();
  in.graph = *std::move(graph);
  Result<cost::Cluster> cluster = io::LoadCluster(o.cluster);
  if (!cluster) return cluster.error();
  in.cluster = *std::move(cluster);
  KIWI_RETURN_IF_ERROR(ScaleBandwidth(in.cluster, o.bandwidth_scale));
  std::vector<int> shape = {in.cluster.NumDevices()};
  if (!o.mesh.empty()) {
    Result<std::vector<int>> parsed = ir::ParseMeshShape(o.mesh, "--mesh");
    if (!parsed) return parsed.error();
    shape = *parsed;
  }
  Result<ir::DeviceMesh> mesh = in.cluster.MakeMesh(shape);
  if (!mesh) return mesh.error();
  in.mesh = *std::move(mesh);
  in.budget = in.cluster.device.memory_bytes;
  if (!o.memory.empty()) {
    Result<int64_t> budget = ParseBytes(o.memory, "--memory");
    if (!budget) return budget.error();
    in.budget = *budget;
  }
  return in;
}

void Progress(const JointCliOptions& o, const std::string& line) {
  if (!o.quiet) std::cerr << "kiwi joint: " << line << '\n';
}

// One joint solver through the registry's driver (its plan checked by the simulator).
Result<JointResult> SolveWith(const solve::Solver& solver, const solve::joint::JointProblem& p, const JointCliOptions& o,
                              double seconds, std::vector<const JointResult*> portfolio = {}) {
  solve::SolveRequest request{.target = solve::JointTarget{p, std::move(portfolio)},
                              .time_limit_seconds = seconds,
                              .threads = o.search.threads};
  if (!o.quiet) request.progress = [](const std::string& line) { std::cerr << "kiwi joint: " << line << '\n'; };
  Result<solve::SolveOutcome> solved = solve::RunSolver(solver, request);
  if (!solved) return solved.error();
  return std::get<JointResult>(std::move(solved->result));
}

// The requested method; KIWI first runs the baselines (a share of the time each) as its portfolio,
// the full formulation first runs the reduced one.
Result<JointResult> Solve(const solve::joint::JointProblem& p, const JointCliOptions& o, const solve::Solver& method,
                          std::vector<JointResult>& helpers) {
  const double limit = o.search.SecondsLeft();
  std::vector<std::string> first;
  if (method.name == "kiwi") first = {"alpa", "ckpt-dots", "megatron-selective"};
  if (method.name == "kiwi-full") first = {"kiwi"};
  const double share = method.name == "kiwi-full" ? 0.3 : 0.15;
  helpers.reserve(first.size());
  for (const std::string& name : first) {
    if (o.search.Spent()) {  // the portfolio is optional; the method still answers
      Progress(o, fmt::format("{}: skipped, the time limit is reached", name));
      continue;
    }
    Progress(o, fmt::format("{} ({:.0f} s at most)", name, share * limit));
    Result<JointResult> r = SolveWith(*solve::FindSolver(solve::Family::kJoint, name), p, o, share * limit);
    if (!r) return r.error();
    helpers.push_back(*std::move(r));
  }
  // The method itself gets what the helpers left (their setup can outlast their share); none at all
  // tells it to answer without searching.
  std::vector<const JointResult*> portfolio;
  for (const JointResult& h : helpers) portfolio.push_back(&h);
  Progress(o, method.name);
  return SolveWith(method, p, o, o.search.Spent() ? 0.0 : o.search.SecondsLeft(), std::move(portfolio));
}

nlohmann::json ResultJson(const JointResult& r, const JointInputs& in, const std::vector<JointResult>& helpers,
                          double seconds) {
  const sim::TimeBreakdown& t = r.sim.time;
  nlohmann::json j = {{"feasible", r.feasible},
                      {"method", r.method},
                      {"latency_seconds", r.sim.iteration_seconds},
                      {"compute_seconds", t.compute},
                      {"communication_seconds", t.communication + t.resharding},
                      {"collective_seconds", t.communication},
                      {"resharding_seconds", t.resharding},
                      {"recompute_seconds", t.recompute},
                      {"peak_memory_bytes", r.sim.peak_memory_bytes},
                      {"budget_bytes", in.budget},
                      {"solve_seconds", seconds},
                      {"optimal", r.optimal},
                      {"lower_bound_seconds", r.lower_bound_seconds ? nlohmann::json(*r.lower_bound_seconds) : nlohmann::json()},
                      {"ops", in.graph.size()},
                      {"recomputations", r.sim.recomputations},
                      {"mesh", in.mesh.Shape()},
                      {"cluster", in.cluster.name},
                      {"smallest_known_budget_bytes", r.smallest_known_budget},
                      {"note", r.note}};
  nlohmann::json others = nlohmann::json::object();
  for (const JointResult& h : helpers)
    others[h.method] = {{"feasible", h.feasible}, {"latency_seconds", h.sim.iteration_seconds},
                        {"peak_memory_bytes", h.sim.peak_memory_bytes}, {"solve_seconds", h.solve_seconds}};
  if (!helpers.empty()) j["portfolio"] = std::move(others);
  return j;
}

std::string ResultText(const JointResult& r, const JointInputs& in, double seconds) {
  const sim::TimeBreakdown& t = r.sim.time;
  report::Table table({"", ""});
  table.AddRow({"method", r.method});
  table.AddRow({"mesh", fmt::format("{} on {}", in.mesh.ShapeString(), in.cluster.name)});
  table.AddRow({"operators", std::to_string(in.graph.size())});
  table.AddRow({"iteration", FormatSeconds(r.sim.iteration_seconds)});
  table.AddRow({"  compute", FormatSeconds(t.compute)});
  table.AddRow({"  communication", fmt::format("{} (collectives {}, resharding {})", FormatSeconds(t.communication + t.resharding),
                                              FormatSeconds(t.communication), FormatSeconds(t.resharding))});
  table.AddRow({"  recomputation", fmt::format("{} ({} ops)", FormatSeconds(t.recompute), r.sim.recomputations)});
  table.AddRow({"peak memory", fmt::format("{} of {} per device", FormatBytes(r.sim.peak_memory_bytes), FormatBytes(in.budget))});
  table.AddRow({"optimal", r.optimal ? "yes" : "not proven"});
  table.AddRow({"solve time", FormatSeconds(seconds)});
  if (!r.note.empty()) table.AddRow({"note", r.note});
  std::string text = table.Render();
  return text.substr(text.find('\n', text.find('\n') + 1) + 1);  // drop the empty header and its rule
}

nlohmann::json LinkJson(const cost::Link& link) {
  return {{"name", link.name}, {"bandwidth_gbps", link.bandwidth / 1e9}, {"latency_us", link.latency * 1e6}};
}

// The cluster as a cluster JSON file (io/cluster_json.h), for plans made with scaled bandwidth.
std::string ClusterJson(const cost::Cluster& c) {
  nlohmann::json peak = nlohmann::json::object();
  for (int d = 0; d < static_cast<int>(c.device.peak_flops.size()); ++d)
    if (c.device.peak_flops[static_cast<size_t>(d)] > 0.0)
      peak[std::string(ir::DTypeName(static_cast<ir::DType>(d)))] = c.device.peak_flops[static_cast<size_t>(d)] / 1e12;
  nlohmann::json j = {{"kiwi_cluster_version", 1},
                      {"name", c.name},
                      {"num_nodes", c.num_nodes},
                      {"devices_per_node", c.devices_per_node},
                      {"adapters_per_node", c.adapters_per_node},
                      {"device", {{"name", c.device.name},
                                  {"memory", c.device.memory_bytes},
                                  {"memory_bandwidth_gbps", c.device.memory_bandwidth / 1e9},
                                  {"kernel_launch_us", c.device.kernel_launch_seconds * 1e6},
                                  {"reserved", c.device.reserved_bytes},
                                  {"multiprocessors", c.device.multiprocessors},
                                  {"peak_tflops", peak}}}};
  if (c.devices_per_node > 1) j["intra_node"] = LinkJson(c.intra_node);
  if (c.num_nodes > 1) j["inter_node"] = LinkJson(c.inter_node);
  return j.dump(2) + "\n";
}

// The plan for `kiwi simulate`: the model (or graph file), the cluster (a cluster file next to the plan
// when the bandwidth was scaled), the shardings and schedule, and the simulator's numbers as claims.
Status WriteJointPlan(const std::string& path, const JointResult& r, const JointCliOptions& o, const JointInputs& in) {
  const cost::Cluster& cluster = in.cluster;
  plan::Plan p;
  p.graph = o.path;
  if (o.path.empty()) {
    p.model = o.model.model;
    p.model_flags = o.model.flags;
  }
  p.cluster = ClusterReference(o.cluster);
  if (o.bandwidth_scale != 1.0) {
    KIWI_RETURN_IF_ERROR(io::WriteFileAtomically(path + ".cluster.json", ClusterJson(cluster)));
    p.cluster = ClusterReference(path + ".cluster.json");
  }
  p.solver = "joint:" + r.method;
  p.op = r.plan;
  p.claims.peak_memory_bytes = r.sim.peak_memory_bytes;
  p.claims.iteration_seconds = r.sim.iteration_seconds;
  return io::WriteFileAtomically(path, OperatorPlanJson(p, in.graph));
}

int ReportNoPlan(const JointResult& r, const JointInputs& in, const JointCliOptions& o) {
  if (r.timed_out)
    return ReportError({ErrorCode::kTimeLimit,
                        fmt::format("{}: no plan within {} found before the time limit ({} s); the smallest budget it is "
                                    "known to meet is {} ({} bytes)", r.method, FormatBytes(in.budget),
                                    o.search.time_limit_seconds, FormatBytes(r.smallest_known_budget),
                                    r.smallest_known_budget)});
  if (r.smallest_known_budget > in.budget || r.smallest_known_budget == 0)
    return ReportError(Infeasible(fmt::format(
        "{}: no plan fits {} ({} bytes) per device on mesh {}; the smallest budget it is known to meet is {} ({} bytes): "
        "use --memory {} or more", r.method, FormatBytes(in.budget), in.budget, in.mesh.ShapeString(),
        FormatBytes(r.smallest_known_budget), r.smallest_known_budget, r.smallest_known_budget)));
  return ReportError({ErrorCode::kTimeLimit, fmt::format("{}: no plan within {} found before the time limit ({} s)",
                                                         r.method, FormatBytes(in.budget), o.search.time_limit_seconds)});
}

int RunJoint(const JointCliOptions& o, const CLI::App& app) {
  const auto start = std::chrono::steady_clock::now();
  Result<JointInputs> in = LoadInputs(o, app);
  if (!in) return ReportError(in.error());
  Result<cost::CostModel> made = o.cost.Make(in->cluster);
  if (!made) return ReportError(made.error());
  const cost::CostModel& cm = *made;
  Result<solve::joint::JointProblem> p = solve::joint::MakeJointProblem(in->graph, cm, in->mesh, in->budget, {});
  if (!p) return ReportError(p.error());
  std::vector<JointResult> helpers;
  Result<JointResult> r = Solve(*p, o, *in->method, helpers);
  if (!r) return ReportError(r.error());
  const double seconds = SecondsSince(start);
  if (!r->feasible) return ReportNoPlan(*r, *in, o);
  if (!o.out.empty()) {
    Status written = WriteJointPlan(o.out, *r, o, *in);
    if (!written) return ReportError(written.error());
  }
  if (o.json) {
    PrintJson(ResultJson(*r, *in, helpers, seconds));
    return 0;
  }
  std::cout << fmt::format("kiwi joint {}\n", o.path.empty() ? DescribeModel(*o.model.Load()) : o.path)
            << ResultText(*r, *in, seconds);
  for (const JointResult& h : helpers)
    std::cout << fmt::format("  {:<20} {}\n", h.method, h.feasible ? fmt::format("{} at peak {}", FormatSeconds(h.seconds()),
                                                                             FormatBytes(h.sim.peak_memory_bytes))
                                                               : std::string("no plan within the budget"));
  if (!o.out.empty()) std::cout << "plan written to " << o.out << " (replay it with `kiwi simulate`)\n";
  return 0;
}

}  // namespace

Command AddJointCommand(CLI::App& root) {
  auto o = std::make_shared<JointCliOptions>();
  CLI::App* app = root.add_subcommand("joint", "operator-level sharding + rematerialization (KIWI) on a device mesh");
  app->add_option("GRAPH", o->path, "graph file (kiwi JSON) instead of --model");
  o->model.Add(app, "gpt");
  app->add_option("--mesh", o->mesh, "device mesh, e.g. 2x4 (default: all devices on one axis)");
  app->add_option("--cluster", o->cluster, ClusterHelp())->capture_default_str();
  app->add_option("--memory", o->memory, "memory budget per device (bytes or units; default: the device's memory)");
  app->add_option("--method", o->method, fmt::format("{}", fmt::join(solve::SolverNames(solve::Family::kJoint), " | ")))
      ->capture_default_str();
  app->add_option("--bandwidth-scale", o->bandwidth_scale, "multiply every link's bandwidth by X (KIWI Fig. 6)")
      ->capture_default_str();
  app->add_option("--out", o->out, "write the plan as plan JSON to this file (replay it with `kiwi simulate`)")->check(OutputFile());
  o->search.Add(app);
  o->cost.Add(app);
  app->add_flag("--quiet", o->quiet, "no progress lines on stderr");
  app->add_flag("--json", o->json, "print one JSON object");
  return {app, [o, app] { return RunJoint(*o, *app); }};
}

}  // namespace kiwi::cli
