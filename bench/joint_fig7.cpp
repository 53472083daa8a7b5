// KIWI paper Fig. 7 / §4.4: solver time against the number of transformer layers (1, 2, 4, 8) for Alpa
// and KIWI at 100% and 90% of Alpa's unconstrained peak memory. Also the target: a 4-layer
// point on mesh (2,4) within 1% of optimal in under 120 s (the gap column). Prints markdown, writes
// an SVG (log-scale time).
//
//   bench_joint_fig7 [--model bert] [--mesh 2x4] [--layers 1,2,4,8] [--fractions 1.0,0.9]
//                    [--time-limit 600] [--gap 0.01] [--svg docs/joint-fig7.svg]
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>

#include "kiwi/io/file_io.h"
#include "kiwi/ir/mesh.h"
#include "kiwi/report/svg_plot.h"
#include "kiwi/solve/joint/sweep.h"

namespace {

using kiwi::solve::joint::JointMethod;
using kiwi::solve::joint::JointResult;
using Clock = std::chrono::steady_clock;

struct Timed {
  JointResult result;
  double seconds = 0.0;  // wall time of the whole call
};

kiwi::Result<Timed> Time(const kiwi::solve::joint::JointProblem& p, JointMethod m,
                         const kiwi::solve::joint::JointSolveOptions& o) {
  const auto start = Clock::now();
  kiwi::Result<JointResult> r = kiwi::solve::joint::SolveJoint(p, m, o);
  if (!r) return r.error();
  return Timed{*std::move(r), std::chrono::duration<double>(Clock::now() - start).count()};
}

std::string Gap(const JointResult& r) {
  if (!r.feasible) return "no plan";
  if (!r.lower_bound_seconds) return r.optimal ? "0%" : "?";
  return fmt::format("{:.2f}%", 100.0 * (r.seconds() - *r.lower_bound_seconds) / r.seconds());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"KIWI Fig. 7: solver time against layers"};
  kiwi::solve::joint::SweepConfig c;
  c.model = "bert";  // the paper's Table 2 counts encoder operators
  c.time_limit_seconds = 600;
  std::string mesh_text = "2x4", svg = "docs/joint-fig7.svg";
  std::vector<int> layer_counts = {1, 2, 4, 8};
  std::vector<double> fractions = {1.0, 0.9};
  app.add_option("--model", c.model);
  app.add_option("--mesh", mesh_text);
  app.add_option("--layers", layer_counts)->delimiter(',');
  app.add_option("--fractions", fractions)->delimiter(',');
  app.add_option("--time-limit", c.time_limit_seconds, "per solve");
  app.add_option("--gap", c.relative_gap);
  app.add_option("--threads", c.threads);
  app.add_option("--svg", svg);
  CLI11_PARSE(app, argc, argv);
  kiwi::Result<std::vector<int>> mesh_shape = kiwi::ir::ParseMeshShape(mesh_text, "--mesh");
  if (!mesh_shape) return std::cerr << mesh_shape.error().message << '\n', 2;
  kiwi::Result<kiwi::cost::Cluster> cluster = kiwi::cost::ClusterPreset(c.cluster);
  kiwi::Result<kiwi::ir::DeviceMesh> mesh = cluster->MakeMesh(*mesh_shape);
  if (!mesh) return std::cerr << mesh.error().message << '\n', 2;
  const kiwi::cost::CostModel cm(cluster->device);
  kiwi::solve::joint::JointSolveOptions o;
  o.time_limit_seconds = c.time_limit_seconds;
  o.relative_gap = c.relative_gap;
  o.threads = c.threads;
  std::cout << fmt::format("| layers | ops | memory | Alpa (s) | Alpa gap | KIWI (s) | KIWI gap | KIWI / Alpa latency |\n"
                           "|---|---|---|---|---|---|---|---|\n");
  std::vector<kiwi::report::Series> series;
  for (double f : fractions)
    for (const char* who : {"Alpa", "KIWI"})
      series.push_back({fmt::format("{} at {:.0f}%", who, 100 * f), {}, {}, "", std::string(who) == "Alpa"});
  for (int layers : layer_counts) {
    c.layers = layers;
    kiwi::Result<kiwi::ir::Graph> g = kiwi::solve::joint::SweepGraph(c);
    if (!g) return std::cerr << g.error().message << '\n', 1;
    kiwi::Result<kiwi::solve::joint::JointProblem> loose = kiwi::solve::joint::MakeJointProblem(*g, cm, *mesh, int64_t{1} << 62, {});
    if (!loose) return std::cerr << loose.error().message << '\n', 1;
    kiwi::Result<Timed> free = Time(*loose, JointMethod::kAlpa, o);
    if (!free) return std::cerr << free.error().message << '\n', 1;
    for (size_t i = 0; i < fractions.size(); ++i) {
      const auto budget = static_cast<int64_t>(fractions[i] * static_cast<double>(free->result.sim.peak_memory_bytes));
      kiwi::Result<kiwi::solve::joint::JointProblem> p = kiwi::solve::joint::MakeJointProblem(*g, cm, *mesh, budget, {});
      kiwi::Result<Timed> alpa = Time(*p, JointMethod::kAlpa, o);
      if (!alpa) return std::cerr << alpa.error().message << '\n', 1;
      kiwi::solve::joint::JointSolveOptions ko = o;
      ko.portfolio = {&alpa->result};
      kiwi::Result<Timed> kiwi = Time(*p, JointMethod::kKiwi, ko);
      if (!kiwi) return std::cerr << kiwi.error().message << '\n', 1;
      std::cout << fmt::format("| {} | {} | {:.0f}% ({:.2f} GB) | {:.1f} | {} | {:.1f} | {} | {:.4f} |\n", layers, g->size(),
                               100 * fractions[i], budget / 1e9, alpa->seconds, Gap(alpa->result), kiwi->seconds,
                               Gap(kiwi->result), alpa->result.feasible ? kiwi->result.seconds() / alpa->result.seconds() : 0.0)
                << std::flush;
      series[2 * i].x.push_back(layers), series[2 * i].y.push_back(alpa->seconds);
      series[2 * i + 1].x.push_back(layers), series[2 * i + 1].y.push_back(kiwi->seconds);
    }
  }
  kiwi::report::LinePlot plot;
  plot.title = fmt::format("solver time, {} on mesh ({})", c.model, fmt::join(*mesh_shape, ","));
  plot.x_label = "transformer layers";
  plot.y_label = "solve time (s)";
  plot.log_y = true;
  plot.series = std::move(series);
  kiwi::Status written = kiwi::io::WriteFileAtomically(svg, kiwi::report::RenderSvg(plot));
  if (!written) return std::cerr << written.error().message << '\n', 1;
  std::cerr << "fig7: wrote " << svg << '\n';
  return 0;
}
