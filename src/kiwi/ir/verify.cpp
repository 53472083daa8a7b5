// VerifyGraph: structural checks (fields, dangling inputs, cycles, explicit order), then the per-kind
// shape checks of verify_rules.cpp. Every error is one line: "<source>: node <id> '<name>': <field>: <problem>".
#include "kiwi/ir/verify.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <queue>

#include "kiwi/ir/verify_rules.h"

namespace kiwi::ir {
namespace {

Error NodeError(std::string_view source, const Node& node, std::string_view field, std::string_view problem) {
  return BadInput(fmt::format("{}: node {} '{}': {}: {}", source, node.id, node.name, field, problem));
}

bool NonNegative(double v) { return std::isfinite(v) && v >= 0.0; }

// Fields that need no other node: id, name, dims, costs, layer.
constexpr int64_t kMaxTensorBytes = int64_t{1} << 50;  // 1 PiB

Status CheckOwnFields(std::string_view source, const Node& n, NodeId index) {
  if (n.id != index) return NodeError(source, n, "id", fmt::format("must equal its index {}", index));
  if (n.name.empty()) return NodeError(source, n, "name", "must not be empty");
  int64_t bytes = DTypeBytes(n.output.dtype);
  for (size_t d = 0; d < n.output.shape.size(); ++d) {
    if (n.output.shape[d] <= 0)
      return NodeError(source, n, fmt::format("output.shape[{}]", d),
                       fmt::format("dim must be positive, got {}", n.output.shape[d]));
    // Checked before anything multiplies dims: sizes, sums of sizes and their doubles stay exact.
    if (__builtin_mul_overflow(bytes, n.output.shape[d], &bytes) || bytes > kMaxTensorBytes)
      return NodeError(source, n, "output.shape", fmt::format("{} is larger than the supported {} bytes per tensor",
                                                              ShapeString(n.output.shape), kMaxTensorBytes));
  }
  if (!NonNegative(n.flops)) return NodeError(source, n, "flops", fmt::format("must be >= 0, got {}", n.flops));
  if (n.bytes_accessed < 0)
    return NodeError(source, n, "bytes_accessed", fmt::format("must be >= 0, got {}", n.bytes_accessed));
  if (n.measured_cost && !NonNegative(*n.measured_cost))
    return NodeError(source, n, "measured_cost", fmt::format("must be >= 0, got {}", *n.measured_cost));
  if (n.layer < -1) return NodeError(source, n, "layer", fmt::format("must be >= -1, got {}", n.layer));
  return Status::Ok();
}

// Inputs in range; grad_of names a forward node (backward ops only; kNoNode allowed for graph files).
Status CheckReferences(std::string_view source, const Graph& g, const Node& n) {
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] < 0 || n.inputs[i] >= g.size())
      return NodeError(source, n, fmt::format("inputs[{}]", i), fmt::format("node {} does not exist", n.inputs[i]));
  if (n.grad_of == kNoNode) return Status::Ok();
  if (!n.is_backward()) return NodeError(source, n, "grad_of", "is set on a forward node");
  if (n.grad_of < 0 || n.grad_of >= g.size())
    return NodeError(source, n, "grad_of", fmt::format("node {} does not exist", n.grad_of));
  if (g.node(n.grad_of).is_backward())
    return NodeError(source, n, "grad_of", fmt::format("node {} '{}' is not a forward node", n.grad_of,
                                                       g.node(n.grad_of).name));
  return Status::Ok();
}

// Walks back from a node left over by Kahn's algorithm through left-over inputs until a node repeats:
// every left-over node has a left-over input, so the walk ends on a cycle.
Error CycleError(std::string_view source, const Graph& g, const std::vector<int>& indegree) {
  NodeId v = 0;
  while (indegree[static_cast<size_t>(v)] == 0) ++v;
  std::vector<int> seen_at(static_cast<size_t>(g.size()), -1);
  std::vector<NodeId> path;
  while (seen_at[static_cast<size_t>(v)] < 0) {
    seen_at[static_cast<size_t>(v)] = static_cast<int>(path.size());
    path.push_back(v);
    NodeId next = kNoNode;
    for (NodeId in : g.node(v).inputs)
      if (indegree[static_cast<size_t>(in)] > 0 && (next == kNoNode || in < next)) next = in;
    v = next;
  }
  std::string cycle;
  for (size_t i = static_cast<size_t>(seen_at[static_cast<size_t>(v)]); i < path.size(); ++i)
    cycle += fmt::format("{} '{}' reads ", path[i], g.node(path[i]).name);
  cycle += fmt::format("{} '{}'", v, g.node(v).name);
  return NodeError(source, g.node(v), "inputs", fmt::format("is on a cycle: {}", cycle));
}

