// `kiwi remat (GRAPH | --model NAME) (--budget SIZE | --budget-fraction F) --max-batch`: the largest
// batch whose rematerialization plan fits the budget (Checkmate §6.3, the VGG19 experiment), through
// solve::remat::MaxBatchSize. Graph files are rescaled from the batch they were built for (activation
// bytes and costs linear in the batch, parameters fixed); --model graphs are rebuilt at each batch.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiwi/cli/remat_command.h"
#include "kiwi/io/cluster_json.h"
#include "kiwi/io/graph_json.h"
#include "kiwi/models/layer_model.h"
#include "kiwi/models/presets.h"
#include "kiwi/report/table.h"
#include "kiwi/solve/remat/baselines.h"
#include "kiwi/solve/remat/heuristic.h"
#include "kiwi/solve/remat/max_batch.h"
#include "kiwi/solve/remat/solvers.h"
#include "kiwi/solve/registry.h"
#include "kiwi/util/elapsed.h"
#include "kiwi/util/units.h"

namespace kiwi::cli {
namespace {

namespace remat = solve::remat;
using remat::SolverKind;

constexpr int64_t kLargestBatch = int64_t{1} << 24;  // the model zoo's cap on any dimension

// The graph at any batch, and the batch it was given at (which --budget-fraction refers to).
struct BatchSource {
  int64_t base_batch = 0;
  std::string origin;  // how base_batch was found, for the report
  remat::GraphAtBatch graph_at;
};

bool AllDigits(const std::string& s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

std::vector<std::string> SplitUnderscores(const std::string& s) {
  std::vector<std::string> parts(1);
  for (char c : s) {
    if (c == '_') parts.emplace_back();
    else parts.back() += c;
  }
  return parts;
}

// "vgg16_b256_train.json" -> 256 (the benchmark files' `_b<batch>` token).
std::optional<int64_t> BatchFromFileName(const std::string& path) {
  for (const std::string& token : SplitUnderscores(std::filesystem::path(path).filename().string()))
    if (token.size() > 1 && token[0] == 'b' && AllDigits(token.substr(1))) return std::stoll(token.substr(1));
  return std::nullopt;
}

// Checkmate's graph names "<model>_<batch>_<input shape>_<mode>": "VGG16 (MLSys)_256_(224, 224, 3)_train".
std::optional<int64_t> BatchFromCheckmateName(const std::string& name) {
  const std::vector<std::string> parts = SplitUnderscores(name);
  for (size_t i = 1; i + 1 < parts.size(); ++i)
    if (AllDigits(parts[i]) && !parts[i + 1].empty() && parts[i + 1][0] == '(') return std::stoll(parts[i]);
  return std::nullopt;
}

Result<std::pair<int64_t, std::string>> FileBatch(const RematCliOptions& o, const ir::Graph& graph) {
  if (o.batch_of_file) {
    if (*o.batch_of_file < 1 || *o.batch_of_file > kLargestBatch)
      return BadInput(fmt::format("--batch-of-file: must be in [1, {}], got {}", kLargestBatch, *o.batch_of_file));
    return std::pair<int64_t, std::string>{*o.batch_of_file, "given by --batch-of-file"};
  }
  const std::optional<int64_t> from_file = BatchFromFileName(o.path);
  const std::optional<int64_t> from_name = BatchFromCheckmateName(graph.name());
  if (from_file && from_name && *from_file != *from_name)
    return BadInput(fmt::format("{}: the file name says batch {} but the graph's name '{}' says {}: give "
                                "--batch-of-file N", o.path, *from_file, graph.name(), *from_name));
  if (from_file && *from_file >= 1) return std::pair<int64_t, std::string>{*from_file, "read from the file name"};
  if (from_name && *from_name >= 1) return std::pair<int64_t, std::string>{*from_name, "read from the graph's name"};
  return BadInput(fmt::format("{}: --max-batch needs the batch the graph was built for and neither the file name "
                              "(like vgg16_b256.json) nor the graph's name tells it: give --batch-of-file N", o.path));
}

Result<BatchSource> MakeBatchSource(const RematCliOptions& o, const CLI::App& app) {
  if (!o.path.empty() && app.count("--batch") > 0)
    return BadInput("--batch: sets a --model's batch; give the batch a GRAPH file was built for with --batch-of-file N");
  if (o.path.empty() && o.batch_of_file)
    return BadInput("--batch-of-file: only for a GRAPH file; --model graphs are rebuilt at each batch");
  BatchSource source;
  if (o.path.empty() && app.count("--model") > 0) {  // built at each batch, the base one included
    Result<models::ModelSpec> spec = o.model.Load();
    if (!spec) return spec.error();
    source.base_batch = models::SpecBatch(*spec);
    source.origin = app.count("--batch") > 0 ? "given by --batch" : "the preset's";
    const ModelFlags model = o.model;
    source.graph_at = [model](int64_t batch) -> Result<ir::Graph> {
      ModelFlags at = model;
      at.flags.batch = batch;
      Result<models::ModelSpec> s = at.Load();
      if (!s) return s.error();
      return models::BuildTrainingGraph(*s);
    };
    return source;
  }
  Result<ir::Graph> graph = LoadGraphOrModel(o.path, o.model, app);  // or the "GRAPH or --model" error
  if (!graph) return graph.error();
  Result<std::pair<int64_t, std::string>> batch = FileBatch(o, *graph);
  if (!batch) return batch.error();
  std::tie(source.base_batch, source.origin) = *batch;
  source.graph_at = [file = std::move(*graph), b0 = source.base_batch](int64_t b) {
    return remat::ScaleOpaqueGraph(file, b0, b);
  };
  return source;
}

// Probes only need to know whether a batch fits: `auto` fits exactly when its first answer, the
// heuristic (which equals checkpoint-all whenever that fits), does, so auto's probes run the heuristic
// and only the final batch gets auto's full search.
SolverKind ProbeKind(SolverKind kind) { return kind == SolverKind::kAuto ? SolverKind::kHeuristic : kind; }

bool IsFastKind(SolverKind kind) {
  return kind != SolverKind::kIlp && kind != SolverKind::kLpRound && kind != SolverKind::kChainDp &&
         kind != SolverKind::kAuto;
}

// The answer's solve (the final plan, the smallest budget at batch 1): the solver of that name in the
// registry, through its driver, which replays the schedule (solve/registry.h).
Result<remat::RematResult> SolveRegistered(const remat::RematProblem& p, const cost::CostModel& cm, SolverKind kind,
                                           const remat::RematOptions& options) {
  const solve::Solver* solver = solve::FindSolver(solve::Family::kRemat, remat::SolverName(kind));
  if (solver == nullptr) return Internal(fmt::format("no remat solver named {}", remat::SolverName(kind)));
  Result<solve::SolveOutcome> out = solve::RunSolver(*solver, {.target = solve::RematTarget{p, cm},
                                                              .time_limit_seconds = options.time_limit_seconds,
                                                              .threads = options.threads,
                                                              .progress = options.progress});
  if (!out) return out.error();
  return std::get<remat::RematResult>(std::move(out->result));
}

// One probe's solve. The heuristic and the baselines are called directly: the registry's solvers
// (remat::SolveRemat) would also search for the smallest budget of every batch that does not fit,
// which the search does not need; the probes only ask whether a batch fits.
Result<remat::RematResult> SolveProbe(const remat::RematProblem& p, const cost::CostModel& cm, SolverKind kind,
                                      const remat::RematOptions& options) {
  if (kind == SolverKind::kHeuristic) return remat::SolveHeuristic(p, cm, options);
  if (IsFastKind(kind)) return remat::SolveBaseline(p, cm, kind, options);
  return SolveRegistered(p, cm, kind, options);
}

std::string ProbeLine(int64_t batch, const remat::RematResult& r, int64_t budget, SolverKind kind, double seconds) {
  std::string what = fmt::format("fits, cost {:g}, peak {}", r.cost, FormatBytes(r.peak_memory));
  if (!r.feasible)
    what = r.peak_memory > 0 ? fmt::format("does not fit (peak {} > budget {})", FormatBytes(r.peak_memory),
                                           FormatBytes(budget))
                             : std::string("does not fit");
  return fmt::format("kiwi remat: batch {}: {} ({}, {:.2f} s)\n", batch, what, remat::SolverName(kind), seconds);
}

// Not even batch 1 fits: exit 3 with the smallest budget kiwi can satisfy at batch 1 (SolveRemat's).
int ReportNoBatchFits(const BatchSource& source, const cost::CostModel& cm, SolverKind kind, int64_t budget,
                      const remat::RematOptions& options) {
  Result<ir::Graph> graph = source.graph_at(1);
  if (!graph) return ReportError(graph.error());
  Result<remat::RematProblem> p = remat::MakeRematProblem(*graph, cm, budget);
  if (!p) return ReportError(p.error());
  Result<remat::RematResult> r = SolveRegistered(*p, cm, kind, options);
  if (!r) return ReportError(r.error());
  if (r->smallest_known_budget <= 0)
    return ReportError(Error{ErrorCode::kTimeLimit, fmt::format("max batch: no schedule found for batch 1 within {} "
                                                                "before the time limit", FormatBytes(budget))});
  return ReportError(Infeasible(fmt::format(
      "max batch: not even batch 1 fits within {} ({} bytes); the smallest budget kiwi can satisfy at batch 1 is {} "
      "({} bytes): use --budget {} or more", FormatBytes(budget), budget, FormatBytes(r->smallest_known_budget),
      r->smallest_known_budget, r->smallest_known_budget)));
}

// A probe that does not fit has the cost and peak of the solver's smallest-peak schedule, or none
// (null, "-") when the solver proved that nothing fits without building one.
bool HasSchedule(const remat::BatchProbe& b) { return b.fits || b.peak_memory > 0; }

nlohmann::json ProbesJson(const std::vector<remat::BatchProbe>& probes) {
  nlohmann::json list = nlohmann::json::array();
  for (const remat::BatchProbe& b : probes) {
    const bool known = HasSchedule(b);
    list.push_back({{"batch", b.batch},
                    {"fits", b.fits},
                    {"compute_cost", known ? nlohmann::json(b.cost) : nlohmann::json(nullptr)},
                    {"peak_memory_bytes", known ? nlohmann::json(b.peak_memory) : nlohmann::json(nullptr)}});
  }
  return list;
}

std::string ProbesText(const std::vector<remat::BatchProbe>& probes) {
  report::Table t({"batch", "fits", "compute cost", "peak memory"});
  for (const remat::BatchProbe& b : probes) {
    const bool known = HasSchedule(b);
    t.AddRow({std::to_string(b.batch), b.fits ? "yes" : "no", known ? fmt::format("{:g}", b.cost) : "-",
              known ? FormatBytes(b.peak_memory) : "-"});
  }
  return t.Render();
}

// The final plan at the largest batch: auto's full search there, the fast solvers once more through
// the dispatcher (the contract's fields: bound, optimality), the slow ones' probe answer as is.
Result<remat::RematResult> FinalPlan(const remat::RematProblem& p, const cost::CostModel& cm, SolverKind kind,
                                     remat::MaxBatchResult& search, const remat::RematOptions& options, bool spent) {
  if ((kind != SolverKind::kAuto && !IsFastKind(kind)) || spent) return std::move(search.plan);
  Result<remat::RematResult> r = SolveRegistered(p, cm, kind, options);
  if (r && !r->feasible)
    return Internal(fmt::format("max batch: {} does not fit at batch {}, where its probe did", SolverName(kind),
                                search.batch));
  return r;
}

struct MaxBatchRun {
  BatchSource source;
  SolverKind kind = SolverKind::kAuto;
  int64_t budget = 0;
  remat::MaxBatchResult search;
};

// The budget: --budget, or --budget-fraction of the checkpoint-all peak at the graph's own batch.
Result<int64_t> ResolveBaseBudget(const RematCliOptions& o, const CLI::App& app, const BatchSource& source,
                                  const cost::CostModel& cm) {
  Result<ir::Graph> base = source.graph_at(source.base_batch);
  if (!base) return base.error();
  Result<remat::RematProblem> p = remat::MakeRematProblem(*base, cm, 0);
  if (!p) return p.error();
  return ResolveBudget(o, app, p->checkpoint_all_peak);
}

// The search itself, with one progress line per probe on stderr.
Result<remat::MaxBatchResult> SearchBatches(const RematCliOptions& o, const MaxBatchRun& run,
                                            const cost::CostModel& cm, const remat::RematOptions& options) {
  const SolverKind probe_kind = ProbeKind(run.kind);
  int64_t probing = 0;  // the batch whose graph was built last, i.e. the one being solved
  const remat::GraphAtBatch graph_at = [&](int64_t batch) {
    probing = batch;
    return run.source.graph_at(batch);
  };
  const remat::BatchSolver solve = [&](const remat::RematProblem& p) -> Result<remat::RematResult> {
    const auto start = std::chrono::steady_clock::now();
    remat::RematOptions probe_options = options;  // --time-limit is the whole command's
    probe_options.time_limit_seconds = std::min(options.time_limit_seconds, o.search.SecondsLeft());
    Result<remat::RematResult> r = SolveProbe(p, cm, probe_kind, probe_options);
    if (r && !o.quiet) std::cerr << ProbeLine(probing, *r, run.budget, probe_kind, SecondsSince(start));
    return r;
  };
  remat::MaxBatchOptions limits;
  limits.max_batch = kLargestBatch;
  limits.deadline = DeadlineAfter(o.search.start, o.search.time_limit_seconds);
  return remat::MaxBatchSize(graph_at, run.budget, cm, solve, limits);
}

void PrintReport(const RematCliOptions& o, const MaxBatchRun& run, const remat::RematResult& plan,
                 const remat::RematProblem& p) {
  if (o.json) {
    nlohmann::json j = ResultJson(plan, p);
    j["max_batch"] = run.search.batch;
    j["graph_batch"] = run.source.base_batch;
    j["search_limit_reached"] = run.search.batch >= kLargestBatch;
    j["timed_out"] = run.search.timed_out;
    j["probes"] = ProbesJson(run.search.probes);
    PrintJson(j);
    return;
  }
  const std::string what = o.path.empty() ? DescribeModel(*o.model.Load()) : o.path;
  std::cout << fmt::format("kiwi remat {} --max-batch\n", what)
            << fmt::format("max batch {} within {} ({}; the graph's own batch is {}, {})\n", run.search.batch,
                           FormatBytes(run.budget), remat::SolverName(run.kind), run.source.base_batch,
                           run.source.origin);
  if (run.search.batch >= kLargestBatch) std::cout << "(the search stops at this batch: larger ones may fit too)\n";
  if (run.search.timed_out) std::cout << "(the time limit stopped the search: larger batches may fit too)\n";
  std::cout << "\n" << ProbesText(run.search.probes) << fmt::format("\nplan at batch {}:\n", run.search.batch)
            << ResultText(plan, p);
}

}  // namespace

int RunRematMaxBatch(const RematCliOptions& o, const CLI::App& app) {
  MaxBatchRun run;
  std::optional<SolverKind> kind = remat::ParseSolverKind(o.solver);
  if (!kind)
    return ReportError(BadInput(
        fmt::format("--solver: '{}' is not one of {}", o.solver, fmt::join(remat::SolverNames(), ", "))));
  run.kind = *kind;
  if (!o.out.empty() && !o.path.empty())
    return ReportError(BadInput("--out: with --max-batch only for --model graphs (a plan for a rescaled graph file "
                                "would not replay against the file)"));
  Result<BatchSource> source = MakeBatchSource(o, app);
  if (!source) return ReportError(source.error());
  run.source = std::move(*source);
  Result<cost::Cluster> cluster = io::LoadCluster(o.cluster);
  if (!cluster) return ReportError(cluster.error());
  Result<cost::CostModel> made = o.cost.Make(*cluster);
  if (!made) return ReportError(made.error());
  const cost::CostModel& cm = *made;
  Result<int64_t> budget = ResolveBaseBudget(o, app, run.source, cm);
  if (!budget) return ReportError(budget.error());
  run.budget = *budget;
  remat::RematOptions options;
  options.time_limit_seconds = o.search.time_limit_seconds;
  options.threads = o.search.threads;
  Result<remat::MaxBatchResult> search = SearchBatches(o, run, cm, options);
  if (!search) return ReportError(search.error());
  run.search = std::move(*search);
  if (run.search.batch == 0 && run.search.timed_out)
    return ReportError({ErrorCode::kTimeLimit, fmt::format("--max-batch: the time limit ({} s) ran out before batch 1 "
                                                           "was probed", o.search.time_limit_seconds)});
  if (run.search.batch == 0) return ReportNoBatchFits(run.source, cm, ProbeKind(run.kind), run.budget, options);

  if (!o.quiet) options.progress = [](const std::string& line) { std::cerr << "kiwi remat: " << line << '\n'; };
  Result<ir::Graph> graph = run.source.graph_at(run.search.batch);
  if (!graph) return ReportError(graph.error());
  Result<remat::RematProblem> p = remat::MakeRematProblem(*graph, cm, run.budget);
  if (!p) return ReportError(p.error());
  options.time_limit_seconds = o.search.SecondsLeft();  // the probes' plan stands when none is left
  Result<remat::RematResult> plan = FinalPlan(*p, cm, run.kind, run.search, options, o.search.Spent());
  if (!plan) return ReportError(plan.error());
  plan->solver = remat::SolverName(run.kind);
  if (!o.out.empty()) {
    plan::ModelFlags flags = o.model.flags;
    flags.batch = run.search.batch;
    Status written = WritePlan(o.out, *plan, o, flags);
    if (!written) return ReportError(written.error());
  }
  PrintReport(o, run, *plan, *p);
  if (!o.json && !o.out.empty()) std::cout << "plan written to " << o.out << " (replay it with `kiwi simulate`)\n";
  return 0;
}

}  // namespace kiwi::cli
