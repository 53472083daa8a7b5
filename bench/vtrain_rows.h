#pragma once
// vTrain's measured Megatron-LM rows (../shared/fidelity/vtrain_single_node.csv) as kiwi layer plans:
// shared by bench_fidelity_bench and the fidelity test (tests/sim/fidelity_test.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/models/presets.h"
#include "kiwi/sim/layer_simulator.h"

namespace kiwi::fidelity {

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

inline Result<std::vector<Row>> ReadRows(const std::string& path) {
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
inline int64_t PaddedVocab(int tp) {
  const int64_t multiple = 128LL * tp;
  return (50257 + multiple - 1) / multiple * multiple;
}

// The rows' Megatron-LM runs materialize the attention scores (its fused scale-mask-softmax kernel)
// unless `attention` says otherwise.
inline Result<cost::LayerModel> ModelOf(const Row& r, const cost::CostModel& cm,
                                        models::AttentionKernel attention = models::AttentionKernel::kMaterialized) {
  models::ModelOverrides o;
  o.attention = attention;
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
  return cost::BuildLayerModel(*graph, r.micro_batch, cm);
}

inline plan::LayerPlan PlanOf(const Row& r) {
  plan::LayerPlan p;
  p.layers.assign(static_cast<size_t>(r.layers), plan::LayerStrategy{r.tp, r.dp, plan::Zero::kNone, true});
  p.pp_degree = r.pp;
  for (int s = 0; s < r.pp; ++s) p.pp_partition.push_back(r.layers / r.pp + (s < r.layers % r.pp ? 1 : 0));
  p.global_batch = r.global_batch;
  p.micro_batches = r.global_batch / (r.micro_batch * r.dp);
  p.pipeline = plan::PipelineSchedule::k1F1B;
  return p;
}

// Predicts every row's iteration time (Row::predicted_ms) on `cluster`'s device, one node of the row's
// GPUs; the 128 distinct models are built once.
inline Status PredictRows(std::vector<Row>& rows, const cost::Cluster& cluster, const cost::CostModel& cm,
                          models::AttentionKernel attention = models::AttentionKernel::kMaterialized) {
  std::map<std::tuple<int, int, int, int, int, int>, cost::LayerModel> models;
  for (Row& r : rows) {
    const auto key = std::make_tuple(r.hidden, r.heads, r.layers, r.seq, r.micro_batch, r.tp);
    auto it = models.find(key);
    if (it == models.end()) {
      Result<cost::LayerModel> model = ModelOf(r, cm, attention);
      if (!model) return Error{model.error().code, r.Describe() + ": " + model.error().message};
      it = models.emplace(key, *std::move(model)).first;
    }
    cost::Cluster used = cluster;  // the row's GPUs of one node
    used.num_nodes = 1;
    used.devices_per_node = r.gpus;
    Result<sim::LayerSimResult> sim = sim::SimulateLayerPlan(it->second, PlanOf(r), used, cm);
    if (!sim) return Error{sim.error().code, r.Describe() + ": " + sim.error().message};
    r.predicted_ms = sim->summary.iteration_seconds * 1e3;
  }
  return Status::Ok();
}

}  // namespace kiwi::fidelity
