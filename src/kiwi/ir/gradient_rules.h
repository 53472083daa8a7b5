#pragma once
// Internal to ir/backward.cpp: the gradient rules, one small handler per forward (kind, op), and the
// context through which a rule emits backward ops. A rule reads only what its gradient formula needs
// (the briefing's op vocabulary): the context passes the upstream gradient dY and the forward
// tensors; a rule names neither nodes nor passes, the context does (see backward.cpp).
#include <string>
#include <string_view>
#include <vector>

#include "kiwi/ir/graph.h"

namespace kiwi::ir::internal {

struct BackwardState;  // backward.cpp: the training graph under construction

class GradContext {
 public:
  GradContext(BackwardState& state, NodeId op, NodeId dy);

  const Node& op() const;                    // the forward op being differentiated
  NodeId dy() const { return dy_; }          // gradient of its output (kNoNode for the loss)
  NodeId in(size_t slot) const { return op().inputs[slot]; }
  size_t arity() const { return op().inputs.size(); }
  const TensorType& type(size_t slot) const;  // the operand's tensor type
  bool needs(size_t slot) const;             // the operand depends on a parameter and reaches the loss
  int given(size_t slot) const { return given_[slot]; }

  // The operand's gradient is `grad` (kind, op, inputs, attrs and output set by the rule). If grad's
  // shape is the op's broadcast output shape rather than the operand's, a reduce "sum" follows.
  void Give(size_t slot, Node grad);
  // A tensor the rule computes on the way to the operand's gradient, named "<gradient>.<part>".
  NodeId Helper(size_t slot, std::string_view part, Node node);
  // The operand's gradient is dY itself (add, sub's first operand, matmul bias), reduced if broadcast.
  void PassThrough(size_t slot);
  // The operand's gradient is -dY (sub's second operand): reduce if broadcast, then "scale".
  void GiveNegated(size_t slot);
  // The operand's gradient is dY summed over `axes` (conv bias: axes {0, 2, 3}).
  void GiveSum(size_t slot, std::vector<int> axes);

 private:
  std::string ContributionName(size_t slot) const;
  NodeId Emit(Node node);
  NodeId ReduceTo(NodeId full, size_t slot, const std::string& name);
  void Contribute(size_t slot, NodeId grad);

  BackwardState& state_;
  NodeId op_;
  NodeId dy_;
  std::vector<int> given_;
};

using GradFn = void (*)(GradContext&);

// A node with the given fields and defaults elsewhere (designated initializers that omit fields trip
// -Wmissing-field-initializers in g++ 12).
Node MakeOp(std::string name, OpKind kind, std::string op, TensorType output, std::vector<NodeId> inputs,
            std::vector<int> axes = {});

// The rule for a forward op; nullptr when there is none. An empty op string means the kind's
// canonical op (matmul, conv2d, softmax, layernorm, ...), where the kind has one.
GradFn FindGradRule(OpKind kind, std::string_view op);

}  // namespace kiwi::ir::internal
