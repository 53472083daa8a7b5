// The forward-graph builder and the primitive ops of the IR vocabulary, with shape inference.
#include <algorithm>
#include <utility>

#include "kiwi/ir/annotate.h"
#include "kiwi/ir/verify.h"
#include "kiwi/models/builder.h"

namespace kiwi::models::detail {

using ir::OpKind;
using ir::TensorType;

GraphBuilder::GraphBuilder(std::string graph_name, ir::DType dtype)
    : graph_(std::move(graph_name)), dtype_(dtype) {}

void GraphBuilder::Enter(int32_t layer, std::string scope) {
  layer_ = layer;
  scope_ = std::move(scope);
}

NodeId GraphBuilder::Add(OpKind kind, std::string op, const std::string& name, std::vector<NodeId> inputs,
                         TensorType output, ir::OpAttrs attrs) {
  ir::Node node;
  node.name = scope_.empty() ? name : scope_ + "." + name;
  node.kind = kind;
  node.op = std::move(op);
  node.output = std::move(output);
  node.inputs = std::move(inputs);
  node.layer = layer_;
  node.scope = scope_;
  node.attrs = std::move(attrs);
  return graph_.Add(std::move(node));
}

NodeId GraphBuilder::Input(const std::string& name, ir::DType dtype, Shape shape) {
  return Add(OpKind::kInput, "input", name, {}, {dtype, std::move(shape)});
}

NodeId GraphBuilder::Parameter(const std::string& name, Shape shape) {
  return Add(OpKind::kParameter, "parameter", name, {}, {dtype_, std::move(shape)});
}

Result<ir::Graph> GraphBuilder::Finish() && {
  // Verify first: it bounds tensor sizes before the FLOP formulas multiply them.
  KIWI_RETURN_IF_ERROR(ir::VerifyGraph(graph_, "model " + graph_.name()));
  ir::AnnotateFlopsAndBytes(graph_);
  return std::move(graph_);
}

namespace {

// Numpy broadcasting of two shapes (trailing dims aligned); the inputs are assumed compatible.
Shape Broadcast(const Shape& a, const Shape& b) {
  const Shape& longer = a.size() >= b.size() ? a : b;
  const Shape& shorter = a.size() >= b.size() ? b : a;
  Shape out = longer;
  const size_t offset = longer.size() - shorter.size();
  for (size_t i = 0; i < shorter.size(); ++i) out[offset + i] = std::max(longer[offset + i], shorter[i]);
  return out;
}

// [..., M, K] x [..., K, N] -> [..., M, N] with the batch dims of `a`.
Shape MatmulShape(const Shape& a, const Shape& b, bool transpose_b) {
  Shape out = a;
  out.back() = transpose_b ? b[b.size() - 2] : b.back();
  return out;
}

}  // namespace

NodeId Matmul(GraphBuilder& gb, const std::string& name, NodeId a, NodeId b, NodeId bias, bool transpose_b) {
  std::vector<NodeId> inputs = {a, b};
  if (bias != ir::kNoNode) inputs.push_back(bias);
  ir::OpAttrs attrs;
  attrs.transpose_b = transpose_b;
  return gb.Add(OpKind::kMatmul, "matmul", name, std::move(inputs),
                {gb.dtype(), MatmulShape(gb.shape(a), gb.shape(b), transpose_b)}, attrs);
}

NodeId BatchMatmul(GraphBuilder& gb, const std::string& name, NodeId a, NodeId b, bool transpose_b) {
  ir::OpAttrs attrs;
  attrs.transpose_b = transpose_b;
  return gb.Add(OpKind::kBatchMatmul, "batch_matmul", name, {a, b},
                {gb.dtype(), MatmulShape(gb.shape(a), gb.shape(b), transpose_b)}, attrs);
}

NodeId Binary(GraphBuilder& gb, const std::string& op, const std::string& name, NodeId a, NodeId b) {
  return gb.Add(OpKind::kElementwise, op, name, {a, b}, {gb.dtype(), Broadcast(gb.shape(a), gb.shape(b))});
}

NodeId Unary(GraphBuilder& gb, const std::string& op, const std::string& name, NodeId x) {
  return gb.Add(OpKind::kElementwise, op, name, {x}, {gb.dtype(), gb.shape(x)});
}

NodeId Reshape(GraphBuilder& gb, const std::string& name, NodeId x, Shape shape) {
  return gb.Add(OpKind::kReshape, "reshape", name, {x}, {gb.dtype_of(x), std::move(shape)});
}

NodeId Concat(GraphBuilder& gb, const std::string& name, std::vector<NodeId> parts) {
  Shape out = gb.shape(parts.front());
  out.back() = 0;
  for (NodeId p : parts) {
    const Shape& s = gb.shape(p);
    for (size_t d = 0; d + 1 < s.size(); ++d) out[d] = std::max(out[d], s[d]);
    out.back() += s.back();
  }
  const ir::DType dtype = gb.dtype_of(parts.front());
  return gb.Add(OpKind::kReshape, "concat", name, std::move(parts), {dtype, std::move(out)});
}

NodeId Transpose(GraphBuilder& gb, const std::string& name, NodeId x, std::vector<int> axes) {
  const Shape& in = gb.shape(x);
  Shape out;
  for (int axis : axes) out.push_back(in[static_cast<size_t>(axis)]);
  ir::OpAttrs attrs;
  attrs.axes = std::move(axes);
  return gb.Add(OpKind::kTranspose, "transpose", name, {x}, {gb.dtype(), std::move(out)}, attrs);
}

NodeId Softmax(GraphBuilder& gb, const std::string& name, NodeId scores) {
  return gb.Add(OpKind::kSoftmax, "softmax", name, {scores}, {gb.dtype(), gb.shape(scores)});
}

NodeId Dropout(GraphBuilder& gb, const std::string& name, NodeId x, double p) {
  if (p <= 0.0) return x;
  ir::OpAttrs attrs;
  attrs.dropout_p = p;
  NodeId mask = gb.Add(OpKind::kRandom, "dropout_mask", name + "_mask", {}, {ir::DType::kU8, gb.shape(x)}, attrs);
  return gb.Add(OpKind::kElementwise, "mul", name, {x, mask}, {gb.dtype(), gb.shape(x)});
}

NodeId Embedding(GraphBuilder& gb, const std::string& name, NodeId table, NodeId ids) {
  Shape out = gb.shape(ids);
  out.push_back(gb.shape(table).back());
  return gb.Add(OpKind::kEmbedding, "embedding", name, {table, ids}, {gb.dtype(), std::move(out)});
}

NodeId Conv2d(GraphBuilder& gb, const std::string& name, NodeId x, NodeId w, NodeId bias, int64_t stride) {
  const Shape& in = gb.shape(x);
  const Shape& weight = gb.shape(w);
  Shape out = {in[0], weight[0], (in[2] - weight[2]) / stride + 1, (in[3] - weight[3]) / stride + 1};
  std::vector<NodeId> inputs = {x, w};
  if (bias != ir::kNoNode) inputs.push_back(bias);
  ir::OpAttrs attrs;
  attrs.stride = stride;
  return gb.Add(OpKind::kConv, "conv2d", name, std::move(inputs), {gb.dtype(), std::move(out)}, attrs);
}

NodeId ReduceMean(GraphBuilder& gb, const std::string& name, NodeId x, int axis) {
  Shape out = gb.shape(x);
  out.erase(out.begin() + axis);
  ir::OpAttrs attrs;
  attrs.axes = {axis};
  return gb.Add(OpKind::kReduce, "mean", name, {x}, {gb.dtype(), std::move(out)}, attrs);
}

NodeId CrossEntropy(GraphBuilder& gb, const std::string& name, NodeId logits, NodeId labels) {
  // The loss is reduced in fp32 (mixed-precision practice).
  return gb.Add(OpKind::kLoss, "cross_entropy", name, {logits, labels}, {ir::DType::kF32, {}});
}

}  // namespace kiwi::models::detail
