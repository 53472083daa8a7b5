// KIWI paper Fig. 5: a 4-layer transformer encoder (bert) and decoder (gpt) with the GPT-3 13B layer
// (hidden 5120, 40 heads), batch 16, sequence 1024, fp32, on meshes (1,4), (2,4) and (4,2) of
// v100-nvlink-8: latency normalized to Alpa without a memory limit against the memory budget, for
// KIWI and the three baselines; the least budget each meets. Prints markdown tables, writes an SVG.
//
//   bench_joint_fig5 [--models gpt,bert] [--meshes 1x4,2x4,4x2] [--layers 4] [--points 6]
//                    [--time-limit 120] [--gap 0.01] [--svg docs/joint-fig5.svg]
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
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

// KIWI's own numbers per budget: how it spends the time (for the comparison with the paper).
std::string KiwiDetails(const Sweep& s) {
  std::string out = "| budget (GB) | KIWI recomputed ops | recompute (s) | communication (s) | mean shards/op | solve (s) | optimal |\n|---|---|---|---|---|---|---|\n";
  for (const auto& point : s.points) {
    auto e = point.entries.find(JointMethod::kKiwi);
    if (e == point.entries.end() || !e->second.feasible) continue;
    out += fmt::format("| {:.3f} | {} | {:.4f} | {:.4f} | {:.2f} | {:.1f} | {} |\n", point.budget / 1e9, e->second.recomputations,
                       e->second.recompute_seconds, e->second.communication_seconds, e->second.mean_shards,
                       e->second.solve_seconds, e->second.optimal ? "yes" : "no");
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"KIWI Fig. 5: normalized latency against memory budget"};
  std::vector<std::string> models = {"gpt", "bert"}, meshes = {"1x4", "2x4", "4x2"};
  kiwi::solve::joint::SweepConfig c;
  std::string svg = "docs/joint-fig5.svg";
  app.add_option("--models", models)->delimiter(',');
  app.add_option("--meshes", meshes)->delimiter(',');
  app.add_option("--layers", c.layers);
  app.add_option("--hidden", c.hidden);
  app.add_option("--heads", c.heads);
  app.add_option("--seq", c.seq);
  app.add_option("--batch", c.batch);
  app.add_option("--points", c.budget_points);
  app.add_option("--time-limit", c.time_limit_seconds, "per method and budget");
  app.add_option("--gap", c.relative_gap);
  app.add_option("--threads", c.threads);
  app.add_option("--svg", svg);
  CLI11_PARSE(app, argc, argv);
  c.progress = [](const std::string& line) { std::cerr << "fig5: " << line << std::endl; };
  std::vector<kiwi::report::LinePlot> plots;
  for (const std::string& model : models) {
    for (const std::string& mesh_text : meshes) {
      kiwi::Result<std::vector<int>> mesh = kiwi::ir::ParseMeshShape(mesh_text, "--meshes");
      if (!mesh) return std::cerr << mesh.error().message << '\n', 2;
      c.model = model;
      c.mesh = *mesh;
      const auto start = std::chrono::steady_clock::now();
      kiwi::Result<Sweep> s = kiwi::solve::joint::RunBudgetSweep(c);
      if (!s) return std::cerr << s.error().message << '\n', 1;
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string title = fmt::format("{} {} layers, mesh ({})", model == "gpt" ? "decoder" : "encoder", c.layers,
                                            fmt::join(c.mesh, ","));
      std::cout << fmt::format("### {} ({} ops, Alpa without limit: {:.4f} s at {:.2f} GB; sweep took {:.0f} s)\n\n", title,
                               s->ops, s->alpa_unlimited_seconds, s->alpa_unlimited_peak / 1e9, secs)
                << kiwi::solve::joint::SweepTable(*s) << '\n'
                << KiwiDetails(*s) << std::endl;
      plots.push_back(SweepPlot(*s, title));
    }
  }
  kiwi::Status written = kiwi::io::WriteFileAtomically(svg, kiwi::report::RenderSvgGrid(plots, static_cast<int>(meshes.size())));
  if (!written) return std::cerr << written.error().message << '\n', 1;
  std::cerr << "fig5: wrote " << svg << '\n';
  return 0;
}
