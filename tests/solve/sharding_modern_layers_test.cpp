// Issue 19 item 6: the operator-level planners (kiwi joint; the IOPDDL lowering, which takes the same
// strategies) reach the sequence- and expert-dimension shardings 2025's layers need, from the generic
// loop nests of solve/sharding/op_indexing.cpp: on Llama (grouped-query fused attention), Mixtral and
// Qwen3-MoE graphs every op with a tensor has a split; norms and element-wise ops split the sequence
// (Megatron SP); fused attention splits its queries' sequence with K and V whole (all-gather context
// parallelism, Llama 3's) and its heads (TP); expert matmuls split the expert dim of both operands
// (expert parallelism); the dispatch gathers expert-split rows from token-split tokens, its partial
// rows reduce-scattered onto the experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/models/presets.h"
#include "kiwi/solve/sharding/strategies.h"

namespace kiwi::solve::sharding {
namespace {

struct Zoo {
  ir::Graph graph;
  cost::CostModel cost_model;
  ir::DeviceMesh mesh;
};

Zoo Build(const std::string& family) {
  models::ModelOverrides o;
  o.layers = 1;
  o.batch = 2;
  o.seq = 16;
  o.hidden = 128;
  o.heads = 8;
  o.vocab = 128;
  if (family != "llama") o.ffn = 32;
  Result<models::ModelSpec> spec = models::LoadModel(family, o);
  EXPECT_TRUE(spec.ok()) << spec.error().message;
  Result<ir::Graph> g = models::BuildTrainingGraph(*spec);
  EXPECT_TRUE(g.ok()) << g.error().message;
  Result<cost::Cluster> cluster = cost::ClusterPreset("dgx-h100");
  Result<ir::DeviceMesh> mesh = cluster->MakeMesh({2, 4});
  EXPECT_TRUE(mesh.ok());
  return {*std::move(g), cost::CostModel{cluster->device}, *std::move(mesh)};
}

std::vector<std::string> StrategyNames(const Zoo& z, const std::string& node) {
  std::vector<std::string> names;
  for (const ir::Node& n : z.graph.nodes())
    if (n.name == node)
      for (const Strategy& s : EnumerateStrategies(z.graph, n, z.cost_model, z.mesh, {})) names.push_back(s.sharding.strategy);
  EXPECT_FALSE(names.empty()) << "no node " << node;
  return names;
}

bool Has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(ShardingModernLayers, EveryOpWithATensorHasASplit) {
  for (const std::string family : {"llama", "mixtral-8x7b", "qwen3-30b-a3b"}) {
    const Zoo z = Build(family);
    for (const ir::Node& n : z.graph.nodes()) {
      if (n.output.Rank() == 0) continue;
      EXPECT_GT(EnumerateStrategies(z.graph, n, z.cost_model, z.mesh, {}).size(), 1u) << family << " " << n.name;
    }
  }
}

TEST(ShardingModernLayers, SequenceSplitsOfNormsAndAttention) {
  const Zoo z = Build("llama");
  const std::vector<std::string> norm = StrategyNames(z, "layer0.attn.norm");  // [b, s, h] x gamma[h]
  EXPECT_TRUE(Has(norm, "RS1R = RS1R x R")) << "sequence over axis 1 (SP)";
  EXPECT_TRUE(Has(norm, "S0S1R = S0S1R x R")) << "batch over axis 0, sequence over axis 1";
  const std::vector<std::string> attention = StrategyNames(z, "layer0.attn.attention");  // q, k, v [b, heads, s, d]
  EXPECT_TRUE(Has(attention, "RRS1R = RRS1R x RRRR x RRRR")) << "queries' sequence split, K and V whole (CP)";
  EXPECT_TRUE(Has(attention, "RS1RR = RS1RR x RS1RR x RS1RR")) << "heads split (TP)";
  EXPECT_TRUE(Has(attention, "S0RS1R = S0RS1R x S0RRR x S0RRR")) << "batch (DP) beside a query split";
}

TEST(ShardingModernLayers, ExpertSplitsOfMixtureOfExperts) {
  for (const std::string family : {"mixtral-8x7b", "qwen3-30b-a3b"}) {
    const Zoo z = Build(family);
    // experts.up: [E, C, f] = [E, C, h] x [E, h, f]; the expert dim over axis 0 on both operands (EP),
    // and beside it the ffn dim over axis 1 (expert TP)
    const std::vector<std::string> up = StrategyNames(z, "layer0.mlp.experts.up");
    EXPECT_TRUE(Has(up, "S0RR = S0RR x S0RR")) << family;
    EXPECT_TRUE(Has(up, "S0RS1 = S0RR x S0RS1")) << family;
    // dispatch: [E, C, h] gathered from tokens [T, h] by slots [E, C]: expert-split rows from whole
    // tokens, or from token-split tokens with the partial rows reduce-scattered onto the experts
    const std::vector<std::string> dispatch = StrategyNames(z, "layer0.mlp.dispatch");
    EXPECT_TRUE(Has(dispatch, "S0RR = RR x S0R")) << family;
    EXPECT_TRUE(Has(dispatch, "S01RR = S1R x S0R (reduce-scatter@1)")) << family;
    // combine: tokens [T, h] summed over the experts' rows: expert-split rows, partial sums reduced
    const std::vector<std::string> combined = StrategyNames(z, "layer0.mlp.combined");
    EXPECT_TRUE(Has(combined, "S0R = RS0R (reduce-scatter@0)")) << family;
  }
}

}  // namespace
}  // namespace kiwi::solve::sharding
