// BuildTrainingGraph: reverse-mode differentiation of a forward graph through the rules of
// gradient_rules.cpp, then the optimizer update. Backward node names (stable, for profiles and tests):
//   "<t>.grad"       the gradient of forward tensor t when one op contributes to it, or the n-ary
//                    "add" summing all contributions when several do;
//   "<t>.grad.<k>"   the k-th contribution (k = 0, 1, ... in emission order) when several do;
//   "<g>.full"       a gradient with the op's broadcast shape, before the reduce "sum" named <g>;
//   "<g>.sum"        the reduce before a reshape named <g> (that restores size-1 dims); sub's second
//                    operand: the reduced dY ("<g>.sum", possibly via "<g>.sum.sum") before the "scale" <g>;
//   "<g>.<part>"     a tensor a rule computes on the way to gradient <g> (cross entropy's "<g>.nll");
//   "<p>.adam_m", "<p>.adam_v", "<p>.master", "optimizer".
// Pass-through gradients (add, sub's first operand) add no node: the operand's contribution is dY.
#include "kiwi/ir/backward.h"

#include <fmt/format.h>

#include <algorithm>

#include "kiwi/ir/annotate.h"
#include "kiwi/ir/gradient_rules.h"
#include "kiwi/ir/verify.h"

namespace kiwi::ir {
namespace internal {

Node MakeOp(std::string name, OpKind kind, std::string op, TensorType output, std::vector<NodeId> inputs,
            std::vector<int> axes) {
  Node n;
  n.name = std::move(name);
  n.kind = kind;
  n.op = std::move(op);
  n.output = std::move(output);
  n.inputs = std::move(inputs);
  n.attrs.axes = std::move(axes);
  return n;
}

struct BackwardState {
  const Graph& forward;
  Graph out;
  std::vector<bool> has_grad;                     // depends on a parameter and reaches the loss
  std::vector<int> expected;                      // gradient contributions each tensor will receive
  std::vector<std::vector<NodeId>> contributions; // emitted so far, per forward tensor
  std::vector<NodeId> grad;                       // final gradient of each forward tensor
};

GradContext::GradContext(BackwardState& state, NodeId op, NodeId dy)
    : state_(state), op_(op), dy_(dy), given_(state.forward.node(op).inputs.size(), 0) {}

const Node& GradContext::op() const { return state_.forward.node(op_); }
const TensorType& GradContext::type(size_t slot) const { return state_.forward.node(in(slot)).output; }
bool GradContext::needs(size_t slot) const { return state_.has_grad[static_cast<size_t>(in(slot))]; }

std::string GradContext::ContributionName(size_t slot) const {
  const auto t = static_cast<size_t>(in(slot));
  const std::string& name = state_.forward.node(in(slot)).name;
  if (state_.expected[t] == 1) return name + ".grad";
  return fmt::format("{}.grad.{}", name, state_.contributions[t].size());
}

// Backward ops inherit layer and scope from the forward op whose rule emits them.
NodeId GradContext::Emit(Node node) {
  node.pass = Pass::kBackward;
  node.grad_of = op_;
  node.layer = op().layer;
  node.scope = op().scope;
  return state_.out.Add(std::move(node));
}

void GradContext::Contribute(size_t slot, NodeId grad) {
  state_.contributions[static_cast<size_t>(in(slot))].push_back(grad);
  ++given_[slot];
}

// Sums a broadcast gradient back to the operand's shape (numpy broadcasting in reverse): leading
// dims are removed, size-1 dims of the operand are summed; a reshape restores size-1 dims when both happen.
NodeId GradContext::ReduceTo(NodeId full, size_t slot, const std::string& name) {
  const Shape from = state_.out.node(full).output.shape;
  const TensorType& to = type(slot);
  const size_t lead = from.size() - to.shape.size();
  std::vector<int> axes;
  Shape removed;
  for (size_t j = 0; j < from.size(); ++j) {
    if (j < lead || (to.shape[j - lead] == 1 && from[j] != 1))
      axes.push_back(static_cast<int>(j));
    else
      removed.push_back(from[j]);
  }
  const bool one_step = lead == 0 || removed == to.shape;  // keep-dims form or removed form is the operand
  const TensorType sum_type = one_step ? to : TensorType{to.dtype, removed};
  const NodeId sum =
      Emit(MakeOp(one_step ? name : name + ".sum", OpKind::kReduce, "sum", sum_type, {full}, std::move(axes)));
  if (one_step) return sum;
  return Emit(MakeOp(name, OpKind::kReshape, "reshape", to, {sum}));
}

void GradContext::Give(size_t slot, Node grad) {
  const std::string name = ContributionName(slot);
  if (grad.output.shape == type(slot).shape) {
    grad.name = name;
    Contribute(slot, Emit(std::move(grad)));
    return;
  }
  grad.name = name + ".full";
  const NodeId full = Emit(std::move(grad));
  Contribute(slot, ReduceTo(full, slot, name));
}

NodeId GradContext::Helper(size_t slot, std::string_view part, Node node) {
  node.name = fmt::format("{}.{}", ContributionName(slot), part);
  return Emit(std::move(node));
}

void GradContext::PassThrough(size_t slot) {
  if (state_.out.node(dy_).output.shape == type(slot).shape) {
    Contribute(slot, dy_);
    return;
  }
  Contribute(slot, ReduceTo(dy_, slot, ContributionName(slot)));
}

void GradContext::GiveNegated(size_t slot) {
  const std::string name = ContributionName(slot);
  NodeId base = dy_;
  if (state_.out.node(dy_).output.shape != type(slot).shape) base = ReduceTo(dy_, slot, name + ".sum");
  Contribute(slot, Emit(MakeOp(name, OpKind::kElementwise, "scale", type(slot), {base})));
}

void GradContext::GiveSum(size_t slot, std::vector<int> axes) {
  Contribute(slot, Emit(MakeOp(ContributionName(slot), OpKind::kReduce, "sum", type(slot), {dy_}, std::move(axes))));
}

}  // namespace internal

namespace {

using internal::BackwardState;

Error NodeError(const std::string& source, const Node& n, std::string_view field, std::string_view problem) {
  return BadInput(fmt::format("{}: node {} '{}': {}: {}", source, n.id, n.name, field, problem));
}

// A forward-only graph with exactly one loss; returns the loss.
Result<NodeId> FindLoss(const Graph& g, const std::string& source) {
  NodeId loss = kNoNode;
  for (const Node& n : g.nodes()) {
    if (n.is_backward()) return NodeError(source, n, "pass", "backward node in a forward graph");
    if (n.kind == OpKind::kOptimizer || n.kind == OpKind::kOptimizerState)
      return NodeError(source, n, "kind", fmt::format("{} node in a forward graph", OpKindName(n.kind)));
    if (n.kind != OpKind::kLoss) continue;
    if (loss != kNoNode)
      return NodeError(source, n, "kind", fmt::format("a second loss node (the first is node {} '{}')", loss,
                                                      g.node(loss).name));
    loss = n.id;
  }
  if (loss == kNoNode) return BadInput(fmt::format("{}: no loss node (kind 'loss'): nothing to differentiate", source));
  return loss;
}

// has_grad = depends on a parameter through floating tensors (forward sweep) and reaches the loss
// (backward sweep).
Status MarkGradients(const Graph& g, NodeId loss, const std::string& source, BackwardState& s) {
  const std::vector<NodeId> order = g.order();
  const auto n = static_cast<size_t>(g.size());
  std::vector<bool> depends(n, false), reaches(n, false);
  for (NodeId id : order) {
    const Node& node = g.node(id);
    // An integer tensor (a router's top-k indices) is not differentiable: no gradient flows through it.
    depends[static_cast<size_t>(id)] =
        node.kind == OpKind::kParameter ||
        (IsFloating(node.output.dtype) && std::any_of(node.inputs.begin(), node.inputs.end(),
                                                      [&](NodeId in) { return depends[static_cast<size_t>(in)]; }));
  }
  // Gradients flow back through floating tensors only: an integer op (top-k indices) passes none on.
  reaches[static_cast<size_t>(loss)] = true;
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    if (reaches[static_cast<size_t>(*it)] && (*it == loss || IsFloating(g.node(*it).output.dtype)))
      for (NodeId in : g.node(*it).inputs) reaches[static_cast<size_t>(in)] = true;
  if (!depends[static_cast<size_t>(loss)])
    return NodeError(source, g.node(loss), "inputs", "the loss depends on no parameter");
  s.has_grad.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    s.has_grad[i] = depends[i] && reaches[i];
    const Node& node = g.node(static_cast<NodeId>(i));
    if (node.kind == OpKind::kParameter && !IsFloating(node.output.dtype))
      return NodeError(source, node, "output.dtype",
                       fmt::format("a parameter of dtype {} gets no gradient (integer tensors are not differentiable)",
                                   DTypeName(node.output.dtype)));
    if (node.kind == OpKind::kParameter && !reaches[i])
      return NodeError(source, node, "kind", "parameter does not affect the loss (it would get no gradient)");
  }
  s.expected.assign(n, 0);
  for (const Node& node : g.nodes())
    if (s.has_grad[static_cast<size_t>(node.id)])
      for (NodeId in : node.inputs)
        if (s.has_grad[static_cast<size_t>(in)]) ++s.expected[static_cast<size_t>(in)];
  return Status::Ok();
}

// The gradient of t: its only contribution, or an n-ary add (grad_of = t) summing several.
NodeId Accumulate(BackwardState& s, NodeId t) {
  const std::vector<NodeId>& parts = s.contributions[static_cast<size_t>(t)];
  if (parts.size() == 1) return parts[0];
  const Node& f = s.forward.node(t);
  Node sum = internal::MakeOp(f.name + ".grad", OpKind::kElementwise, "add", f.output, parts);
  sum.pass = Pass::kBackward;
  sum.grad_of = t;
  sum.layer = f.layer;
  sum.scope = f.scope;
  return s.out.Add(std::move(sum));
}

Status Differentiate(BackwardState& s, NodeId id, NodeId loss, const std::string& source) {
  if (!s.has_grad[static_cast<size_t>(id)]) return Status::Ok();
  const Node& node = s.forward.node(id);
  const NodeId dy = id == loss ? kNoNode : Accumulate(s, id);
  s.grad[static_cast<size_t>(id)] = dy;
  if (node.kind == OpKind::kParameter) return Status::Ok();
  const internal::GradFn rule = internal::FindGradRule(node.kind, node.op);
  if (rule == nullptr)
    return NodeError(source, node, "op", fmt::format("no gradient rule for {} '{}'", OpKindName(node.kind), node.op));
  internal::GradContext ctx(s, id, dy);
  rule(ctx);
  for (size_t slot = 0; slot < node.inputs.size(); ++slot)
    if (ctx.needs(slot) && ctx.given(slot) == 0)
      return NodeError(source, node, fmt::format("inputs[{}]", slot),
                       fmt::format("{} '{}' has no gradient for this operand, yet it depends on a parameter",
                                   OpKindName(node.kind), node.op));
  return Status::Ok();
}

NodeId AddState(Graph& out, const Node& param, const char* what) {
  Node state = internal::MakeOp(fmt::format("{}.{}", param.name, what), OpKind::kOptimizerState, what,
                                {DType::kF32, param.output.shape}, {});
  state.pass = Pass::kBackward;
  state.scope = "optimizer";
  return out.Add(std::move(state));
}

// Adam: fp32 m and v per parameter; master_weights: an fp32 copy; then one update reading every
// parameter, its final gradient and its states (Kingma & Ba 2015, Alg. 1; mixed precision per
// Micikevicius et al. 2018).
void AddOptimizer(BackwardState& s, const TrainingOptions& options) {
  if (options.optimizer == Optimizer::kNone) return;
  const bool adam = options.optimizer == Optimizer::kAdam || options.optimizer == Optimizer::kFusedAdam;
  std::vector<NodeId> reads;
  for (const Node& p : s.forward.nodes()) {
    if (p.kind != OpKind::kParameter) continue;
    reads.push_back(p.id);
    reads.push_back(s.grad[static_cast<size_t>(p.id)]);
    if (adam) reads.push_back(AddState(s.out, p, "adam_m"));
    if (adam) reads.push_back(AddState(s.out, p, "adam_v"));
    if (options.master_weights) reads.push_back(AddState(s.out, p, "master"));
  }
  Node update =
      internal::MakeOp("optimizer", OpKind::kOptimizer, std::string(OptimizerName(options.optimizer)),
                       {DType::kF32, {}}, std::move(reads));
  update.pass = Pass::kBackward;
  update.scope = "optimizer";
  s.out.Add(std::move(update));
}

}  // namespace

