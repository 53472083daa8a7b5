#include "kiwi/ir/layer_subgraph.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "ir_test_util.h"
#include "kiwi/ir/layers.h"
#include "kiwi/ir/verify.h"
#include "kiwi/models/presets.h"

namespace kiwi::ir {
namespace {

Graph SmallGpt() {
  Result<models::ModelSpec> spec =
      models::LoadModel("gpt", {.layers = 3, .hidden = 64, .heads = 4, .seq = 32, .batch = 2, .vocab = 100});
  EXPECT_TRUE(spec.ok()) << testing::ErrorOf(spec);
  Result<Graph> g = models::BuildTrainingGraph(*spec);
  EXPECT_TRUE(g.ok()) << testing::ErrorOf(g);
  return *std::move(g);
}

TEST(LayerSubgraph, HoldsTheLayerWithItsOutsideOperandsAsInputs) {
  const Graph g = SmallGpt();
  Result<LayerView> view = BuildLayerView(g);
  ASSERT_TRUE(view.ok()) << testing::ErrorOf(view);
  Result<Graph> sub = LayerSubgraph(g, 1);
  ASSERT_TRUE(sub.ok()) << testing::ErrorOf(sub);
  EXPECT_TRUE(VerifyGraph(*sub, "subgraph").ok()) << VerifyGraph(*sub, "subgraph").error().message;

  // Every node of layer 1, by name, in the training graph's order; nothing of another layer.
  std::vector<std::string> expected, copied, inputs;
  for (NodeId id : g.order())
    if (g.node(id).layer == 1) expected.push_back(g.node(id).name);
  for (NodeId id : sub->order()) {
    const Node& n = sub->node(id);
    EXPECT_EQ(n.layer, 1) << n.name;
    if (n.name.starts_with("in.") && n.kind == OpKind::kInput) inputs.push_back(n.name.substr(3));
    else copied.push_back(n.name);
  }
  EXPECT_EQ(copied, expected);
  const Layer& l1 = view->layers[1];
  EXPECT_EQ(copied.size(), l1.forward.size() + l1.backward.size());

  // The inputs: exactly the tensors outside layer 1 that its nodes read, each once, with their types;
  // the previous layer's output arrives in the forward pass, the next layer's gradient in the backward.
  std::set<std::string> outside;
  bool forward_input = false, backward_input = false;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.layer != 1) continue;
    for (NodeId in : n.inputs)
      if (g.node(in).layer != 1) outside.insert(g.node(in).name);
  }
  EXPECT_EQ(std::set<std::string>(inputs.begin(), inputs.end()), outside);
  EXPECT_EQ(inputs.size(), outside.size());
  for (const Node& n : sub->nodes()) {
    if (n.kind != OpKind::kInput) continue;
    const std::string original = n.name.substr(3);
    auto it = std::find_if(g.nodes().begin(), g.nodes().end(), [&](const Node& m) { return m.name == original; });
    ASSERT_NE(it, g.nodes().end());
    EXPECT_EQ(n.output, it->output) << n.name;
    (n.is_backward() ? backward_input : forward_input) = true;
    // Placed right before its first reader (with the reader's other inputs from outside).
    const std::vector<std::vector<NodeId>> readers = sub->Consumers();
    ASSERT_FALSE(readers[static_cast<size_t>(n.id)].empty()) << n.name;
    const NodeId first = readers[static_cast<size_t>(n.id)].front();
    for (NodeId between = n.id + 1; between < first; ++between)
      EXPECT_EQ(sub->node(between).kind, OpKind::kInput) << n.name << " then " << sub->node(between).name;
  }
  EXPECT_TRUE(forward_input);
  EXPECT_TRUE(backward_input);
  // Backward ops still name the forward op they differentiate, inside the subgraph.
  for (const Node& n : sub->nodes()) {
    if (n.grad_of != kNoNode) {
      EXPECT_EQ(sub->node(n.grad_of).pass, Pass::kForward) << n.name;
    }
  }
}

TEST(LayerSubgraph, RefusesALayerTheGraphDoesNotHave) {
  const Graph g = SmallGpt();
  testing::ExpectBadInput(LayerSubgraph(g, 3), {"has no layer 3"});
  testing::ExpectBadInput(LayerSubgraph(g, -1), {"has no layer -1"});
}

}  // namespace
}  // namespace kiwi::ir
