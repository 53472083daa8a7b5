// KIWI paper Fig. 6: the 4-layer decoder on mesh (1,4) with the inter-device bandwidth at 1x, 1/10x and
// 1/100x of NVLink: normalized latency against memory budget for KIWI and the baselines, and how KIWI
// adapts (§4.3: slower links -> more recomputation, less sharding). Prints markdown, writes an SVG.
//
//   bench_joint_fig6 [--model gpt] [--mesh 1x4] [--scales 1,0.1,0.01] [--layers 4] [--points 6]
//                    [--time-limit 120] [--gap 0.01] [--svg docs/joint-fig6.svg]
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <iostream>

#include "kiwi/ir/mesh.h"
#include "joint_sweep_plot.h"
#include "kiwi/io/file_io.h"
#include "kiwi/report/svg_plot.h"
#include "kiwi/solve/joint/sweep.h"

namespace {

using kiwi::solve::joint::JointMethod;
using kiwi::solve::joint::Sweep;

// KIWI's choices per budget at this bandwidth: recomputation against sharding (§4.3).
std::string Behaviour(const Sweep& s) {
  std::string out = "| budget (GB) | KIWI recomputed ops | recompute share | communication share | mean shards/op | Alpa mean shards/op |\n"
                    "|---|---|---|---|---|---|\n";
  for (const auto& point : s.points) {
    auto k = point.entries.find(JointMethod::kKiwi);
    auto a = point.entries.find(JointMethod::kAlpa);
    if (k == point.entries.end() || !k->second.feasible) continue;
    const auto& e = k->second;
    const bool alpa = a != point.entries.end() && a->second.feasible;
    out += fmt::format("| {:.3f} | {} | {:.1f}% | {:.1f}% | {:.2f} | {} |\n", point.budget / 1e9, e.recomputations,
                       100.0 * e.recompute_seconds / e.seconds, 100.0 * e.communication_seconds / e.seconds, e.mean_shards,
                       alpa ? fmt::format("{:.2f}", a->second.mean_shards) : std::string("-"));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"KIWI Fig. 6: mesh (1,4) with slower links"};
  kiwi::solve::joint::SweepConfig c;
  std::string mesh_text = "1x4", svg = "docs/joint-fig6.svg";
  std::vector<double> scales = {1.0, 0.1, 0.01};
  app.add_option("--model", c.model);
  app.add_option("--mesh", mesh_text);
  app.add_option("--scales", scales)->delimiter(',');
  app.add_option("--layers", c.layers);
  app.add_option("--points", c.budget_points);
  app.add_option("--time-limit", c.time_limit_seconds, "per method and budget");
  app.add_option("--gap", c.relative_gap);
  app.add_option("--threads", c.threads);
  app.add_option("--svg", svg);
  CLI11_PARSE(app, argc, argv);
  kiwi::Result<std::vector<int>> mesh = kiwi::ir::ParseMeshShape(mesh_text, "--mesh");
  if (!mesh) return std::cerr << mesh.error().message << '\n', 2;
  c.mesh = *mesh;
  c.progress = [](const std::string& line) { std::cerr << "fig6: " << line << std::endl; };
  std::vector<kiwi::report::LinePlot> plots;
  for (double scale : scales) {
    c.bandwidth_scale = scale;
    kiwi::Result<Sweep> s = kiwi::solve::joint::RunBudgetSweep(c);
    if (!s) return std::cerr << s.error().message << '\n', 1;
    const std::string title = fmt::format("{} {} layers, mesh ({}), bandwidth x{:g}", c.model, c.layers,
                                          fmt::join(c.mesh, ","), scale);
    std::cout << fmt::format("### {} ({} ops, Alpa without limit: {:.4f} s at {:.2f} GB)\n\n", title, s->ops,
                             s->alpa_unlimited_seconds, s->alpa_unlimited_peak / 1e9)
              << kiwi::solve::joint::SweepTable(*s) << '\n'
              << Behaviour(*s) << std::endl;
    plots.push_back(SweepPlot(*s, title));
  }
  kiwi::Status written = kiwi::io::WriteFileAtomically(svg, kiwi::report::RenderSvgGrid(plots, static_cast<int>(plots.size())));
  if (!written) return std::cerr << written.error().message << '\n', 1;
  std::cerr << "fig6: wrote " << svg << '\n';
  return 0;
}
