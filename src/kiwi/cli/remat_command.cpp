// `kiwi remat GRAPH (--budget SIZE | --budget-fraction F) [--solver NAME] --json` (CONTRACT.md):
// a rematerialization schedule within a memory budget, replayed and measured by the simulator.
// With --max-batch, the largest batch whose schedule fits (remat_max_batch.cpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "kiwi/cli/command.h"
#include "kiwi/cli/common.h"
#include "kiwi/cli/remat_command.h"
#include "kiwi/io/cluster_json.h"
#include "kiwi/io/file_io.h"
#include "kiwi/io/plan_json.h"
#include "kiwi/report/table.h"
#include "kiwi/solve/registry.h"
#include "kiwi/util/units.h"

namespace kiwi::cli {

using solve::remat::RematResult;

Result<int64_t> ResolveBudget(const RematCliOptions& o, const CLI::App& app, int64_t checkpoint_all_peak) {
  const bool absolute = app.count("--budget") > 0;
  const bool fraction = app.count("--budget-fraction") > 0;
  if (absolute == fraction) return BadInput("give exactly one of --budget SIZE and --budget-fraction F");
  if (absolute) return ParseBytes(o.budget, "--budget");
  if (!(o.budget_fraction > 0.0) || o.budget_fraction > 1e6)
    return BadInput(fmt::format("--budget-fraction: must be a positive number, got {}", o.budget_fraction));
  return static_cast<int64_t>(static_cast<double>(checkpoint_all_peak) * o.budget_fraction);
}

nlohmann::json ResultJson(const RematResult& r, const solve::remat::RematProblem& p) {
  nlohmann::json schedule = nlohmann::json::array();
  for (const plan::Step& s : r.schedule)
    schedule.push_back({{"op", s.kind == plan::StepKind::kCompute ? "compute" : "free"}, {"node", s.node}});
  nlohmann::json j = {{"feasible", r.feasible},
                      {"solver", r.solver},
                      {"compute_cost", r.cost},
                      {"baseline_cost", p.baseline_cost},
                      {"peak_memory_bytes", r.peak_memory},
                      {"budget_bytes", p.budget},
                      {"checkpoint_all_peak_bytes", p.checkpoint_all_peak},
                      {"lower_bound", r.lower_bound ? nlohmann::json(*r.lower_bound) : nlohmann::json(nullptr)},
                      {"gap", r.gap() ? nlohmann::json(*r.gap()) : nlohmann::json(nullptr)},
                      {"optimal", r.optimal},
                      {"solve_seconds", r.solve_seconds},
                      {"schedule", std::move(schedule)}};
  if (!r.note.empty()) j["note"] = r.note;
  return j;
}

std::string ResultText(const RematResult& r, const solve::remat::RematProblem& p) {
  int64_t computes = 0;
  for (const plan::Step& s : r.schedule) computes += s.kind == plan::StepKind::kCompute;
  const double overhead = p.baseline_cost > 0 ? 100.0 * (r.cost / p.baseline_cost - 1.0) : 0.0;
  report::Table t({"", ""});
  t.AddRow({"solver", r.solver});
  t.AddRow({"budget", p.checkpoint_all_peak > 0
                          ? fmt::format("{} ({:.1f}% of the checkpoint-all peak {})", FormatBytes(p.budget),
                                        100.0 * static_cast<double>(p.budget) /
                                            static_cast<double>(p.checkpoint_all_peak),
                                        FormatBytes(p.checkpoint_all_peak))
                          : fmt::format("{} (the checkpoint-all peak is 0 B)", FormatBytes(p.budget))});
  t.AddRow({"peak memory", FormatBytes(r.peak_memory)});
  t.AddRow({"compute cost", fmt::format("{:g} ({:+.2f}% over no rematerialization, {:g})", r.cost, overhead,
                                        p.baseline_cost)});
  t.AddRow({"recomputations", std::to_string(computes - p.size())});
  t.AddRow({"lower bound", r.lower_bound ? fmt::format("{:g}", *r.lower_bound) : "none"});
  t.AddRow({"gap", r.optimal ? "optimal" : (r.gap() ? fmt::format("{:.3f}%", 100.0 * *r.gap()) : "unknown")});
  t.AddRow({"solve time", FormatSeconds(r.solve_seconds)});
  if (!r.note.empty()) t.AddRow({"note", r.note});
  std::string out = t.Render();
  return out.substr(out.find('\n', out.find('\n') + 1) + 1);  // drop the empty header and rule
}

Status WritePlan(const std::string& path, const RematResult& r, const RematCliOptions& o,
                 const plan::ModelFlags& model_flags) {
  plan::Plan p;
  p.graph = o.path;
  if (o.path.empty()) {
    p.model = o.model.model;
    p.model_flags = model_flags;
  }
  p.cluster = o.cluster;
  p.solver = "remat:" + r.solver;
  p.op = plan::OperatorPlan{};
  p.op->schedule = r.schedule;
  p.claims.peak_memory_bytes = r.peak_memory;
  p.claims.iteration_seconds = r.cost;
  return io::WriteFileAtomically(path, io::WritePlanJson(p));
}

namespace {

int RunRemat(const RematCliOptions& o, const CLI::App& app) {
  if (o.max_batch) return RunRematMaxBatch(o, app);
  if (app.count("--batch-of-file") > 0)
    return ReportError(BadInput("--batch-of-file: only with --max-batch (the batch a GRAPH file was built for)"));
  const solve::Solver* solver = solve::FindSolver(solve::Family::kRemat, o.solver);
  if (solver == nullptr)
    return ReportError(BadInput(fmt::format("--solver: '{}' is not one of {}", o.solver,
                                            fmt::join(solve::SolverNames(solve::Family::kRemat), ", "))));
  Result<ir::Graph> graph = LoadGraphOrModel(o.path, o.model, app);
  if (!graph) return ReportError(graph.error());
  Result<cost::Cluster> cluster = io::LoadCluster(o.cluster);
  if (!cluster) return ReportError(cluster.error());
  Result<cost::CostModel> made = o.cost.Make(*cluster);
  if (!made) return ReportError(made.error());
  const cost::CostModel& cm = *made;
  Result<solve::remat::RematProblem> problem = solve::remat::MakeRematProblem(*graph, cm, 0);
  if (!problem) return ReportError(problem.error());
  Result<int64_t> budget = ResolveBudget(o, app, problem->checkpoint_all_peak);
  if (!budget) return ReportError(budget.error());
  problem->budget = *budget;

  solve::SolveRequest request{.target = solve::RematTarget{*problem, cm},
                              .time_limit_seconds = std::max(o.search.SecondsLeft(), 1e-3),
                              .threads = o.search.threads};
  if (!o.quiet) request.progress = [](const std::string& line) { std::cerr << "kiwi remat: " << line << '\n'; };
  Result<solve::SolveOutcome> solved = solve::RunSolver(*solver, request);
  if (!solved) return ReportError(solved.error());
  const RematResult* r = &std::get<RematResult>(solved->result);
  if (!solved->HasPlan()) {
    const Error e = r->smallest_known_budget > 0
        ? Infeasible(fmt::format("no schedule found within {} ({} bytes); the smallest budget kiwi can satisfy is {} "
                                 "({} bytes): use --budget {} or more", FormatBytes(*budget), *budget,
                                 FormatBytes(r->smallest_known_budget), r->smallest_known_budget,
                                 r->smallest_known_budget))
        : Error{ErrorCode::kTimeLimit, fmt::format("no schedule found within {} before the time limit ({} s){}",
                                                   FormatBytes(*budget), o.search.time_limit_seconds,
                                                   r->note.empty() ? "" : ": " + r->note)};
    return ReportError(e);
  }
  if (!o.out.empty()) {
    Status written = WritePlan(o.out, *r, o, o.model.flags);
    if (!written) return ReportError(written.error());
  }
  if (o.json) {
    PrintJson(ResultJson(*r, *problem));
  } else {
    std::cout << fmt::format("kiwi remat {}\n", o.path.empty() ? DescribeModel(*o.model.Load()) : o.path)
              << ResultText(*r, *problem);
    if (!o.out.empty()) std::cout << "plan written to " << o.out << " (replay it with `kiwi simulate`)\n";
  }
  return 0;
}

}  // namespace

Command AddRematCommand(CLI::App& root) {
  auto o = std::make_shared<RematCliOptions>();
  CLI::App* app = root.add_subcommand("remat", "rematerialization: which tensors to keep or recompute within a memory budget");
  app->add_option("GRAPH", o->path, "graph file (kiwi JSON, Checkmate or random-layered node-link JSON)");
  o->model.Add(app, "gpt");
  app->add_option("--budget", o->budget, "memory budget (bytes or units: 16GiB, 16GB, 512MiB)");
  app->add_option("--budget-fraction", o->budget_fraction, "budget as a fraction of the checkpoint-all peak");
  app->add_option("--solver", o->solver, fmt::format("{}", fmt::join(solve::SolverNames(solve::Family::kRemat), " | ")))
      ->capture_default_str();
  app->add_option("--cluster", o->cluster, ClusterHelp() + "; its device prices roofline costs")->capture_default_str();
  app->add_option("--out", o->out, "write the schedule as plan JSON to this file")->check(OutputFile());
  o->search.Add(app);
  o->cost.Add(app);
  app->add_flag("--max-batch", o->max_batch,
                "report the largest batch whose plan fits the budget (--budget-fraction: of the checkpoint-all "
                "peak at the graph's own batch); --model graphs are rebuilt at each batch, graph files rescaled; "
                "--time-limit bounds the whole search (it stops at the limit with the largest batch found)");
  app->add_option("--batch-of-file", o->batch_of_file,
                  "with --max-batch: the batch the GRAPH file was built for (default: read from its name, "
                  "e.g. vgg16_b256_train.json or Checkmate's 'VGG16_256_(224, 224, 3)_train')");
  app->add_flag("--quiet", o->quiet, "no progress lines on stderr");
  app->add_flag("--json", o->json, "print one JSON object");
  return {app, [o, app] { return RunRemat(*o, *app); }};
}

}  // namespace kiwi::cli