std::optional<Optimizer> ParseOptimizer(std::string_view name) {
  for (Optimizer o : {Optimizer::kAdam, Optimizer::kFusedAdam, Optimizer::kSgd, Optimizer::kNone})
    if (name == OptimizerName(o)) return o;
  return std::nullopt;
}

std::string_view OptimizerName(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kAdam: return "adam";
    case Optimizer::kFusedAdam: return "fused_adam";
    case Optimizer::kSgd: return "sgd";
    case Optimizer::kNone: return "none";
  }
  return "none";
}

Result<Graph> BuildTrainingGraph(const Graph& forward, const TrainingOptions& options) {
  const std::string source = forward.name().empty() ? "forward graph" : forward.name();
  KIWI_RETURN_IF_ERROR(VerifyGraph(forward, source));
  KIWI_RETURN_IF_ERROR(RequireTensorOperands(forward, "the backward graph builder"));
  const Result<NodeId> loss = FindLoss(forward, source);
  if (!loss) return loss.error();
  BackwardState s{forward, forward, {}, {}, {}, {}};
  KIWI_RETURN_IF_ERROR(MarkGradients(forward, *loss, source, s));
  s.contributions.resize(static_cast<size_t>(forward.size()));
  s.grad.assign(static_cast<size_t>(forward.size()), kNoNode);
  const std::vector<NodeId> order = forward.order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) KIWI_RETURN_IF_ERROR(Differentiate(s, *it, *loss, source));
  AddOptimizer(s, options);
  AnnotateFlopsAndBytes(s.out);
  // Optimizer states live across iterations: resident before the forward pass starts (the explicit
  // order runs them first), so every peak of the step counts them, as PyTorch's Adam holds them from
  // its first step on. The rest runs forward, then backward, then the update.
  std::vector<NodeId> full;
  for (NodeId id = forward.size(); id < s.out.size(); ++id)
    if (s.out.node(id).kind == OpKind::kOptimizerState) full.push_back(id);
  if (!full.empty() || forward.has_explicit_order()) {
    full.insert(full.end(), order.begin(), order.end());
    for (NodeId id = forward.size(); id < s.out.size(); ++id)
      if (s.out.node(id).kind != OpKind::kOptimizerState) full.push_back(id);
    s.out.set_order(std::move(full));
  }
  if (Status st = VerifyGraph(s.out, source + " (training)"); !st)
    return Internal("BuildTrainingGraph produced an invalid graph: " + st.error().message);
  return std::move(s.out);
}

