#pragma once
// Helpers shared by the joint (KIWI) tests: small training graphs, problems, random decisions, and the
// simulator check every claim must pass.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kiwi/models/presets.h"
#include "kiwi/sim/simulator.h"
#include "kiwi/solve/joint/problem.h"
#include "sharding_lowering_test_util.h"

namespace kiwi::solve::joint::test_util {

using sharding::test_util::Costs;
using sharding::test_util::Mesh1d;
using sharding::test_util::Mesh2x4;
using sharding::test_util::SmallGpt;

// An MLP training graph (the KIWI paper's Table 1 model, small): widths w0 -> w1 -> ... , SGD. With
// relu (whose gradient reads its output) the reduced family cannot trade memory; with gelu it can.
inline ir::Graph SmallMlp(std::vector<int64_t> widths, int64_t batch, std::string activation = "relu") {
  models::ModelSpec spec;
  spec.name = "mlp";
  models::MlpConfig c;
  c.widths = std::move(widths);
  c.batch = batch;
  c.activation = std::move(activation);
  spec.config = c;
  spec.training.optimizer = ir::Optimizer::kSgd;
  Result<ir::Graph> g = models::BuildTrainingGraph(spec);
  EXPECT_TRUE(g.ok()) << g.error().message;
  return g.ok() ? *std::move(g) : ir::Graph{};
}

// A decoder (GPT) or encoder (BERT) training graph of `layers` layers without embeddings and head, as
// in the KIWI paper's experiments: hidden 64, 4 heads, sequence 16, batch 8.
inline ir::Graph SmallTransformer(const std::string& family, int layers) {
  return sharding::test_util::SmallZooTransformer(family, layers, /*embeddings=*/false);
}

inline JointProblem Problem(const ir::Graph& g, const ir::DeviceMesh& mesh, int64_t budget,
                            JointProblemOptions options = {}) {
  Result<JointProblem> p = MakeJointProblem(g, Costs(), mesh, budget, options);
  EXPECT_TRUE(p.ok()) << p.error().message;
  return p.ok() ? *std::move(p) : JointProblem{};
}

// Each node's first allowed strategy, nothing recomputed.
inline JointSolution FirstAllowed(const JointProblem& p) {
  ir::Solution s;
  for (const std::vector<int32_t>& allowed : p.allowed) s.push_back(allowed.front());
  return WithoutRecompute(s);
}

// Random allowed strategies and a random recompute set respecting eq. 9.
inline JointSolution RandomSolution(const JointProblem& p, std::mt19937& rng, double recompute_probability = 0.5) {
  JointSolution s{ir::Solution(p.allowed.size()), std::vector<uint8_t>(p.allowed.size(), 0)};
  for (size_t v = 0; v < p.allowed.size(); ++v)
    s.strategy[v] = p.allowed[v][std::uniform_int_distribution<size_t>(0, p.allowed[v].size() - 1)(rng)];
  std::bernoulli_distribution coin(recompute_probability);
  for (ir::NodeId v = 0; v < p.graph->size(); ++v) {
    if (!p.timing[static_cast<size_t>(v)].candidate || !coin(rng)) continue;
    bool free = true;
    for (ir::NodeId in : p.graph->node(v).inputs) free = free && !s.recompute[static_cast<size_t>(in)];
    if (free) s.recompute[static_cast<size_t>(v)] = 1;
  }
  return s;
}

inline sim::SimResult Simulate(const JointProblem& p, const plan::OperatorPlan& plan) {
  Result<sim::SimResult> r = sim::SimulateOperatorPlan(*p.graph, plan, Costs(), p.mesh);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *std::move(r) : sim::SimResult{};
}

// The rounding of every node and edge cost to whole units, plus float noise.
inline double Tolerance(const JointProblem& p, double seconds) {
  return 0.5 * 2.0 * static_cast<double>(p.lowered.problem.nodes.size() + p.lowered.problem.edges.size()) *
             p.lowered.seconds_per_unit + 1e-9 * seconds;
}

}  // namespace kiwi::solve::joint::test_util
