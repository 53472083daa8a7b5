// `kiwi graph GRAPH --json` (CONTRACT.md): counts, checkpoint-all peak and compute cost of a graph
// file, or of a model-zoo training graph with --model, or of a HuggingFace config's with --hf-config.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "kiwi/cli/command.h"
#include "kiwi/cli/common.h"
#include "kiwi/io/cluster_json.h"
#include "kiwi/io/file_io.h"
#include "kiwi/io/graph_json.h"
#include "kiwi/report/graph_summary.h"

namespace kiwi::cli {
namespace {

struct GraphOptions {
  std::string path;
  ModelFlags model;
  std::string hf_config;  // a HuggingFace config.json instead of GRAPH or --model
  std::string cluster = "v100-nvlink-8";
  std::string export_path;
  bool json = false;
  CostFlags cost;
};

Result<ir::Graph> LoadGraph(const GraphOptions& o, const CLI::App& app) {
  if (o.hf_config.empty()) return LoadGraphOrModel(o.path, o.model, app);
  Result<models::ModelSpec> spec = o.model.LoadHfConfig(o.hf_config, /*with_batch=*/true);
  if (!spec) return spec.error();
  return models::BuildTrainingGraph(*spec);
}

int RunGraph(const GraphOptions& o, const CLI::App& app) {
  Result<ir::Graph> graph = LoadGraph(o, app);
  if (!graph) return ReportError(graph.error());
  Result<cost::Cluster> cluster = io::LoadCluster(o.cluster);
  if (!cluster) return ReportError(cluster.error());
  Result<cost::CostModel> cost_model = o.cost.Make(*cluster);
  if (!cost_model) return ReportError(cost_model.error());
  Result<report::GraphSummary> summary = report::SummarizeGraph(*graph, *cost_model);
  if (!summary) return ReportError(summary.error());
  if (!o.export_path.empty()) {
    Status written = io::WriteFileAtomically(o.export_path, io::WriteGraphJson(*graph));
    if (!written) return ReportError(written.error());
  }
  if (o.json) {
    PrintJson(report::ToJson(*summary));
  } else {
    std::cout << report::ToText(*summary);
    if (!o.export_path.empty()) std::cout << "  written to              " << o.export_path << '\n';
  }
  return 0;
}

}  // namespace

Command AddGraphCommand(CLI::App& root) {
  auto o = std::make_shared<GraphOptions>();
  CLI::App* app = root.add_subcommand("graph", "describe a training graph: size, checkpoint-all peak, compute cost");
  app->add_option("GRAPH", o->path, "kiwi graph JSON, Checkmate node-link JSON or random-layered JSON (.gz ok)");
  o->model.Add(app, "gpt");
  app->add_option("--hf-config", o->hf_config, "the training graph of a HuggingFace config.json instead of GRAPH or --model")
      ->excludes(app->get_option("--model"))
      ->excludes(app->get_option("GRAPH"));
  app->add_option("--cluster", o->cluster, ClusterHelp() + "; its device prices roofline costs")
      ->capture_default_str();
  app->add_option("--export", o->export_path, "write the graph as kiwi graph JSON to this file")->check(OutputFile());
  AddThreadsFlag(app);
  o->cost.Add(app);
  app->add_flag("--json", o->json, "print one JSON object");
  return {app, [o, app] { return RunGraph(*o, *app); }};
}

}  // namespace kiwi::cli
