// Galvatron-BMW benchmark (kiwi hybrid): a Table II-style table, throughput (samples/s) and global
// batch per method for each model and per-device memory budget, plus the search-time targets: the
// full BMW search (batch sweep to 512, every PP degree, bi-objective partition) for a 48-layer model on
// 8 GPUs and on 64 GPUs.
//
//   build/bench/bench_hybrid_bench [--cluster rtx-titan-pcie-8] [--memory 8,12,16,20] [--models bert-huge-32,...]
//                                  [--methods dp,sdp,...] [--accumulation] [--timing-only] [--no-timing] [--progress]
// The table uses the paper's setting by default: no gradient accumulation (one micro-batch without
// pipelining, P..4P micro-batches with P stages), so memory bounds the batch as in Table II.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <iostream>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/models/presets.h"
#include "kiwi/solve/hybrid/search.h"

namespace {

using namespace kiwi;
namespace hybrid = kiwi::solve::hybrid;

struct BenchOptions {
  std::string cluster = "rtx-titan-pcie-8";
  std::vector<int> memory_gib = {8, 12, 16, 20};
  std::vector<std::string> models = {"bert-huge-32", "bert-huge-48", "vit-huge-32", "vit-huge-48",
                                     "t5-large-32",  "t5-large-48",  "swin-huge-32", "swin-huge-48"};
  std::vector<std::string> methods = {"dp", "sdp", "tp", "pp", "3d", "dp+tp", "dp+pp", "galvatron", "base", "bmw"};
  bool timing_only = false;
  bool no_timing = false;
  bool progress = false;
  bool accumulation = false;  // the table uses the paper's setting (memory bounds the batch)
};

Result<cost::LayerModel> LayerModelOf(const std::string& name, const cost::CostModel& cm) {
  Result<models::ModelSpec> spec = models::LoadModel(name);
  if (!spec) return spec.error();
  Result<ir::Graph> graph = models::BuildTrainingGraph(*spec);
  if (!graph) return graph.error();
  const auto& config = std::get<models::TransformerConfig>(spec->config);
  return cost::BuildLayerModel(*graph, config.batch, cm);
}

std::string Cell(const Result<hybrid::HybridSearchResult>& r) {
  if (!r) return "error";
  if (!r->feasible) return "OOM";
  // A dagger marks a plan whose strategies are not proven optimal (a DP had to thin its labels).
  return fmt::format("{:.1f} ({}){}", r->simulated.throughput_samples_per_second, r->plan.global_batch,
                     r->strategies_proven ? "" : " †");
}

int Table(const BenchOptions& o) {
  Result<cost::Cluster> cluster = cost::ClusterPreset(o.cluster);
  if (!cluster) return 2;
  const cost::CostModel cm(cluster->device);
  std::string rule = "|---|---|";
  for (size_t i = 0; i < o.methods.size(); ++i) rule += "---|";
  std::cout << fmt::format("Throughput in samples/s (global batch), {} ({} devices), gradient accumulation {}\n\n"
                           "| model | memory | {} |\n{}\n",
                           o.cluster, cluster->NumDevices(), o.accumulation ? "on" : "off", fmt::join(o.methods, " | "),
                           rule);
  for (const std::string& name : o.models) {
    Result<cost::LayerModel> model = LayerModelOf(name, cm);
    if (!model) {
      std::cerr << model.error().message << '\n';
      return 2;
    }
    for (int gib : o.memory_gib) {
      std::vector<std::string> cells;
      double seconds = 0.0;
      for (const std::string& method : o.methods) {
        hybrid::HybridSearchOptions so;
        so.method = *hybrid::ParseMethod(method);
        so.memory_budget_bytes = int64_t{gib} << 30;
        so.accumulation = o.accumulation;
        Result<hybrid::HybridSearchResult> r = hybrid::SearchHybridPlan(*model, *cluster, cm, so);
        if (r) seconds += r->search_seconds;
        cells.push_back(Cell(r));
      }
      std::cout << fmt::format("| {} | {} GiB | {} |\n", name, gib, fmt::join(cells, " | ")) << std::flush;
      std::cerr << fmt::format("{} {} GiB: {:.2f} s of search for {} methods\n", name, gib, seconds, o.methods.size());
    }
  }
  return 0;
}

// The targets: full BMW search (sweep to 512, all PP degrees, bi-objective) on a 48-layer model, and
// kiwi's own search (BMW's with ZeRO-1/2 per layer) on the same cases.
int Timing(const BenchOptions& o) {
  struct Case { std::string model, cluster; int gib; };
  const std::vector<Case> cases = {{"bert-huge-48", "rtx-titan-pcie-8", 16}, {"t5-large-48", "rtx-titan-pcie-8", 16},
                                   {"t5-large-48", "rtx-titan-pcie-8", 8},
                                   {"bert-huge-48", "a100-nvlink-ib-64", 40}, {"gpt3-13b", "a100-nvlink-ib-64", 40},
                                   {"llama2-70b", "a100-nvlink-ib-64", 40}, {"llama3-405b", "dgx-h100:128", 80},
                                   {"mixtral-8x7b", "dgx-h100:8", 80}, {"qwen3-30b-a3b", "dgx-h100:8", 80}};
  std::cout << "\n| model | cluster | memory | method | search seconds (wall) | CPU seconds | configurations (searched) | "
               "partitions | DP runs | samples/s | batch | PP | strategies proven |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Case& c : cases) {
    Result<cost::Cluster> cluster = cost::ClusterPreset(c.cluster);
    if (!cluster) return 2;
    const cost::CostModel cm(cluster->device);
    Result<cost::LayerModel> model = LayerModelOf(c.model, cm);
    if (!model) return 2;
    for (const hybrid::Method method : {hybrid::Method::kBmw, hybrid::Method::kKiwi}) {
      hybrid::HybridSearchOptions so;
      so.method = method;
      so.memory_budget_bytes = int64_t{c.gib} << 30;
      if (o.progress) so.progress = [](const std::string& line) { std::cerr << "  " << line << '\n'; };
      const std::clock_t cpu_start = std::clock();
      Result<hybrid::HybridSearchResult> r = hybrid::SearchHybridPlan(*model, *cluster, cm, so);
      const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
      if (!r) {
        std::cerr << r.error().message << '\n';
        return 1;
      }
      std::cout << fmt::format(
                       "| {} ({} layers) | {} | {} GiB | {} | {:.3f} | {:.3f} | {} ({}) | {} | {} | {:.1f} | {} | {} | {} |\n",
                       c.model, model->layers.size(), c.cluster, c.gib, hybrid::MethodName(method), r->search_seconds,
                       cpu, r->configurations, r->evaluated, r->partitions, r->dp_runs,
                       r->simulated.throughput_samples_per_second, r->plan.global_batch, r->plan.pp_degree,
                       r->strategies_proven ? "yes" : "no")
                << std::flush;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Galvatron-BMW (kiwi hybrid) benchmark: Table II-style throughput table and search times"};
  BenchOptions o;
  app.add_option("--cluster", o.cluster)->capture_default_str();
  app.add_option("--memory", o.memory_gib, "per-device budgets in GiB")->delimiter(',');
  app.add_option("--models", o.models)->delimiter(',');
  app.add_option("--methods", o.methods)->delimiter(',');
  app.add_flag("--timing-only", o.timing_only, "only the search-time targets");
  app.add_flag("--no-timing", o.no_timing, "only the table");
  app.add_flag("--progress", o.progress, "print the search's improvements on stderr");
  app.add_flag("--accumulation", o.accumulation, "table: allow gradient accumulation (any number of micro-batches)");
  CLI11_PARSE(app, argc, argv);
  for (const std::string& m : o.methods)
    if (!hybrid::ParseMethod(m)) {
      std::cerr << "unknown method " << m << '\n';
      return 2;
    }
  if (!o.timing_only) {
    const int rc = Table(o);
    if (rc != 0) return rc;
  }
  return o.no_timing ? 0 : Timing(o);
}