// Kahn's algorithm, smallest ready id first. Fills `indegree` with what is left (non-zero = on or
// after a cycle). Precondition: inputs in range.
std::vector<NodeId> KahnOrder(const Graph& g, std::vector<int>& indegree) {
  const auto n = static_cast<size_t>(g.size());
  indegree.assign(n, 0);
  std::vector<std::vector<NodeId>> readers(n);
  for (const Node& node : g.nodes())
    for (NodeId in : node.inputs) {
      readers[static_cast<size_t>(in)].push_back(node.id);
      ++indegree[static_cast<size_t>(node.id)];
    }
  std::priority_queue<NodeId, std::vector<NodeId>, std::greater<>> ready;
  for (size_t i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.push(static_cast<NodeId>(i));
  std::vector<NodeId> order;
  order.reserve(n);
  while (!ready.empty()) {
    const NodeId v = ready.top();
    ready.pop();
    order.push_back(v);
    for (NodeId r : readers[static_cast<size_t>(v)])
      if (--indegree[static_cast<size_t>(r)] == 0) ready.push(r);
  }
  return order;
}

// The execution order (explicit, or ids ascending) must be a permutation of all nodes with every
// node after its inputs.
Status CheckOrder(std::string_view source, const Graph& g) {
  const std::vector<NodeId> order = g.order();
  std::vector<int> position(static_cast<size_t>(g.size()), -1);
  for (size_t p = 0; p < order.size(); ++p) {
    const NodeId id = order[p];
    if (id < 0 || id >= g.size())
      return BadInput(fmt::format("{}: order[{}]: node {} does not exist", source, p, id));
    int& pos = position[static_cast<size_t>(id)];
    if (pos >= 0)
      return NodeError(source, g.node(id), "order", fmt::format("appears twice (order[{}] and order[{}])", pos, p));
    pos = static_cast<int>(p);
  }
  for (const Node& n : g.nodes()) {
    const int pos = position[static_cast<size_t>(n.id)];
    if (pos < 0) return NodeError(source, n, "order", "is missing from the order");
    for (NodeId in : n.inputs)
      if (position[static_cast<size_t>(in)] > pos)
        return NodeError(source, n, "order",
                         fmt::format("runs at order[{}], before its input {} '{}' at order[{}]", pos, in,
                                     g.node(in).name, position[static_cast<size_t>(in)]));
  }
  return Status::Ok();
}

}  // namespace

Status VerifyGraph(const Graph& graph, std::string_view source) {
  for (const Node& n : graph.nodes()) {
    KIWI_RETURN_IF_ERROR(CheckOwnFields(source, n, static_cast<NodeId>(&n - graph.nodes().data())));
    KIWI_RETURN_IF_ERROR(CheckReferences(source, graph, n));
  }
  std::vector<int> left;
  if (KahnOrder(graph, left).size() != static_cast<size_t>(graph.size())) return CycleError(source, graph, left);
  KIWI_RETURN_IF_ERROR(CheckOrder(source, graph));
  // A captured program's shapes are PyTorch's (Operands::kStorages): only its structure is kiwi's to check.
  if (graph.operands() == Operands::kStorages) return Status::Ok();
  for (const Node& n : graph.nodes())
    if (std::optional<internal::Problem> p = internal::CheckNodeShapes(graph, n))
      return NodeError(source, n, p->field, p->what);
  return Status::Ok();
}

std::optional<std::vector<NodeId>> TopologicalOrder(const Graph& graph) {
  for (const Node& n : graph.nodes())
    for (NodeId in : n.inputs)
      if (in < 0 || in >= graph.size()) return std::nullopt;
  std::vector<int> left;
  std::vector<NodeId> order = KahnOrder(graph, left);
  if (order.size() != static_cast<size_t>(graph.size())) return std::nullopt;
  return order;
}

}  // namespace kiwi::ir
