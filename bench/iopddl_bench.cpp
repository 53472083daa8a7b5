// IOPDDL benchmark (issues 4 and 24): runs the fast sharding solver on instances of the ASPLOS 2025
// contest at their contest timeouts, wall time counted from before reading the file, checks each
// answer with ir::Evaluate and prints a markdown table with the ratio to the contest winner, to the
// best published result and to XLA's auto-sharding, and the gap to the proven bound. Each instance
// runs in a child process so that its peak RSS is its own (with that of the toulbar2 processes it
// starts). The public four are in ../shared/benchmarks/iopddl (the default); the others are in the
// contest's repository (git clone https://github.com/google/iopddl; --dir iopddl/benchmarks), which
// is fetched at bench time and never committed here. An instance whose file is not in --dir gets a
// row saying so.
//
//   build/bench/bench_iopddl_bench [--dir DIR] [--instances A,G | all] [--time-scale 0.25] [--seed 1]
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include "kiwi/io/iopddl_json.h"
#include "kiwi/solve/sharding/fast_solver.h"

namespace {

using namespace kiwi;

// Every contest instance: its model and contest timeout (the repository's benchmark-details table,
// google/iopddl), and the published results (lower is better; 0 = not published): A, G, M, S from
// ../shared/benchmarks/README.md, the others' best published and XLA costs from issue 24.
struct Published {
  const char* name;
  const char* model;
  double timeout_seconds;  // the contest's
  int64_t xla;             // XLA auto-sharding
  int64_t winner;          // the contest winner (1st place team)
  int64_t best;            // best published by any team
};
constexpr Published kPublished[] = {
    {"A", "GNS", 60, 13'214'846'074, 6'569'457'676, 6'548'641'531},
    {"B", "Transformer", 60, 990'205, 0, 532'843},
    {"C", "Gemma 1 2B", 60, 4'195'881'092'919, 0, 84'102'445'260},
    {"D", "Gemma 1 7B", 60, 0, 0, 313'613'524'736},
    {"E", "Gemma 1 9B", 60, 0, 0, 0},
    {"F", "Gemma 1 27B", 120, 0, 0, 0},
    {"G", "Transformer", 120, 1'264'777, 217'039, 217'039},
    {"H", "Gemma 2 9B", 120, 0, 0, 0},
    {"I", "Gemma 2 27B", 120, 0, 0, 0},
    {"J", "Diffusion", 120, 0, 0, 0},
    {"K", "GNS", 180, 0, 0, 2'274'276'676},
    {"L", "U-Net", 180, 0, 0, 1'970'993'742},
    {"M", "Gemma 1 2B", 180, 0, 49'928'460'991, 49'928'460'991},
    {"N", "Gemma 1 7B", 180, 0, 0, 202'739'586'553},
    {"O", "Gemma 1 9B", 180, 0, 0, 0},
    {"P", "Gemma 1 27B", 240, 0, 0, 651'833'115'436},
    {"Q", "Gemma 2 9B", 240, 1'995'944'800'323, 0, 526'776'842'042},
    {"R", "Gemma 2 27B", 240, 0, 0, 371'899'551'572},
    {"S", "U-Net", 240, 0, 1'534'613'444, 1'534'613'444},
    {"T", "Diffusion", 240, 0, 0, 682'895'254'913},
    {"U", "GNS", 300, 0, 0, 2'569'342'178},
    {"V", "Transformer", 300, 0, 0, 1'632'051},
    {"W", "Diffusion", 300, 0, 0, 0},
    {"X", "Gemma 1 9B", 300, 0, 0, 0},
    {"Y", "Gemma 2 27B", 300, 0, 0, 0},
};

struct BenchOptions {
  std::string dir = "../shared/benchmarks/iopddl";
  std::vector<std::string> instances = {"A", "G", "M", "S"};
  double time_scale = 1.0;
  uint64_t seed = 1;
  int threads = 1;
  double margin_seconds = 0.3;  // kept for expanding, evaluating and exiting
};

constexpr int kAbsent = 3;  // a child's exit code: the instance's file is not in --dir

std::string Ratio(int64_t cost, int64_t reference) {
  if (reference <= 0) return "—";
  return fmt::format("{:.4f}", static_cast<double>(cost) / static_cast<double>(reference));
}

// This process's peak plus the largest peak of its children (toulbar2 runs one at a time beside it).
double PeakRssMib() {
  rusage self{}, children{};
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &children);
  return static_cast<double>(self.ru_maxrss + children.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// Reads, solves and checks one instance; prints its table row. Returns the process exit code.
int RunInstance(const Published& inst, const BenchOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const double limit = inst.timeout_seconds * o.time_scale;
  std::string path = fmt::format("{}/asplos-2025-iopddl-{}.json.gz", o.dir, inst.name);
  if (!std::filesystem::exists(path) && std::filesystem::exists(path.substr(0, path.size() - 3)))
    path.resize(path.size() - 3);  // decompressed, as the repository's README suggests
  if (!std::filesystem::exists(path)) {
    std::cout << fmt::format("| {} | {} | not in {} | | | | | | | | | {:.0f} | | |\n", inst.name, inst.model, o.dir,
                             limit)
              << std::flush;
    return kAbsent;
  }
  Result<ir::ShardingProblem> problem = io::ReadIopddlFile(path);
  if (!problem) {
    std::cerr << problem.error().message << '\n';
    return 2;
  }
  const double read_seconds = elapsed();
  solve::sharding::ShardingSolveOptions options;
  options.time_limit_seconds = std::max(0.0, limit - read_seconds - o.margin_seconds);
  options.seed = o.seed;
  options.threads = o.threads;
  Result<solve::sharding::ShardingResult> r = solve::sharding::SolveShardingFast(*problem, options);
  const double seconds = elapsed();
  const ir::Evaluation e = r ? ir::Evaluate(*problem, r->solution) : ir::Evaluation{};
  const std::string cost = r ? fmt::format("{}", e.cost) : r.error().message;
  const std::optional<double> gap = r ? r->gap() : std::nullopt;
  std::cout << fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1f} | {:.0f} | {:.0f} | {} |\n",
                           inst.name, inst.model, problem->nodes.size(), problem->edges.size(), cost,
                           e.feasible ? "yes" : "NO", Ratio(e.cost, inst.winner), Ratio(e.cost, inst.best),
                           Ratio(e.cost, inst.xla), gap ? fmt::format("{:.2f}%", 100 * *gap) : "—", seconds, limit,
                           PeakRssMib(), r ? r->note : "")
            << std::flush;
  return e.feasible ? 0 : 1;
}

int Run(const BenchOptions& o) {
  std::cout << fmt::format("time limits = contest timeout x {}; wall time includes reading the file; seed {}\n\n",
                           o.time_scale, o.seed);
  std::vector<const Published*> chosen;
  for (const std::string& name : o.instances) {
    if (name == "all") {
      for (const Published& p : kPublished) chosen.push_back(&p);
      continue;
    }
    const auto it = std::find_if(std::begin(kPublished), std::end(kPublished),
                                 [&](const Published& p) { return name == p.name; });
    if (it == std::end(kPublished)) {
      std::cerr << "--instances: unknown instance " << name << " (A to Y, or all)\n";
      return 2;
    }
    chosen.push_back(it);
  }
  std::cout << "| instance | model | nodes | edges | cost | feasible | / winner | / best published | / XLA | gap | "
               "time (s) | limit (s) | peak RSS (MiB) | solver note |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
            << std::flush;
  int failures = 0;
  int absent = 0;
  for (const Published* inst : chosen) {
    const pid_t child = fork();
    if (child == 0) _exit(RunInstance(*inst, o));
    int status = 0;
    waitpid(child, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    absent += code == kAbsent ? 1 : 0;
    failures += code == 0 || code == kAbsent ? 0 : 1;
  }
  if (absent > 0) std::cout << fmt::format("\n{} instance(s) not in {}: not run\n", absent, o.dir);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{"Runs the fast sharding solver on the IOPDDL contest instances at their contest timeouts."};
  app.add_option("--dir", o.dir, "folder with asplos-2025-iopddl-*.json.gz");
  app.add_option("--instances", o.instances, "instances to run (A to Y, or all; default A,G,M,S)")->delimiter(',');
  app.add_option("--time-scale", o.time_scale, "multiplies every contest timeout");
  app.add_option("--seed", o.seed, "search seed");
  app.add_option("--threads", o.threads, "solver threads");
  CLI11_PARSE(app, argc, argv);
  return Run(o);
}