int32_t FirstBackwardPosition(const Graph& training, const std::vector<NodeId>& order) {
  for (size_t t = 0; t < order.size(); ++t) {
    const Node& n = training.node(order[t]);
    if (n.is_backward() && !n.is_persistent()) return static_cast<int32_t>(t);
  }
  return static_cast<int32_t>(order.size());
}

std::vector<bool> SavedForBackward(const Graph& training) {
  std::vector<bool> saved(static_cast<size_t>(training.size()), false);
  for (const Node& n : training.nodes())
    if (n.is_backward())
      for (NodeId in : n.inputs)
        if (in >= 0 && in < training.size()) saved[static_cast<size_t>(in)] = true;
  for (const Node& n : training.nodes())
    if (n.is_backward() || n.is_persistent()) saved[static_cast<size_t>(n.id)] = false;
  // A fused attention writes its output in the [B, s, heads, d] order its reader wants, so the
  // transposes and reshapes that merge its heads are views: the output projection's saved input and
  // the attention's saved output are one tensor, counted once, as the view (PyTorch's SDPA and
  // FlashAttention; measured in docs/distributed.md, "What the peak holds").
  auto is_view = [](const Node& n) {  // a kReshape "concat" joins tensors: not a view
    return n.kind == OpKind::kTranspose || (n.kind == OpKind::kReshape && n.inputs.size() == 1);
  };
  for (const Node& n : training.nodes()) {
    if (!saved[static_cast<size_t>(n.id)] || !is_view(n)) continue;
    NodeId root = n.inputs.empty() ? kNoNode : n.inputs[0];
    while (root != kNoNode && is_view(training.node(root)) && !training.node(root).inputs.empty())
      root = training.node(root).inputs[0];
    if (root != kNoNode && training.node(root).kind == OpKind::kAttention) saved[static_cast<size_t>(root)] = false;
  }
  return saved;
}

int64_t SavedActivationBytes(const Graph& training, int32_t layer) {
  const std::vector<bool> saved = SavedForBackward(training);
  int64_t bytes = 0;
  for (const Node& n : training.nodes())
    if (saved[static_cast<size_t>(n.id)] && (layer == -1 || n.layer == layer)) bytes += n.output.Bytes();
  return bytes;
}

std::vector<int64_t> SavedActivationBytesByLayer(const Graph& training, int32_t layers) {
  const std::vector<bool> saved = SavedForBackward(training);
  std::vector<int64_t> bytes(static_cast<size_t>(std::max(layers, 0)), 0);
  for (const Node& n : training.nodes())
    if (saved[static_cast<size_t>(n.id)] && n.layer >= 0 && n.layer < layers)
      bytes[static_cast<size_t>(n.layer)] += n.output.Bytes();
  return bytes;
}

}  // namespace kiwi::ir
