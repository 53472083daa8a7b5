#pragma once
// The training graph: operators, each producing one tensor, in one container.
//
//   Graph g("tiny");
//   Node x;  x.name = "x";  x.kind = OpKind::kInput;      x.output = {DType::kF32, {8, 16}};
//   Node w;  w.name = "w";  w.kind = OpKind::kParameter;  w.output = {DType::kF32, {16, 4}};
//   Node y;  y.name = "y";  y.kind = OpKind::kMatmul;     y.output = {DType::kF32, {8, 4}};
//   y.inputs = {g.Add(x), g.Add(w)};
//   g.Add(y);
//   AnnotateFlopsAndBytes(g);    // ir/annotate.h
//   Status s = VerifyGraph(g);   // ir/verify.h
//
// Node ids are indices into the graph. The execution order is `order()`: the node ids ascending
// unless set_order() gave another topological order (e.g. a random-layered graph's `order`).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiwi/ir/op_kind.h"
#include "kiwi/ir/tensor.h"
#include "kiwi/util/result.h"

namespace kiwi::ir {

using NodeId = int32_t;
inline constexpr NodeId kNoNode = -1;

enum class Pass : uint8_t { kForward, kBackward };

// Attributes some kinds need; the rest ignore them.
struct OpAttrs {
  bool transpose_a = false;   // matmul/batch_matmul: use A^T (last two dims swapped)
  bool transpose_b = false;   // matmul/batch_matmul: use B^T
  std::vector<int> axes;      // reduce: reduced dims; transpose: the permutation
  int64_t stride = 1;         // conv/pool
  int64_t padding = 0;        // conv/pool
  int64_t window = 1;         // pool window (and conv kernel is read from the weight)
  double dropout_p = 0.0;     // random: drop probability
  bool causal = false;        // attention: each query attends to the keys up to its own position
  bool operator==(const OpAttrs&) const = default;
};

struct Node {
  NodeId id = kNoNode;             // set by Graph::Add
  std::string name;
  OpKind kind = OpKind::kOpaque;
  std::string op;                  // specific operation within the kind ("gelu", "add", ...); may be empty
  Pass pass = Pass::kForward;
  TensorType output;
  std::vector<NodeId> inputs;
  double flops = 0.0;              // floating-point operations of one execution
  int64_t bytes_accessed = 0;      // bytes read + written by one execution
  std::optional<double> measured_cost;  // profiled cost from a graph file (that file's unit)
  NodeId grad_of = kNoNode;        // backward ops: the forward op whose gradient rule emitted it
  int32_t layer = -1;              // index into the layer view; -1 = not part of a layer
  std::string scope;               // e.g. "layer3.attn", for reports and heuristics
  OpAttrs attrs;

  bool is_backward() const { return pass == Pass::kBackward; }
  // Parameters and optimizer state stay resident for the whole iteration.
  bool is_persistent() const { return kind == OpKind::kParameter || kind == OpKind::kOptimizerState; }
};

// What a node's inputs are. kTensors: kiwi's own operators, whose operand shapes the verifier checks
// per kind (verify_rules.cpp). kStorages: a program captured from PyTorch (kiwi.torch.capture_joint),
// where a node is an ATen operator or one version of a storage it writes, and its inputs are the
// storages it reads, views folded into their base: the shapes were computed by PyTorch's own meta
// functions, so only the graph's structure is checked, and kiwi's gradient rules and operator
// sharding (which need its operators' shapes) refuse such a graph.
enum class Operands { kTensors, kStorages };

class Graph {
 public:
  explicit Graph(std::string name = "") : name_(std::move(name)) {}

  // Appends a node; its id becomes its index. Inputs must name existing or later-added nodes;
  // VerifyGraph checks everything, Add checks nothing.
  NodeId Add(Node node);

  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  bool empty() const { return nodes_.empty(); }
  const Node& node(NodeId id) const { return nodes_.at(static_cast<size_t>(id)); }
  Node& mutable_node(NodeId id) { return nodes_.at(static_cast<size_t>(id)); }
  std::span<const Node> nodes() const { return nodes_; }

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // Execution order: every node once, each after its inputs (checked by VerifyGraph).
  std::vector<NodeId> order() const;
  bool has_explicit_order() const { return !order_.empty(); }
  void set_order(std::vector<NodeId> order) { order_ = std::move(order); }

  Operands operands() const { return operands_; }
  void set_operands(Operands operands) { operands_ = operands; }

  int64_t NumEdges() const;                         // sum of input-list lengths
  std::vector<std::vector<NodeId>> Consumers() const;  // consumers[i]: nodes reading i, ascending, unique
  int64_t NumNodes(Pass pass) const;

 private:
  std::string name_;
  std::vector<Node> nodes_;
  std::vector<NodeId> order_;  // empty = ids ascending
  Operands operands_ = Operands::kTensors;
};

// BadInput naming `what` when `graph` holds storages, not kiwi's operators: for the passes that need
// operator shapes (gradient rules, the layer view, operator sharding).
Status RequireTensorOperands(const Graph& graph, std::string_view what);

}  // namespace kiwi::ir
