// Fidelity benchmark (issue 16): kiwi's predicted iteration time against measured Megatron-LM
// iteration times. Each row of ../shared/fidelity/vtrain_single_node.csv (vTrain, MICRO 2024: GPT,
// fp16 mixed precision, Adam, full activation checkpointing, 1F1B, one DGX A100 node) is written as a
// kiwi layer plan (every layer TP t, DP d, checkpointed; PP p with the layers split evenly; global
// batch and micro-batches as measured) and replayed by the layer simulator on the cluster preset.
// Prints the mean absolute percentage error, median, p90, mean signed error, per-degree breakdowns and
// the worst rows.
//
//   build/bench/bench_fidelity_bench [--csv ../shared/fidelity/vtrain_single_node.csv]
//                                    [--cluster dgx-a100-80gb] [--worst 10] [--rows N]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <tuple>

#include "kiwi/cost/cluster.h"
#include "kiwi/models/presets.h"
#include "kiwi/sim/layer_model.h"
#include "kiwi/sim/layer_simulator.h"

namespace {

using namespace kiwi;

struct Row {
  int gpus = 0, global_batch = 0, micro_batch = 0, hidden = 0, heads = 0, layers = 0, seq = 0, tp = 0, dp = 0,
      pp = 0;
  double measured_ms = 0.0;
  double predicted_ms = 0.0;
  double Error() const { return (predicted_ms - measured_ms) / measured_ms; }  // signed, relative
  std::string Describe() const {
    return fmt::format("h{} L{} b{} B{} tp{} dp{} pp{}", hidden, layers, micro_batch, global_batch, tp, dp, pp);
  }
};

Result<std::vector<Row>> ReadRows(const std::string& path) {
  std::ifstream in(path);
  if (!in) return BadInput(fmt::format("{}: cannot open", path));
  std::vector<Row> rows;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream fields(line);
    Row r;
    if (!(fields >> r.gpus >> r.global_batch >> r.micro_batch >> r.hidden >> r.heads >> r.layers >> r.seq >> r.tp >>
          r.dp >> r.pp >> r.measured_ms))
      return BadInput(fmt::format("{}: line {}: expected 11 numbers", path, number));
    rows.push_back(r);
  }
  return rows;
}

// Megatron pads the vocabulary to a multiple of 128 x TP (make-vocab-size-divisible-by 128); GPT-2's
// tokenizer has 50,257 entries.
int64_t PaddedVocab(int tp) {
  const int64_t multiple = 128LL * tp;
  return (50257 + multiple - 1) / multiple * multiple;
}

Result<sim::LayerModel> ModelOf(const Row& r, const cost::CostModel& cm) {
  models::ModelOverrides o;
  o.layers = r.layers;
  o.hidden = r.hidden;
  o.heads = r.heads;
  o.seq = r.seq;
  o.batch = r.micro_batch;
  o.dtype = ir::DType::kF16;
  o.optimizer = ir::Optimizer::kAdam;
  Result<models::ModelSpec> spec = models::LoadModel("gpt", o);
  if (!spec) return spec.error();
  spec->training.master_weights = true;  // fp16 mixed precision: fp32 master weights and Adam states
  std::get<models::TransformerConfig>(spec->config).vocab = PaddedVocab(r.tp);
  Result<ir::Graph> graph = models::BuildTrainingGraph(*spec);
  if (!graph) return graph.error();
  return sim::BuildLayerModel(*graph, r.micro_batch, cm);
}

