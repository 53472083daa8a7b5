#include "kiwi/ir/graph.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace kiwi::ir {

NodeId Graph::Add(Node node) {
  node.id = size();
  nodes_.push_back(std::move(node));
  return nodes_.back().id;
}

std::vector<NodeId> Graph::order() const {
  if (!order_.empty()) return order_;
  std::vector<NodeId> ids(nodes_.size());
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

Status RequireTensorOperands(const Graph& graph, std::string_view what) {
  if (graph.operands() == Operands::kTensors) return Status::Ok();
  return BadInput(fmt::format("{}: {} needs kiwi's own operators; this graph was captured from PyTorch "
                              "(\"operands\": \"storages\"): plan its rematerialization, or build the model in kiwi",
                              graph.name().empty() ? "graph" : graph.name(), what));
}

int64_t Graph::NumEdges() const {
  int64_t n = 0;
  for (const Node& node : nodes_) n += static_cast<int64_t>(node.inputs.size());
  return n;
}

std::vector<std::vector<NodeId>> Graph::Consumers() const {
  std::vector<std::vector<NodeId>> consumers(nodes_.size());
  for (const Node& node : nodes_) {
    for (NodeId in : node.inputs) {
      if (in < 0 || in >= size()) continue;  // dangling: reported by VerifyGraph
      auto& list = consumers[static_cast<size_t>(in)];
      if (list.empty() || list.back() != node.id) list.push_back(node.id);
    }
  }
  for (auto& list : consumers) {
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }
  return consumers;
}

int64_t Graph::NumNodes(Pass pass) const {
  return std::count_if(nodes_.begin(), nodes_.end(), [pass](const Node& n) { return n.pass == pass; });
}

}  // namespace kiwi::ir
