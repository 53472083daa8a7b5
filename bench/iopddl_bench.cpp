// IOPDDL benchmark (issue 4, part 5): runs the fast sharding solver on every instance of the ASPLOS
// 2025 contest (../shared/benchmarks/iopddl) at its contest timeout, wall time counted from before
// reading the file, checks each answer with ir::Evaluate and prints a markdown table with the ratio
// to the contest winner, to the best published result and to XLA's auto-sharding. Each instance
// runs in a child process so that its peak RSS is its own (with that of the toulbar2 processes it starts).
//
//   build/bench/bench_iopddl_bench [--dir DIR] [--instances A,G] [--time-scale 0.25] [--seed 1]
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include "kiwi/io/iopddl_json.h"
#include "kiwi/solve/sharding/fast_solver.h"

namespace {

using namespace kiwi;

// Published results, from ../shared/benchmarks/README.md (lower is better; 0 = not published).
struct Published {
  const char* name;
  double timeout_seconds;  // the contest's
  int64_t xla;             // XLA auto-sharding
  int64_t winner;          // the contest winner (1st place team)
  int64_t best;            // best published by any team
};
constexpr Published kPublished[] = {
    {"A", 60, 13'214'846'074, 6'569'457'676, 6'548'641'531},
    {"G", 120, 1'264'777, 217'039, 217'039},
    {"M", 180, 0, 49'928'460'991, 49'928'460'991},
    {"S", 240, 0, 1'534'613'444, 1'534'613'444},
};

struct BenchOptions {
  std::string dir = "../shared/benchmarks/iopddl";
  std::vector<std::string> instances = {"A", "G", "M", "S"};
  double time_scale = 1.0;
  uint64_t seed = 1;
  int threads = 1;
  double margin_seconds = 0.3;  // kept for expanding, evaluating and exiting
};

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
  const std::string path = fmt::format("{}/asplos-2025-iopddl-{}.json.gz", o.dir, inst.name);
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
  std::cout << fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {:.1f} | {:.0f} | {:.0f} | {} |\n", inst.name,
                           problem->nodes.size(), problem->edges.size(), cost, e.feasible ? "yes" : "NO",
                           Ratio(e.cost, inst.winner), Ratio(e.cost, inst.best), Ratio(e.cost, inst.xla), seconds,
                           limit, PeakRssMib(), r ? r->note : "")
            << std::flush;
  return e.feasible ? 0 : 1;
}

int Run(const BenchOptions& o) {
  std::cout << fmt::format("time limits = contest timeout x {}; wall time includes reading the file; seed {}\n\n",
                           o.time_scale, o.seed);
  std::cout << "| instance | nodes | edges | cost | feasible | / winner | / best published | / XLA | time (s) | "
               "limit (s) | peak RSS (MiB) | solver note |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"
            << std::flush;
  int failures = 0;
  for (const std::string& name : o.instances) {
    const Published* inst = nullptr;
    for (const Published& p : kPublished)
      if (name == p.name) inst = &p;
    if (inst == nullptr) {
      std::cerr << "unknown instance " << name << " (A, G, M or S)\n";
      return 2;
    }
    const pid_t child = fork();
    if (child == 0) _exit(RunInstance(*inst, o));
    int status = 0;
    waitpid(child, &status, 0);
    failures += (WIFEXITED(status) && WEXITSTATUS(status) == 0) ? 0 : 1;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{"Runs the fast sharding solver on the IOPDDL contest instances at their contest timeouts."};
  app.add_option("--dir", o.dir, "folder with asplos-2025-iopddl-*.json.gz");
  app.add_option("--instances", o.instances, "instances to run (A, G, M, S)")->delimiter(',');
  app.add_option("--time-scale", o.time_scale, "multiplies every contest timeout");
  app.add_option("--seed", o.seed, "search seed");
  app.add_option("--threads", o.threads, "solver threads");
  CLI11_PARSE(app, argc, argv);
  return Run(o);
}