plan::LayerPlan PlanOf(const Row& r) {
  plan::LayerPlan p;
  p.layers.assign(static_cast<size_t>(r.layers), plan::LayerStrategy{r.tp, r.dp, false, true});
  p.pp_degree = r.pp;
  for (int s = 0; s < r.pp; ++s) p.pp_partition.push_back(r.layers / r.pp + (s < r.layers % r.pp ? 1 : 0));
  p.global_batch = r.global_batch;
  p.micro_batches = r.global_batch / (r.micro_batch * r.dp);
  p.pipeline = plan::PipelineSchedule::k1F1B;
  return p;
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

struct Summary {
  double mean_abs = 0.0, median_abs = 0.0, p90_abs = 0.0, mean_signed = 0.0;
};

Summary Summarize(const std::vector<const Row*>& rows) {
  std::vector<double> abs;
  Summary s;
  for (const Row* r : rows) {
    abs.push_back(std::fabs(r->Error()));
    s.mean_abs += abs.back();
    s.mean_signed += r->Error();
  }
  if (rows.empty()) return s;
  s.mean_abs /= static_cast<double>(rows.size());
  s.mean_signed /= static_cast<double>(rows.size());
  s.median_abs = Percentile(abs, 0.5);
  s.p90_abs = Percentile(abs, 0.9);
  return s;
}

void PrintGroup(const std::string& title, const std::vector<Row>& rows,
                const std::function<std::string(const Row&)>& key) {
  std::map<std::string, std::vector<const Row*>> groups;
  for (const Row& r : rows) groups[key(r)].push_back(&r);
  fmt::print("\n| {} | rows | mean abs error | median | p90 | mean signed |\n|---|---|---|---|---|---|\n", title);
  for (const auto& [name, members] : groups) {
    const Summary s = Summarize(members);
    fmt::print("| {} | {} | {:.1f}% | {:.1f}% | {:.1f}% | {:+.1f}% |\n", name, members.size(), 100 * s.mean_abs,
               100 * s.median_abs, 100 * s.p90_abs, 100 * s.mean_signed);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiwi's predicted iteration times against measured Megatron-LM runs"};
  std::string csv = "../shared/fidelity/vtrain_single_node.csv";
  std::string cluster_name = "dgx-a100-80gb";
  int worst = 10;
  int max_rows = 0;
  double launch_us = -1.0;
  double link_gbps = -1.0;
  double gemm_eff = -1.0;
  app.add_option("--csv", csv, "measured rows (vTrain's single-node file)");
  app.add_option("--cluster", cluster_name, "cluster preset the rows ran on");
  app.add_option("--worst", worst, "how many of the worst rows to print");
  app.add_option("--rows", max_rows, "only the first N rows (0 = all)");
  app.add_option("--launch-us", launch_us, "override the device's host time per kernel launch (microseconds)");
  app.add_option("--gemm-efficiency", gemm_eff, "override the matmul efficiency");
  app.add_option("--intra-node-gbps", link_gbps, "override the intra-node link bandwidth (10^9 bytes/s)");
  CLI11_PARSE(app, argc, argv);

  Result<cost::Cluster> cluster = cost::ClusterPreset(cluster_name);
  if (!cluster) {
    std::cerr << cluster.error().message << "\n";
    return 2;
  }
  Result<std::vector<Row>> rows = ReadRows(csv);
  if (!rows) {
    std::cerr << rows.error().message << "\n";
    return 2;
  }
  if (max_rows > 0 && static_cast<size_t>(max_rows) < rows->size()) rows->resize(static_cast<size_t>(max_rows));
  if (launch_us >= 0.0) cluster->device.kernel_launch_seconds = launch_us * 1e-6;
  if (link_gbps > 0.0) cluster->intra_node.bandwidth = link_gbps * 1e9;
  cost::CostModelOptions options;
  if (gemm_eff > 0.0) {
    options.compute_efficiency[static_cast<size_t>(ir::OpKind::kMatmul)] = gemm_eff;
    options.compute_efficiency[static_cast<size_t>(ir::OpKind::kBatchMatmul)] = gemm_eff * 0.65 / 0.75;
  }
  const cost::CostModel cm(cluster->device, options);
  std::map<std::tuple<int, int, int, int, int, int>, sim::LayerModel> models;  // the 128 distinct models
  for (Row& r : *rows) {
    const auto key = std::make_tuple(r.hidden, r.heads, r.layers, r.seq, r.micro_batch, r.tp);
    auto it = models.find(key);
    if (it == models.end()) {
      Result<sim::LayerModel> model = ModelOf(r, cm);
      if (!model) {
        std::cerr << r.Describe() << ": " << model.error().message << "\n";
        return 1;
      }
      it = models.emplace(key, *std::move(model)).first;
    }
    cost::Cluster used = *cluster;  // the row's GPUs of one node
    used.num_nodes = 1;
    used.devices_per_node = r.gpus;
    Result<sim::LayerSimResult> sim = sim::SimulateLayerPlan(it->second, PlanOf(r), used, cm);
    if (!sim) {
      std::cerr << r.Describe() << ": " << sim.error().message << "\n";
      return 1;
    }
    r.predicted_ms = sim->summary.iteration_seconds * 1e3;
  }

  std::vector<const Row*> all;
  for (const Row& r : *rows) all.push_back(&r);
  const Summary s = Summarize(all);
  fmt::print("kiwi fidelity bench: {} rows of {} on {} (kernel launch {:.1f} us)\n\n", rows->size(), csv,
             cluster->name, cluster->device.kernel_launch_seconds * 1e6);
  fmt::print("| rows | mean abs error | median | p90 | mean signed |\n|---|---|---|---|---|\n");
  fmt::print("| {} | {:.1f}% | {:.1f}% | {:.1f}% | {:+.1f}% |\n", rows->size(), 100 * s.mean_abs, 100 * s.median_abs,
             100 * s.p90_abs, 100 * s.mean_signed);
  if (!models.empty()) {
    const sim::LayerProfile& layer = models.begin()->second.layers.front();
    fmt::print("\nkernels per layer: {} forward, {} backward (embedding {} + {}, head {} + {})\n", layer.forward_kernels,
               layer.backward_kernels, models.begin()->second.embedding.forward_kernels,
               models.begin()->second.embedding.backward_kernels, models.begin()->second.head.forward_kernels,
               models.begin()->second.head.backward_kernels);
  }
  PrintGroup("TP", *rows, [](const Row& r) { return fmt::format("{}", r.tp); });
  PrintGroup("PP", *rows, [](const Row& r) { return fmt::format("{}", r.pp); });
  PrintGroup("hidden", *rows, [](const Row& r) { return fmt::format("{}", r.hidden); });
  PrintGroup("micro-batch", *rows, [](const Row& r) { return fmt::format("{}", r.micro_batch); });

  std::vector<const Row*> sorted = all;
  std::sort(sorted.begin(), sorted.end(),
            [](const Row* a, const Row* b) { return std::fabs(a->Error()) > std::fabs(b->Error()); });
  fmt::print("\nWorst rows:\n\n| row | measured ms | predicted ms | error |\n|---|---|---|---|\n");
  for (int i = 0; i < worst && i < static_cast<int>(sorted.size()); ++i)
    fmt::print("| {} | {:.1f} | {:.1f} | {:+.1f}% |\n", sorted[static_cast<size_t>(i)]->Describe(),
               sorted[static_cast<size_t>(i)]->measured_ms, sorted[static_cast<size_t>(i)]->predicted_ms,
               100 * sorted[static_cast<size_t>(i)]->Error());
  return 0;
}
