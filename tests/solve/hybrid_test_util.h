#pragma once
// Shared fixtures of the hybrid (Galvatron-BMW) search tests: a small two-type layer model (an
// encoder-like type with large activations, a decoder-like one with large parameters, plus
// embeddings on the first stage and a head on the last, with Megatron's TP all-reduces), a two-node test cluster, and brute force over per-layer strategies judged by the
// layer simulator.
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "kiwi/sim/layer_simulator.h"
#include "kiwi/solve/hybrid/strategy_space.h"

namespace kiwi::solve::hybrid::testing {

inline cost::Cluster TestCluster(int nodes = 2, int per_node = 2) {
  cost::Cluster c;
  c.name = "test";
  c.device.name = "dev";
  c.device.memory_bytes = int64_t{16} << 30;
  c.device.memory_bandwidth = 1e12;
  c.device.SetPeakFlops(ir::DType::kF32, 1e13);
  c.num_nodes = nodes;
  c.devices_per_node = per_node;
  c.intra_node = {"fast", 2e10, 5e-6};
  c.inter_node = {"slow", 2e9, 2e-5};
  return c;
}

inline cost::CostModel TestCostModel(const cost::Cluster& c) { return cost::CostModel(c.device); }

inline cost::LayerProfile Profile(const char* name, int64_t params, int64_t act, int64_t bnd, double fwd) {
  cost::LayerProfile p;
  p.name = name;
  p.parameter_bytes = params;
  p.activation_bytes_per_sample = act;
  p.boundary_bytes_per_sample = bnd;
  p.forward_seconds_per_sample = fwd;
  p.backward_seconds_per_sample = 2 * fwd;
  p.tp_comm_bytes_per_sample = 2 * bnd;
  return p;
}

// `encoders` layers with large activations then `decoders` layers with large parameters.
inline cost::LayerModel TwoTypeModel(int encoders, int decoders) {
  cost::LayerModel m;
  m.name = "two-type";
  for (int i = 0; i < encoders; ++i) m.layers.push_back(Profile("enc", 40'000'000, 30'000'000, 2'000'000, 2e-3));
  for (int i = 0; i < decoders; ++i) m.layers.push_back(Profile("dec", 90'000'000, 6'000'000, 1'000'000, 1.2e-3));
  for (cost::LayerProfile& p : m.layers) {
    p.replicated_parameter_bytes = p.parameter_bytes / 200;  // norms, biases
    p.replicated_activation_bytes_per_sample = p.activation_bytes_per_sample / 4;  // kept whole by TP without SP
  }
  // Megatron: embeddings with the first layer (vocabulary-parallel: an all-reduce of their output),
  // the head + loss with the last (3 small all-reduces of the cross-entropy, its input gradient).
  m.embedding = Profile("embedding", 60'000'000, 4'000'000, 2'000'000, 5e-4);
  m.embedding.replicated_parameter_bytes = 1'000'000;
  m.embedding.tp_forward_all_reduce_bytes_per_sample = {2'000'000};
  m.embedding.tp_forward_g_operators = 1;  // its output: a reduce-scatter under sequence parallelism
  m.head = Profile("head", 50'000'000, 8'000'000, 1'000'000, 6e-4);
  m.head.replicated_parameter_bytes = 8'000;
  m.head.tp_forward_all_reduce_bytes_per_sample = {4'000, 4'000, 4'000};
  m.head.tp_backward_all_reduce_bytes_per_sample = {1'000'000};
  m.head.tp_backward_f_operators = 1;  // its input gradient
  m.state_bytes_per_parameter_byte = 3.0;
  return m;
}

// One simulated assignment: its peak memory and iteration time.
struct Outcome {
  plan::LayerPlan plan;
  int64_t peak = 0;
  double seconds = 0.0;
};

// Every assignment of LayerStrategies(devices / pp) (micro-batch divisible by dp / cp) to the layers of a
// fixed pipeline `shape` (pp, partition, batch, micro-batches, schedule), judged by SimulateLayerPlan.
inline std::vector<Outcome> AllOutcomes(const cost::LayerModel& model, const cost::Cluster& cluster,
                                        const plan::LayerPlan& shape, const StrategySpaceOptions& space = {}) {
  const cost::CostModel cm = TestCostModel(cluster);
  std::vector<plan::LayerStrategy> options;
  for (const plan::LayerStrategy& s : LayerStrategies(cluster.NumDevices() / shape.pp_degree, space))
    if ((shape.global_batch / shape.micro_batches) % s.Replicas() == 0) options.push_back(s);
  std::vector<Outcome> out;
  if (options.empty()) return out;  // no strategy of the space divides the micro-batch
  plan::LayerPlan p = shape;
  p.layers.assign(model.layers.size(), options.front());
  std::function<void(size_t)> visit = [&](size_t layer) {
    if (layer == model.layers.size()) {
      Result<sim::LayerSimResult> r = sim::SimulateLayerPlan(model, p, cluster, cm);
      if (r) out.push_back({p, r->summary.peak_memory_bytes, r->summary.iteration_seconds});
      return;
    }
    for (const plan::LayerStrategy& s : options) {
      p.layers[layer] = s;
      visit(layer + 1);
    }
  };
  visit(0);
  return out;
}

// The fastest outcome within `budget`, or nullptr.
inline const Outcome* BestWithin(const std::vector<Outcome>& outcomes, int64_t budget) {
  const Outcome* best = nullptr;
  for (const Outcome& o : outcomes)
    if (o.peak <= budget && (!best || o.seconds < best->seconds)) best = &o;
  return best;
}

// Budgets that make the memory constraint bind differently: the smallest peak, the peak of the
// fastest plan, and points in between.
inline std::vector<int64_t> InterestingBudgets(const std::vector<Outcome>& outcomes) {
  int64_t smallest = std::numeric_limits<int64_t>::max();
  const Outcome* fastest = BestWithin(outcomes, std::numeric_limits<int64_t>::max());
  for (const Outcome& o : outcomes) smallest = std::min(smallest, o.peak);
  const int64_t top = fastest ? fastest->peak : smallest;
  return {smallest, smallest + (top - smallest) / 4, smallest + (top - smallest) / 2, top};
}

}  // namespace kiwi::solve::hybrid::testing
