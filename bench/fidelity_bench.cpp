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
#include <functional>
#include <iostream>
#include <map>

#include "vtrain_rows.h"

namespace {

using namespace kiwi;
using fidelity::Row;

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
  std::string attention = "materialized";
  app.add_option("--attention", attention, "materialized (the rows' Megatron-LM runs) | fused: price FlashAttention instead")
      ->check(CLI::IsMember({"materialized", "fused"}));
  CLI11_PARSE(app, argc, argv);

  Result<cost::Cluster> cluster = cost::ClusterPreset(cluster_name);
  if (!cluster) {
    std::cerr << cluster.error().message << "\n";
    return 2;
  }
  Result<std::vector<Row>> rows = fidelity::ReadRows(csv);
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
  if (Status predicted = fidelity::PredictRows(*rows, *cluster, cm, *models::ParseAttentionKernel(attention));
      !predicted) {
    std::cerr << predicted.error().message << "\n";
    return 1;
  }

  std::vector<const Row*> all;
  for (const Row& r : *rows) all.push_back(&r);
  const Summary s = Summarize(all);
  fmt::print("kiwi fidelity bench: {} rows of {} on {} (kernel launch {:.1f} us)\n\n", rows->size(), csv,
             cluster->name, cluster->device.kernel_launch_seconds * 1e6);
  fmt::print("| rows | mean abs error | median | p90 | mean signed |\n|---|---|---|---|---|\n");
  fmt::print("| {} | {:.1f}% | {:.1f}% | {:.1f}% | {:+.1f}% |\n", rows->size(), 100 * s.mean_abs, 100 * s.median_abs,
             100 * s.p90_abs, 100 * s.mean_signed);
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
