#pragma once
// Helpers shared by the sharding strategy and lowering tests: a device, meshes, small graphs.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/annotate.h"
#include "kiwi/ir/graph.h"
#include "kiwi/ir/mesh.h"
#include "kiwi/models/presets.h"

namespace kiwi::solve::sharding::test_util {

// A roofline device: 10 TFLOP/s in f32, 1 TB/s memory.
inline const cost::CostModel& Costs() {
  static const cost::CostModel cm = [] {
    cost::DeviceSpec d;
    d.name = "test-device";
    d.SetPeakFlops(ir::DType::kF32, 10e12);
    d.memory_bytes = int64_t{16} << 30;
    d.memory_bandwidth = 1e12;
    return cost::CostModel(d);
  }();
  return cm;
}

// 2 nodes x 4 devices: a slow outer axis (inter-node), a fast inner one (NVLink), as in KIWI's (2, 4).
inline ir::DeviceMesh Mesh2x4() {
  return {{{2, 12.5e9, 5e-6, "infiniband"}, {4, 100e9, 1e-6, "nvlink"}}};
}
inline ir::DeviceMesh Mesh1d(int devices) { return {{{devices, 100e9, 1e-6, "nvlink"}}}; }

inline ir::Node MakeNode(std::string name, ir::OpKind kind, std::string op, ir::Shape shape,
                         std::vector<ir::NodeId> inputs) {
  ir::Node n;
  n.name = std::move(name);
  n.kind = kind;
  n.op = std::move(op);
  n.output = {ir::DType::kF32, std::move(shape)};
  n.inputs = std::move(inputs);
  return n;
}

// x[m, k] (input) x w[k, n] (parameter) -> y[m, n]; y is node 2.
inline ir::Graph MatmulGraph(int64_t m, int64_t k, int64_t n) {
  ir::Graph g("matmul");
  g.Add(MakeNode("x", ir::OpKind::kInput, "input", {m, k}, {}));
  g.Add(MakeNode("w", ir::OpKind::kParameter, "parameter", {k, n}, {}));
  g.Add(MakeNode("y", ir::OpKind::kMatmul, "matmul", {m, n}, {0, 1}));
  ir::AnnotateFlopsAndBytes(g);
  return g;
}

// A transformer training graph from the model zoo (hidden 64, 4 heads, sequence 16, batch 8), small
// enough for exhaustive checks; without embeddings and head when asked (the KIWI paper's setting).
inline ir::Graph SmallZooTransformer(const std::string& family, int layers, bool embeddings = true,
                                     models::AttentionKernel attention = models::AttentionKernel::kAuto) {
  models::ModelOverrides o;
  o.attention = attention;
  o.layers = layers;
  o.hidden = 64;
  o.heads = 4;
  o.seq = 16;
  o.batch = 8;
  Result<models::ModelSpec> spec = models::LoadModel(family, o);
  EXPECT_TRUE(spec.ok()) << spec.error().message;
  if (!spec.ok()) return ir::Graph{};
  std::get<models::TransformerConfig>(spec->config).embeddings = embeddings;
  Result<ir::Graph> g = models::BuildTrainingGraph(*spec);
  EXPECT_TRUE(g.ok()) << g.error().message;
  return g.ok() ? *std::move(g) : ir::Graph{};
}

// A GPT training graph with embeddings.
inline ir::Graph SmallGpt(int layers) { return SmallZooTransformer("gpt", layers); }

}  // namespace kiwi::solve::sharding::test_util
