// `kiwi iopddl PROBLEM [--time-limit S] --json` (CONTRACT.md): solves an ASPLOS 2025 IOPDDL contest
// instance. The time limit covers the whole command (reading included), as the contest counts it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "kiwi/cli/command.h"
#include "kiwi/cli/common.h"
#include "kiwi/io/file_io.h"
#include "kiwi/io/iopddl_json.h"
#include "kiwi/solve/registry.h"
#include "kiwi/util/elapsed.h"
#include "kiwi/util/units.h"

namespace kiwi::cli {
namespace {

using solve::sharding::ShardingResult;

struct IopddlCliOptions {
  std::string path;
  std::string solver = "auto";
  SearchFlags search;
  uint64_t seed = 1;
  std::string out;
  bool quiet = false;
  bool json = false;
};

// Time kept back from the limit for expanding, checking and writing the answer (0.05 s was too little
// on the 60k-node instances: T and U ended 0.02-0.08 s past their limit).
constexpr double kOutputReserveSeconds = 0.3;

nlohmann::json ResultJson(const ShardingResult& r, const ir::ShardingProblem& p) {
  return {{"problem", p.name},
          {"nodes", p.nodes.size()},
          {"edges", p.edges.size()},
          {"solver", r.solver},
          {"feasible", r.evaluation.feasible},
          {"cost", r.evaluation.cost},
          {"lower_bound", r.lower_bound ? nlohmann::json(*r.lower_bound) : nlohmann::json(nullptr)},
          {"gap", r.gap() ? nlohmann::json(*r.gap()) : nlohmann::json(nullptr)},
          {"optimal", r.optimal},
          {"peak_usage", r.evaluation.peak_usage},
          {"usage_limit", p.usage_limit},
          {"solve_seconds", r.solve_seconds},
          {"note", r.note},
          {"solution", r.solution}};
}

std::string Summary(const ShardingResult& r, const ir::ShardingProblem& p) {
  const std::string bound = r.lower_bound
      ? fmt::format(", lower bound {} (gap {:.3f}%)", *r.lower_bound, 100.0 * r.gap().value_or(0.0))
      : "";
  return fmt::format("kiwi iopddl: {}: cost {}{}{}, peak usage {} of {}, {} nodes, {} edges, {} in {}{}\n",
                     p.name.empty() ? "problem" : p.name, r.evaluation.cost, r.optimal ? " (optimal)" : "", bound,
                     r.evaluation.peak_usage, p.usage_limit, p.nodes.size(), p.edges.size(), r.solver,
                     FormatSeconds(r.solve_seconds), r.note.empty() ? "" : " (" + r.note + ")");
}

int RunIopddl(const IopddlCliOptions& o) {
  auto elapsed = [&] { return SecondsSince(o.search.start); };  // the clock --time-limit counts on
  const solve::Solver* solver = solve::FindSolver(solve::Family::kSharding, o.solver);
  if (solver == nullptr)
    return ReportError(BadInput(fmt::format("--solver: '{}' is not one of {}", o.solver,
                                            fmt::join(solve::SolverNames(solve::Family::kSharding), ", "))));
  Result<ir::ShardingProblem> problem = io::ReadIopddlFile(o.path);
  if (!problem) return ReportError(problem.error());
  if (!o.quiet)
    std::cerr << fmt::format("kiwi iopddl: read {} ({} nodes, {} edges) in {}\n", o.path, problem->nodes.size(),
                             problem->edges.size(), FormatSeconds(elapsed()));
  solve::SolveRequest request{.target = solve::ShardingTarget{*problem},
                              .time_limit_seconds = std::max(0.01, o.search.SecondsLeft() - kOutputReserveSeconds),
                              .threads = o.search.threads,
                              .seed = o.seed};
  if (!o.quiet)
    request.progress = [&](const std::string& line) {
      std::cerr << fmt::format("kiwi iopddl: {:>8.2f} s  {}\n", elapsed(), line);
    };
  Result<solve::SolveOutcome> solved = solve::RunSolver(*solver, request);
  if (!solved) return ReportError(solved.error());
  if (!solved->HasPlan())
    return ReportError({solved->termination == solve::Termination::kInfeasible ? ErrorCode::kInfeasible : ErrorCode::kTimeLimit,
                        solved->notes});
  ShardingResult* r = &std::get<ShardingResult>(solved->result);
  r->solve_seconds = elapsed();  // the whole command, as the contest times it
  if (!o.out.empty()) {
    Status written = io::WriteFileAtomically(o.out, io::FormatIopddlSolution(r->solution) + "\n");
    if (!written) return ReportError(written.error());
  }
  if (o.json) {
    PrintJson(ResultJson(*r, *problem));
  } else {
    std::cout << io::FormatIopddlSolution(r->solution) << '\n';
  }
  if (!o.quiet) std::cerr << Summary(*r, *problem);
  return 0;
}

}  // namespace

Command AddIopddlCommand(CLI::App& root) {
  auto o = std::make_shared<IopddlCliOptions>();
  CLI::App* app = root.add_subcommand("iopddl", "solve an ASPLOS 2025 IOPDDL sharding instance (.json or .json.gz)");
  app->add_option("PROBLEM", o->path, "contest instance file")->required();
  app->add_option("--solver", o->solver,
                  fmt::format("{} (ilp: exact, small instances)", fmt::join(solve::SolverNames(solve::Family::kSharding), " | ")))->capture_default_str();
  o->search.Add(app);
  app->add_option("--seed", o->seed, "seed of the randomized search")
      // A negative seed would wrap around the unsigned one silently.
      ->check(CLI::Validator(
          [](std::string& v) { return v.starts_with('-') ? "must be a non-negative integer (got " + v + ")" : ""; },
          "UINT"))
      ->capture_default_str();
  app->add_option("--out", o->out, "also write the solution, in the contest's format, to this file")->check(OutputFile());
  app->add_flag("--quiet", o->quiet, "no progress lines on stderr");
  app->add_flag("--json", o->json, "print one JSON object instead of the contest's output line");
  return {app, [o] { return RunIopddl(*o); }};
}

}  // namespace kiwi::cli
