// LayerSubgraph: a training graph's layer cut out, its outside operands turned into inputs.
#include "kiwi/ir/layer_subgraph.h"

#include <fmt/format.h>

#include <vector>

namespace kiwi::ir {

Result<Graph> LayerSubgraph(const Graph& training, int32_t layer) {
  const std::string source = training.name().empty() ? "graph" : training.name();
  KIWI_RETURN_IF_ERROR(RequireTensorOperands(training, "a layer's subgraph"));
  std::vector<NodeId> members;  // the layer's nodes in the training graph's order
  for (NodeId id : training.order())
    if (training.node(id).layer == layer) members.push_back(id);
  if (layer < 0 || members.empty())
    return BadInput(fmt::format("{}: has no layer {}", source, layer));

  Graph sub(fmt::format("{}.layer{}", source, layer));
  std::vector<NodeId> mapped(static_cast<size_t>(training.size()), kNoNode);
  std::vector<NodeId> order;
  for (NodeId id : members) {
    const Node& n = training.node(id);
    Node copy = n;
    for (NodeId& input : copy.inputs) {
      if (mapped[static_cast<size_t>(input)] == kNoNode) {  // read from outside the layer: an input
        const Node& outside = training.node(input);
        Node in;
        in.name = fmt::format("in.{}", outside.name);
        in.kind = OpKind::kInput;
        in.pass = n.pass;  // the gradient from the next layer arrives in the backward pass
        in.output = outside.output;
        in.layer = layer;
        in.scope = n.scope;
        const NodeId added = sub.Add(std::move(in));
        mapped[static_cast<size_t>(input)] = added;
        order.push_back(added);
      }
      input = mapped[static_cast<size_t>(input)];
    }
    // The forward op a backward op differentiates, when it is one of the layer's (not an input).
    const bool own = n.grad_of != kNoNode && training.node(n.grad_of).layer == layer;
    copy.grad_of = own ? mapped[static_cast<size_t>(n.grad_of)] : kNoNode;
    const NodeId added = sub.Add(std::move(copy));
    mapped[static_cast<size_t>(id)] = added;
    order.push_back(added);
  }
  sub.set_order(std::move(order));
  return sub;
}

}  // namespace kiwi::ir
