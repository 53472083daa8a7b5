// Rematerialization benchmark: for every graph in a directory (default ../shared/benchmarks/remat)
// and budgets 0.95/0.9/0.85/0.8/0.7 of the checkpoint-all peak, each solver's compute-cost overhead
// over no rematerialization, its proven gap and its solve time, as a markdown table.
//
//   build/bench/bench_remat_bench [--dir DIR] [--time-limit S] [--solvers auto,ilp,...] [--budgets 0.9,0.8]
//                                 [--graphs random_layered_n250,vgg16_b256_train]
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "kiwi/cost/cluster.h"
#include "kiwi/io/graph_json.h"
#include "kiwi/solve/remat/solvers.h"

namespace {

using namespace kiwi;

struct BenchOptions {
  std::string dir = "../shared/benchmarks/remat";
  double time_limit = 60.0;
  std::vector<std::string> solvers = {"checkpoint-all", "sqrtn", "greedy", "ckpt-dots", "heuristic", "lp-round",
                                      "ilp", "auto"};
  std::vector<double> budgets = {0.95, 0.9, 0.85, 0.8, 0.7};
  std::vector<std::string> graphs;  // file stems to run (all when empty)
};

std::string Cell(const Result<solve::remat::RematResult>& r, double baseline) {
  if (!r) return "error";
  if (!r->feasible) return r->smallest_known_budget > 0 ? "infeasible" : "no answer";
  std::string cell = fmt::format("{:+.2f}%", 100.0 * (r->cost / baseline - 1.0));
  if (r->optimal) {
    cell += " opt";
  } else if (r->gap()) {
    cell += fmt::format(" (gap {:.2f}%)", 100.0 * *r->gap());
  }
  return cell + fmt::format(" {:.2f}s", r->solve_seconds);
}

int Run(const BenchOptions& o) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(o.dir))
    if (e.path().extension() == ".json" &&
        (o.graphs.empty() || std::find(o.graphs.begin(), o.graphs.end(), e.path().stem().string()) != o.graphs.end()))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  Result<cost::Cluster> cluster = cost::ClusterPreset("v100-nvlink-8");
  const cost::CostModel cm(cluster->device);
  std::string rule = "|---|---|";
  for (size_t i = 0; i < o.solvers.size(); ++i) rule += "---|";
  std::cout << fmt::format("| graph | budget | {} |\n{}\n", fmt::join(o.solvers, " | "), rule);
  for (const auto& file : files) {
    Result<ir::Graph> graph = io::ReadGraphFile(file.string());
    if (!graph) {
      std::cerr << graph.error().message << '\n';
      return 2;
    }
    for (double fraction : o.budgets) {
      Result<solve::remat::RematProblem> p = solve::remat::MakeRematProblem(*graph, cm, 0);
      if (!p) return 2;
      p->budget = static_cast<int64_t>(static_cast<double>(p->checkpoint_all_peak) * fraction);
      std::vector<std::string> cells;
      for (const std::string& name : o.solvers) {
        std::cerr << fmt::format("bench: {} at {} with {}\n", file.filename().string(), fraction, name);
        solve::remat::RematOptions options;
        options.time_limit_seconds = o.time_limit;
        cells.push_back(Cell(solve::remat::SolveRemat(*p, cm, *solve::remat::ParseSolverKind(name), options),
                             p->baseline_cost));
      }
      std::cout << fmt::format("| {} | {} | {} |\n", file.stem().string(), fraction, fmt::join(cells, " | "))
                << std::flush;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{"kiwi rematerialization benchmark"};
  app.add_option("--dir", o.dir, "directory of graph files")->capture_default_str();
  app.add_option("--time-limit", o.time_limit, "seconds per solve")->capture_default_str();
  app.add_option("--solvers", o.solvers, "solvers to run")->delimiter(',');
  app.add_option("--budgets", o.budgets, "budget fractions")->delimiter(',');
  app.add_option("--graphs", o.graphs, "graph file stems to run, e.g. random_layered_n250 (default: all)")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  for (const std::string& s : o.solvers)
    if (!solve::remat::ParseSolverKind(s)) {
      std::cerr << "bench: unknown solver " << s << '\n';
      return 2;
    }
  return Run(o);
}
