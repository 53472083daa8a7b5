// KIWI paper Table 1: an MLP at 20/40/60/80% memory, normalized latency and solver time of KIWI's full
// (stage-based, appendix 7.1) and reduced (§3.2) formulations. Memory percentages are of the peak of
// the plain plan (every op replicated, nothing recomputed); latency is normalized to Alpa without a
// memory limit. Prints a markdown table.
//
//   bench_joint_table1 [--widths 1024,4096,...] [--batch 64] [--activation gelu] [--mesh 2x4]
//                      [--percents 20,40,60,80] [--time-limit 600] [--repeat 1]
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <iostream>

#include "kiwi/ir/mesh.h"
#include "kiwi/solve/joint/sweep.h"

namespace {

using kiwi::solve::joint::JointMethod;
using kiwi::solve::joint::JointResult;
using Clock = std::chrono::steady_clock;

struct Cell {
  bool feasible = false;
  double normalized = 0.0;
  std::vector<double> times;
  std::string status;
};

std::string Format(const Cell& c) {
  if (!c.feasible) return "no plan / " + fmt::format("{:.2f}", c.times.empty() ? 0.0 : c.times.front());
  double mean = 0.0;
  for (double t : c.times) mean += t / static_cast<double>(c.times.size());
  double var = 0.0;
  for (double t : c.times) var += (t - mean) * (t - mean) / std::max<double>(1.0, static_cast<double>(c.times.size()) - 1.0);
  const double ci = c.times.size() > 1 ? 1.96 * std::sqrt(var / static_cast<double>(c.times.size())) : 0.0;
  return fmt::format("{:.3f} / {:.2f} ± {:.2f} ({})", c.normalized, mean, ci, c.status);
}

kiwi::Result<JointResult> SolveTimed(const kiwi::solve::joint::JointProblem& p, JointMethod m,
                                     const kiwi::solve::joint::JointSolveOptions& o, Cell& cell, double reference) {
  const auto start = Clock::now();
  kiwi::Result<JointResult> r = kiwi::solve::joint::SolveJoint(p, m, o);
  if (!r) return r;
  cell.times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  cell.feasible = r->feasible;
  cell.normalized = r->feasible ? r->seconds() / reference : 0.0;
  cell.status = r->optimal ? "optimal" : r->lower_bound_seconds && r->feasible
      ? fmt::format("gap {:.1f}%", 100.0 * (r->seconds() - *r->lower_bound_seconds) / r->seconds()) : "time limit";
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"KIWI Table 1: reduced vs full formulation on an MLP"};
  kiwi::solve::joint::SweepConfig c;
  c.model = "mlp";
  c.mlp_widths = {1024, 4096, 4096, 4096, 4096, 4096, 4096, 1024};  // 7 linear layers
  c.batch = 64;
  c.time_limit_seconds = 600;
  c.relative_gap = 1e-4;
  std::string mesh_text = "2x4";
  std::vector<double> percents = {20, 40, 60, 80};
  int repeat = 1;
  app.add_option("--widths", c.mlp_widths)->delimiter(',');
  app.add_option("--batch", c.batch);
  app.add_option("--activation", c.activation);
  app.add_option("--mesh", mesh_text);
  app.add_option("--percents", percents)->delimiter(',');
  app.add_option("--time-limit", c.time_limit_seconds, "per solve");
  app.add_option("--gap", c.relative_gap);
  app.add_option("--threads", c.threads);
  app.add_option("--repeat", repeat);
  CLI11_PARSE(app, argc, argv);
  kiwi::Result<std::vector<int>> shape = kiwi::ir::ParseMeshShape(mesh_text, "--mesh");
  if (!shape) return std::cerr << shape.error().message << '\n', 2;
  kiwi::Result<kiwi::cost::Cluster> cluster = kiwi::cost::ClusterPreset(c.cluster);
  kiwi::Result<kiwi::ir::DeviceMesh> mesh = cluster->MakeMesh(*shape);
  if (!mesh) return std::cerr << mesh.error().message << '\n', 2;
  kiwi::Result<kiwi::ir::Graph> g = kiwi::solve::joint::SweepGraph(c);
  if (!g) return std::cerr << g.error().message << '\n', 1;
  const kiwi::cost::CostModel cm(cluster->device);
  kiwi::solve::joint::JointSolveOptions o;
  o.time_limit_seconds = c.time_limit_seconds;
  o.relative_gap = c.relative_gap;
  o.threads = c.threads;
  kiwi::Result<kiwi::solve::joint::JointProblem> loose = kiwi::solve::joint::MakeJointProblem(*g, cm, *mesh, int64_t{1} << 62, {});
  if (!loose) return std::cerr << loose.error().message << '\n', 1;
  kiwi::Result<JointResult> alpa = kiwi::solve::joint::SolveJoint(*loose, JointMethod::kAlpa, o);
  if (!alpa) return std::cerr << alpa.error().message << '\n', 1;
  // Strategy 0 is the replicated one; the lowered problem's intervals are the checkpoint-all schedule's.
  const int64_t replicated = kiwi::ir::Evaluate(loose->lowered.problem, kiwi::ir::Solution(g->size(), 0)).peak_usage;
  std::cout << fmt::format("MLP widths {} batch {} ({}), {} ops, mesh ({}); plain plan peak {:.3f} GB; Alpa without limit "
                           "{:.4f} s at {:.3f} GB\n\n| memory | budget (GB) | full: normalized latency / solve s | "
                           "reduced: normalized latency / solve s |\n|---|---|---|---|\n",
                           fmt::join(c.mlp_widths, "-"), c.batch, c.activation, g->size(), fmt::join(*shape, ","),
                           replicated / 1e9, alpa->seconds(), alpa->sim.peak_memory_bytes / 1e9);
  for (double pct : percents) {
    const auto budget = static_cast<int64_t>(pct / 100.0 * static_cast<double>(replicated));
    kiwi::Result<kiwi::solve::joint::JointProblem> p = kiwi::solve::joint::MakeJointProblem(*g, cm, *mesh, budget, {});
    Cell full, reduced;
    for (int k = 0; k < repeat; ++k) {
      kiwi::Result<JointResult> r = SolveTimed(*p, JointMethod::kKiwi, o, reduced, alpa->seconds());
      if (!r) return std::cerr << r.error().message << '\n', 1;
      kiwi::solve::joint::JointSolveOptions fo = o;
      fo.portfolio = {&*r};  // the full formulation starts from the reduced plan
      kiwi::Result<JointResult> f = SolveTimed(*p, JointMethod::kKiwiFull, fo, full, alpa->seconds());
      if (!f) return std::cerr << f.error().message << '\n', 1;
    }
    std::cout << fmt::format("| {:.0f}% | {:.3f} | {} | {} |\n", pct, budget / 1e9, Format(full), Format(reduced)) << std::flush;
  }
  return 0;
}
