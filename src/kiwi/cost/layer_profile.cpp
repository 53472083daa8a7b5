#include "kiwi/cost/layer_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include "kiwi/cost/activation_memory.h"
#include "kiwi/cost/pass_work.h"
#include "kiwi/ir/backward.h"
#include "kiwi/ir/layers.h"

namespace kiwi::cost {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Per-sample times and per-micro-batch overheads and kernels of a layer's (or other part's) two passes.
void FillPasses(const ir::Graph& graph, std::span<const ir::NodeId> forward, std::span<const ir::NodeId> backward,
                int64_t graph_batch, const CostModel& cost_model, LayerProfile& p) {
  const double batch = static_cast<double>(graph_batch);
  const PassWork f = SumPassWork(graph, forward, cost_model);
  const PassWork b = SumPassWork(graph, backward, cost_model);
  p.forward_seconds_per_sample = f.seconds / batch;
  p.backward_seconds_per_sample = b.seconds / batch;
  p.forward_overhead_seconds = f.overhead;
  p.backward_overhead_seconds = b.overhead;
  p.forward_kernels = f.kernels;
  p.backward_kernels = b.kernels;
  double flops = 0.0;
  for (std::span<const ir::NodeId> pass : {forward, backward})
    for (ir::NodeId id : pass)  // the optimizer step (in the embeddings' part) is not model FLOPs, as SumPassWork skips it
      if (graph.node(id).kind != ir::OpKind::kOptimizer) flops += graph.node(id).flops;
  p.flops_per_sample = flops / batch;
}

// Gradients + optimizer states per parameter byte. The final gradient of each parameter is what the
// optimizer node reads from the backward pass (ir/backward.h); without an optimizer node gradients
// are assumed to be as large as the parameters.
void FillStateRatios(const ir::Graph& graph, LayerModel& model) {
  int64_t parameter_bytes = 0, state_bytes = 0, gradient_bytes = 0;
  bool has_optimizer = false;
  for (const ir::Node& node : graph.nodes()) {
    if (node.kind == ir::OpKind::kParameter) parameter_bytes += node.output.Bytes();
    if (node.kind == ir::OpKind::kOptimizerState) state_bytes += node.output.Bytes();
    // ir::BuildTrainingGraph's fp32 master copy of a 16-bit parameter (op "master")
    if (node.kind == ir::OpKind::kOptimizerState && node.op == "master") model.master_weights = true;
    if (node.kind != ir::OpKind::kOptimizer) continue;
    has_optimizer = true;
    for (ir::NodeId in : node.inputs) {
      const ir::Node& read = graph.node(in);  // parameters and states are read too: skip them
      if (read.is_backward() && !read.is_persistent()) gradient_bytes += read.output.Bytes();
    }
  }
  if (parameter_bytes == 0) {
    model.state_bytes_per_parameter_byte = model.gradient_bytes_per_parameter_byte = 0.0;
    return;
  }
  if (!has_optimizer) gradient_bytes = parameter_bytes;
  const double parameters = static_cast<double>(parameter_bytes);
  model.state_bytes_per_parameter_byte = static_cast<double>(state_bytes + gradient_bytes) / parameters;
  model.gradient_bytes_per_parameter_byte = static_cast<double>(gradient_bytes) / parameters;
}

// What Megatron TP keeps whole on every TP rank of a layer (Shoeybi et al. 2019, §3): parameters
// (norm weights, and the biases of row-parallel linears, added after the all-reduce) and, without
// sequence parallelism, saved activations (Korthikanti et al. 2023, eq. 2: the norms' inputs, the
// inputs of the column-parallel linears, the dropout masks after the row-parallel ones: 10 of a GPT
// layer's 34 sbh). A linear is row-parallel when its input is split over TP: the output of a
// column-parallel linear (one whose input is replicated) through element-wise ops, attention and
// reshapes; a norm's or residual's output of replicated inputs is replicated; a dropout mask is split
// like the tensor it multiplies. For a GPT layer: parameters 2 norms + out.bias + fc2.bias = 6h.
// A mixture of experts (Megatron-LM's MoE with expert tensor parallelism): the router and a shared
// expert's scalar gate are whole on every rank (their weights replicated), the experts' batched matmuls
// are column- and row-parallel like linears, and a gather (dispatch, combine) is split like the rows it
// gathers, never by its indices.
struct TpReplicated {
  int64_t parameter_bytes = 0;
  int64_t saved_activation_bytes = 0;
  int64_t column_input_bytes = 0;  // of those, the column-parallel linears' inputs (each tensor once)
};

bool IsRoutingChoice(const ir::Node& node) { return node.kind == ir::OpKind::kReduce && node.op == "topk"; }

// The router of a top-k: the linear whose output it chooses among, through a softmax or element-wise
// ops (each token's experts); kNoNode when there is none (each expert's slots read the probabilities
// transposed).
ir::NodeId RouterOf(const ir::Graph& graph, const ir::Node& choice) {
  ir::NodeId at = choice.inputs[0];
  while (graph.node(at).kind == ir::OpKind::kSoftmax ||
         (graph.node(at).kind == ir::OpKind::kElementwise && graph.node(at).inputs.size() == 1))
    at = graph.node(at).inputs[0];
  return graph.node(at).kind == ir::OpKind::kMatmul ? at : ir::kNoNode;
}

// The linear `id` comes from through single-input element-wise ops and reshapes (kNoNode: none).
ir::NodeId LinearBehind(const ir::Graph& graph, ir::NodeId id) {
  while (graph.node(id).inputs.size() == 1 &&
         (graph.node(id).kind == ir::OpKind::kElementwise || graph.node(id).kind == ir::OpKind::kReshape))
    id = graph.node(id).inputs[0];
  return graph.node(id).kind == ir::OpKind::kMatmul ? id : ir::kNoNode;
}

// Whether input `k` of a concat is broadcast over a dim of its output (one head shared by all).
bool BroadcastInto(const ir::Graph& graph, const ir::Node& concat, size_t k) {
  const ir::Shape& in = graph.node(concat.inputs[k]).output.shape;
  for (size_t d = 0; d + 1 < in.size() && d < concat.output.shape.size(); ++d)
    if (in[d] != concat.output.shape[d]) return true;
  return false;
}

// The linears Megatron keeps whole under TP: the routers, those of one output per token (a gate),
// those whose whole output a norm reads (a low-rank latent normalized before its up-projections: MLA's
// q_a and kv_a; a norm needs every feature anyway), and those a concat broadcasts over the heads (MLA's
// rotary key head, shared by every head).
std::vector<ir::NodeId> WholeLinears(const ir::Graph& graph, std::span<const ir::NodeId> forward) {
  std::vector<ir::NodeId> whole;
  for (ir::NodeId id : forward) {
    const ir::Node& node = graph.node(id);
    if (node.kind == ir::OpKind::kMatmul && !node.output.shape.empty() && node.output.shape.back() == 1)
      whole.push_back(id);
    const ir::NodeId router = IsRoutingChoice(node) ? RouterOf(graph, node) : ir::kNoNode;
    if (router != ir::kNoNode) whole.push_back(router);
    if (node.kind == ir::OpKind::kLayerNorm && !node.inputs.empty() && graph.node(node.inputs[0]).kind == ir::OpKind::kMatmul)
      whole.push_back(node.inputs[0]);
    if (node.kind == ir::OpKind::kReshape && node.op == "concat")
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        const ir::NodeId shared = BroadcastInto(graph, node, k) ? LinearBehind(graph, node.inputs[k]) : ir::kNoNode;
        if (shared != ir::kNoNode) whole.push_back(shared);
      }
  }
  return whole;
}

bool IsLinear(const ir::Graph& graph, const ir::Node& node) {
  return node.kind == ir::OpKind::kMatmul ||
         (node.kind == ir::OpKind::kBatchMatmul && graph.node(node.inputs[1]).kind == ir::OpKind::kParameter);
}

// Which forward tensors of a layer Megatron TP splits over its ranks (true) and which it keeps whole
// (false; the layer's inputs and parameters are whole), and the parameters it keeps whole.
struct TpLayout {
  std::unordered_map<ir::NodeId, bool> split;
  int64_t replicated_parameter_bytes = 0;
  int row_parallel_linears = 0;  // dense ones (not the experts')
  bool Split(ir::NodeId id) const {
    auto it = split.find(id);
    return it != split.end() && it->second;
  }
};

TpLayout TpLayoutOf(const ir::Graph& graph, std::span<const ir::NodeId> forward) {
  TpLayout t;
  const auto is_split = [&](ir::NodeId id) { return t.Split(id); };
  const std::vector<ir::NodeId> whole = WholeLinears(graph, forward);
  for (ir::NodeId id : forward) {
    const ir::Node& node = graph.node(id);
    if (node.kind == ir::OpKind::kParameter) continue;
    bool out = false;
    if (std::find(whole.begin(), whole.end(), id) != whole.end()) {
      for (size_t k = 1; k < node.inputs.size(); ++k) t.replicated_parameter_bytes += graph.node(node.inputs[k]).output.Bytes();
    } else if (IsRoutingChoice(node)) {
      out = false;  // indices: every rank routes alike
    } else if (node.kind == ir::OpKind::kEmbedding) {
      out = is_split(node.inputs[0]);
    } else if (IsLinear(graph, node)) {
      out = !is_split(node.inputs[0]);  // column-parallel: split output; row-parallel: all-reduced
      if (!out && node.inputs.size() > 2) t.replicated_parameter_bytes += graph.node(node.inputs[2]).output.Bytes();
      if (!out && node.kind == ir::OpKind::kMatmul) ++t.row_parallel_linears;
    } else if (node.kind == ir::OpKind::kLayerNorm) {
      for (size_t k = 1; k < node.inputs.size(); ++k) t.replicated_parameter_bytes += graph.node(node.inputs[k]).output.Bytes();
      out = is_split(node.inputs[0]);
    } else {
      out = std::any_of(node.inputs.begin(), node.inputs.end(), is_split);
      for (ir::NodeId in : node.inputs) {  // a dropout mask (no inputs of its own) is split like its tensor
        if (graph.node(in).kind == ir::OpKind::kRandom) t.split[in] = out;
        // a weight applied to a whole tensor (an eager norm's): whole on every rank
        if (!out && graph.node(in).kind == ir::OpKind::kParameter) t.replicated_parameter_bytes += graph.node(in).output.Bytes();
      }
    }
    t.split[id] = out;
  }
  return t;
}

// Whether TP runs op `id` whole on every rank: its output and every input it computes from are whole
// (a column-parallel linear reads a whole input into a split output, a row-parallel one the reverse).
bool ReplicatedWork(const ir::Graph& graph, const TpLayout& layout, ir::NodeId id) {
  const ir::Node& node = graph.node(id);
  if (node.is_persistent() || node.kind == ir::OpKind::kInput || layout.Split(id)) return false;
  return std::none_of(node.inputs.begin(), node.inputs.end(), [&](ir::NodeId in) { return layout.Split(in); });
}

// Seconds per sample of some forward ops of a part of the graph and of those of its backward ops that
// are their gradients (ir::Node::grad_of).
struct OpsSeconds {
  double forward = 0.0;
  double backward = 0.0;
};
OpsSeconds SecondsWithGradients(const ir::Graph& graph, std::span<const ir::NodeId> part_backward,
                                std::span<const ir::NodeId> forward, int64_t graph_batch, const CostModel& cost_model) {
  const std::unordered_set<ir::NodeId> of(forward.begin(), forward.end());
  std::vector<ir::NodeId> backward;
  for (ir::NodeId id : part_backward)
    if (of.contains(graph.node(id).grad_of)) backward.push_back(id);
  const double batch = static_cast<double>(graph_batch);
  return {SumPassWork(graph, forward, cost_model).seconds / batch, SumPassWork(graph, backward, cost_model).seconds / batch};
}

// LayerProfile::replicated_*_seconds_per_sample: the forward ops TP runs whole and their gradients.
void FillReplicatedSeconds(const ir::Graph& graph, const ir::Layer& layer, const TpLayout& layout, int64_t graph_batch,
                           const CostModel& cost_model, LayerProfile& p) {
  std::vector<ir::NodeId> forward;
  for (ir::NodeId id : layer.forward)
    if (!graph.node(id).is_backward() && ReplicatedWork(graph, layout, id)) forward.push_back(id);
  const OpsSeconds s = SecondsWithGradients(graph, layer.backward, forward, graph_batch, cost_model);
  p.replicated_forward_seconds_per_sample = s.forward;
  p.replicated_backward_seconds_per_sample = s.backward;
}

TpReplicated TpReplicatedBytes(const ir::Graph& graph, std::span<const ir::NodeId> forward, const TpLayout& layout,
                               const std::vector<bool>& saved) {
  TpReplicated r;
  r.parameter_bytes = layout.replicated_parameter_bytes;
  std::unordered_set<ir::NodeId> column_inputs;
  for (ir::NodeId id : forward) {
    if (saved[static_cast<size_t>(id)] && !layout.Split(id)) r.saved_activation_bytes += graph.node(id).output.Bytes();
    const ir::Node& node = graph.node(id);
    if (IsLinear(graph, node) && layout.Split(id) && !layout.Split(node.inputs[0]) &&
        saved[static_cast<size_t>(node.inputs[0])] && column_inputs.insert(node.inputs[0]).second)
      r.column_input_bytes += graph.node(node.inputs[0]).output.Bytes();
  }
  return r;
}

int ParameterTensors(const ir::Graph& graph, std::span<const ir::NodeId> forward) {
  return static_cast<int>(std::count_if(forward.begin(), forward.end(), [&](ir::NodeId id) {
    return graph.node(id).kind == ir::OpKind::kParameter;
  }));
}

// The optimizer node's inputs per parameter (ir/backward.h: each parameter, its final gradient, its
// states); 0 without an optimizer node.
double OptimizerTensorsPerParameter(const ir::Graph& graph) {
  int64_t parameters = 0, inputs = 0;
  for (const ir::Node& node : graph.nodes()) {
    if (node.kind == ir::OpKind::kParameter) ++parameters;
    if (node.kind == ir::OpKind::kOptimizer) inputs += static_cast<int64_t>(node.inputs.size());
  }
  return parameters > 0 ? static_cast<double>(inputs) / static_cast<double>(parameters) : 0.0;
}

// The forward readers of `id` (a node's readers in the backward pass are its gradient's and weight's).
std::vector<ir::NodeId> ForwardReaders(const ir::Graph& graph, const std::vector<std::vector<ir::NodeId>>& readers,
                                       ir::NodeId id) {
  std::vector<ir::NodeId> out;
  for (ir::NodeId r : readers[static_cast<size_t>(id)])
    if (!graph.node(r).is_backward()) out.push_back(r);
  return out;
}

// The attention cores Megatron's selective recomputation runs again (Korthikanti et al. 2023 §5): for
// each softmax of the layer's forward, the chain back from it to the batched matmul that makes the
// scores (through a score bias or scale), and forward from it through single-reader element-wise ops
// (dropout, with its mask) to the batched matmul with V. A softmax without both ends has no core.
std::vector<ir::NodeId> AttentionCore(const ir::Graph& graph, const ir::Layer& layer,
                                      const std::vector<std::vector<ir::NodeId>>& readers) {
  constexpr size_t kMaxChain = 4;  // ops between a softmax and either matmul (scale, bias, mask, dropout)
  std::vector<ir::NodeId> core;
  const auto in_layer = [&](ir::NodeId id) {
    const ir::Node& n = graph.node(id);
    return n.layer == layer.index && !n.is_persistent() && !n.is_backward();
  };
  for (ir::NodeId softmax : layer.forward) {
    if (graph.node(softmax).kind != ir::OpKind::kSoftmax) continue;
    std::vector<ir::NodeId> chain{softmax};
    bool scores = false, context = false;
    for (ir::NodeId id = softmax; !scores && chain.size() <= kMaxChain;) {
      const ir::Node& n = graph.node(id);
      if (n.inputs.empty() || !in_layer(n.inputs.front())) break;
      id = n.inputs.front();
      chain.push_back(id);
      scores = graph.node(id).kind == ir::OpKind::kBatchMatmul;
    }
    for (ir::NodeId id = softmax; scores && !context && chain.size() <= 2 * kMaxChain;) {
      const std::vector<ir::NodeId> next = ForwardReaders(graph, readers, id);
      if (next.size() != 1 || !in_layer(next.front())) break;
      id = next.front();
      chain.push_back(id);
      for (ir::NodeId in : graph.node(id).inputs)  // a dropout's mask is drawn again with the core
        if (graph.node(in).kind == ir::OpKind::kRandom) chain.push_back(in);
      context = graph.node(id).kind == ir::OpKind::kBatchMatmul;
    }
    if (context) core.insert(core.end(), chain.begin(), chain.end());
  }
  std::sort(core.begin(), core.end());  // graph order, as the forward runs them
  core.erase(std::unique(core.begin(), core.end()), core.end());
  return core;
}

// Selective recomputation's terms of a layer's profile (LayerProfile::attention_core_*): the core's
// saved outputs that no op outside it reads in the forward pass (the context goes on to the output
// projection, which keeps it), and the core's forward work.
void FillAttentionCore(const ir::Graph& graph, const ir::Layer& layer, const std::vector<std::vector<ir::NodeId>>& readers,
                       const std::vector<bool>& saved, int64_t graph_batch, const CostModel& cost_model, LayerProfile& p) {
  const std::vector<ir::NodeId> core = AttentionCore(graph, layer, readers);
  if (core.empty()) return;
  const auto in_core = [&](ir::NodeId id) { return std::binary_search(core.begin(), core.end(), id); };
  int64_t dropped = 0;
  for (ir::NodeId id : core) {
    const std::vector<ir::NodeId> next = ForwardReaders(graph, readers, id);
    if (saved[static_cast<size_t>(id)] && std::all_of(next.begin(), next.end(), in_core))
      dropped += graph.node(id).output.Bytes();
  }
  const PassWork work = SumPassWork(graph, core, cost_model);
  p.attention_core_bytes_per_sample = CeilDiv(dropped, graph_batch);
  p.attention_core_seconds_per_sample = work.seconds / static_cast<double>(graph_batch);
  p.attention_core_overhead_seconds = work.overhead;
  p.attention_core_kernels = work.kernels;
}

// Context parallelism's terms of a layer's profile (LayerProfile::attention_*): per attention, the fused
// kernel (inputs q, k, v) or the scores matmul q x k^T through the softmax to the context matmul with v.
// A softmax whose input is not the scores matmul itself (a score bias between them) has no ring.
// Returns the ops that read the keys or values (the fused kernel; the scores and context matmuls), in
// graph order: recomputing one of them runs the ring again (the recompute menu's `attention`).
std::vector<ir::NodeId> FillAttention(const ir::Graph& graph, const ir::Layer& layer,
                                      const std::vector<std::vector<ir::NodeId>>& readers, int64_t graph_batch,
                                      const CostModel& cost_model, LayerProfile& p) {
  std::vector<ir::NodeId> forward, reads_kv;
  int64_t kv_bytes = 0;
  // The keys' length; grouped-query attention stacks each KV head's g query heads as [g*s, d] rows.
  const auto sequence_of = [&](ir::NodeId q, ir::NodeId k) {
    const ir::Shape& qs = graph.node(q).output.shape;
    const ir::Shape& ks = graph.node(k).output.shape;
    const int64_t length = ks.size() >= 2 ? ks[ks.size() - 2] : 0;
    const bool ring = qs.size() >= 2 && length > 0 && qs[qs.size() - 2] % length == 0 && p.attention_sequence >= 0 &&
                      (p.attention_sequence == 0 || p.attention_sequence == length);
    p.attention_sequence = ring ? length : LayerProfile::kRingless;
  };
  for (ir::NodeId id : layer.forward) {
    const ir::Node& n = graph.node(id);
    if (n.is_backward()) continue;
    if (n.kind == ir::OpKind::kAttention && n.inputs.size() == 3) {
      sequence_of(n.inputs[0], n.inputs[1]);
      kv_bytes += graph.node(n.inputs[1]).output.Bytes() + graph.node(n.inputs[2]).output.Bytes();
      forward.push_back(id);
      reads_kv.push_back(id);
      continue;
    }
    if (n.kind != ir::OpKind::kSoftmax || n.inputs.empty()) continue;
    // Back from the softmax to the scores q x k^T (a router's softmax reads a linear: no attention).
    ir::NodeId back = n.inputs.front();
    for (int hops = 0; hops < 3 && graph.node(back).kind != ir::OpKind::kBatchMatmul && !graph.node(back).inputs.empty(); ++hops)
      back = graph.node(back).inputs.front();
    const ir::Node& scores = graph.node(back);
    if (scores.kind != ir::OpKind::kBatchMatmul || !scores.attrs.transpose_b || scores.inputs.size() != 2) continue;
    if (back != n.inputs.front()) {  // a score bias (or mask) added between them: no ring over it
      p.attention_sequence = LayerProfile::kRingless;
      continue;
    }
    // Forward from the softmax through single-reader ops (dropout) to the context matmul with v.
    std::vector<ir::NodeId> chain{back, id};
    ir::NodeId at = id;
    for (size_t hops = 0; hops < 4; ++hops) {
      const std::vector<ir::NodeId> next = ForwardReaders(graph, readers, at);
      if (next.size() != 1) break;
      at = next.front();
      chain.push_back(at);
      if (graph.node(at).kind == ir::OpKind::kBatchMatmul) break;
    }
    const ir::Node& context = graph.node(at);
    if (at == id || context.kind != ir::OpKind::kBatchMatmul || context.inputs.size() != 2) continue;
    sequence_of(scores.inputs[0], scores.inputs[1]);
    kv_bytes += graph.node(scores.inputs[1]).output.Bytes() + graph.node(context.inputs[1]).output.Bytes();
    forward.insert(forward.end(), chain.begin(), chain.end());
    reads_kv.insert(reads_kv.end(), {back, at});
  }
  if (forward.empty()) return reads_kv;
  std::sort(forward.begin(), forward.end());
  std::vector<ir::NodeId> backward;
  for (ir::NodeId id : layer.backward)
    if (std::binary_search(forward.begin(), forward.end(), graph.node(id).grad_of)) backward.push_back(id);
  const double batch = static_cast<double>(graph_batch);
  p.attention_kv_bytes_per_sample = CeilDiv(kv_bytes, graph_batch);
  p.attention_forward_seconds_per_sample = SumPassWork(graph, forward, cost_model).seconds / batch;
  p.attention_backward_seconds_per_sample = SumPassWork(graph, backward, cost_model).seconds / batch;
  std::sort(reads_kv.begin(), reads_kv.end());
  return reads_kv;
}

// A gather of hidden-state rows by a routing choice: the dispatch (token rows into the experts' slots)
// or the combine (expert rows back to each token's k); not the gates' gather of router probabilities
// (one value per row).
bool IsRoutedGather(const ir::Graph& graph, const ir::Node& node) {
  if (node.kind != ir::OpKind::kEmbedding || node.inputs.size() != 2) return false;
  const ir::Shape& table = graph.node(node.inputs[0]).output.shape;
  return IsRoutingChoice(graph.node(node.inputs[1])) && !table.empty() && table.back() > 1;
}

// The dispatch: the routed gather whose rows the experts' linears read (Megatron's expert TP gathers
// them over the TP group, so each rank keeps them whole even with sequence parallelism).
bool IsDispatch(const ir::Graph& graph, const std::vector<std::vector<ir::NodeId>>& readers, ir::NodeId id) {
  if (!IsRoutedGather(graph, graph.node(id))) return false;
  const auto& r = readers[static_cast<size_t>(id)];
  return std::any_of(r.begin(), r.end(), [&](ir::NodeId x) {
    return !graph.node(x).is_backward() && graph.node(x).kind == ir::OpKind::kBatchMatmul && IsLinear(graph, graph.node(x));
  });
}

// A mixture of experts' terms of a layer's profile: each token's choice among its router's outputs gives
// the experts (its input's last dim) and top_k (its output's), the batched linears with weights are the
// experts'. The rows each all-to-all carries are top_k per token, or the experts' slots (the other
// top-k, over each expert's column: E x capacity) where a capacity factor gives them more. What SP
// leaves whole of it (LayerProfile::gathered_activation_bytes_per_sample): the dispatch's saved rows,
// and the routed gathers' work (the sorts of the gathered rows cost as much).
void FillExperts(const ir::Graph& graph, const ir::Layer& layer, const std::vector<std::vector<ir::NodeId>>& readers,
                 const std::vector<bool>& saved, int64_t graph_batch, const CostModel& cost_model, LayerProfile& p) {
  int64_t tokens = 0, top_k = 0, slots = 0, gathered = 0;
  std::vector<ir::NodeId> gathers;
  for (ir::NodeId id : layer.forward) {
    const ir::Node& node = graph.node(id);
    if (!node.is_backward() && IsRoutedGather(graph, node)) {
      gathers.push_back(id);
      if (saved[static_cast<size_t>(id)] && IsDispatch(graph, readers, id)) gathered += node.output.Bytes();
    }
    if (IsRoutingChoice(node) && RouterOf(graph, node) != ir::kNoNode) {
      p.experts = graph.node(node.inputs[0]).output.shape.back();
      p.routed_bytes_per_sample = node.output.shape.back() * p.boundary_bytes_per_sample;
      tokens = node.output.shape.front();
      top_k = node.output.shape.back();
    } else if (IsRoutingChoice(node)) {
      slots = node.output.NumElements();
    }
    if (node.kind == ir::OpKind::kBatchMatmul && IsLinear(graph, node))
      p.expert_parameter_bytes += graph.node(node.inputs[1]).output.Bytes();
  }
  // Beyond an even load's slots (ceil(T k / E) each): a capacity factor's, which the all-to-alls carry padded.
  if (tokens > 0 && p.experts > 0 && slots > p.experts * CeilDiv(tokens * top_k, p.experts))
    p.routed_bytes_per_sample = CeilDiv(slots * p.boundary_bytes_per_sample, tokens);
  if (p.experts == 0) return;
  p.gathered_activation_bytes_per_sample = CeilDiv(gathered, graph_batch);
  const OpsSeconds s = SecondsWithGradients(graph, layer.backward, gathers, graph_batch, cost_model);
  p.routed_gather_forward_seconds_per_sample = s.forward;
  p.routed_gather_backward_seconds_per_sample = s.backward;
}

// The layer's recompute menu (cost/recompute_set.h): its forward ops in execution order, after the
// activations from outside the layer they read ("input0", "input1", ... in the order first read).
// `attention`: the layer's ops that read keys or values (FillAttention), in graph order.
void FillRecomputeMenu(const ir::Graph& graph, const ir::Layer& layer, const std::vector<std::vector<ir::NodeId>>& readers,
                       const std::vector<bool>& saved, const TpLayout& layout, std::span<const ir::NodeId> attention,
                       int64_t graph_batch, const CostModel& cost_model, LayerProfile& p) {
  auto menu = std::make_shared<RecomputeMenu>();
  std::unordered_map<ir::NodeId, int> index;
  const std::string prefix = layer.name + ".";
  const auto entry = [&](ir::NodeId id, std::string name) {
    const ir::Node& n = graph.node(id);
    MenuOp op;
    op.name = std::move(name);
    op.bytes_per_sample = CeilDiv(n.output.Bytes(), graph_batch);
    op.saved = saved[static_cast<size_t>(id)];
    op.replicated = !layout.Split(id);
    index[id] = static_cast<int>(menu->ops.size());
    menu->ops.push_back(std::move(op));
  };
  int external = 0;
  std::unordered_map<std::string, int> named;  // graph names need not be unique: the k-th repeat gets "#k"
  const auto unique = [&](std::string name) {
    const int repeat = named[name]++;
    return repeat == 0 ? name : fmt::format("{}#{}", name, repeat);
  };
  for (ir::NodeId id : layer.forward) {
    const ir::Node& n = graph.node(id);
    if (n.is_backward() || n.is_persistent()) continue;
    for (ir::NodeId in : n.inputs)
      if (!graph.node(in).is_persistent() && !index.contains(in)) entry(in, fmt::format("input{}", external++));
    const bool boundary = std::any_of(readers[static_cast<size_t>(id)].begin(), readers[static_cast<size_t>(id)].end(),
                                      [&](ir::NodeId r) { return !graph.node(r).is_backward() && graph.node(r).layer != layer.index; });
    entry(id, unique(n.name.rfind(prefix, 0) == 0 ? n.name.substr(prefix.size()) : n.name));
    MenuOp& op = menu->ops.back();
    for (ir::NodeId in : n.inputs)
      if (!graph.node(in).is_persistent()) op.inputs.push_back(index.at(in));
    op.recomputable = !boundary && !IsLinear(graph, n) && n.kind != ir::OpKind::kInput;
    op.attention = std::binary_search(attention.begin(), attention.end(), id);
    op.routed = IsRoutedGather(graph, n);
    op.gathered = IsDispatch(graph, readers, id);
    const ir::NodeId one[] = {id};
    const PassWork work = SumPassWork(graph, one, cost_model);
    op.seconds_per_sample = work.seconds / static_cast<double>(graph_batch);
    op.overhead_seconds = work.overhead;
    op.kernels = work.kernels;
  }
  p.recompute_menu.menu = std::move(menu);
}

LayerProfile ProfileOf(const ir::Graph& graph, const ir::Layer& layer, int64_t graph_batch,
                       const CostModel& cost_model, const std::vector<bool>& saved,
                       const std::vector<std::vector<ir::NodeId>>& readers) {
  LayerProfile p;
  p.name = layer.name;
  p.parameter_bytes = layer.parameter_bytes;
  p.parameter_tensors = ParameterTensors(graph, layer.forward);
  p.activation_bytes_per_sample = CeilDiv(layer.saved_activation_bytes, graph_batch);
  p.boundary_bytes_per_sample = CeilDiv(layer.boundary_activation_bytes, graph_batch);
  FillPasses(graph, layer.forward, layer.backward, graph_batch, cost_model, p);
  // Megatron TP all-reduces the layer's [s, b, h] output twice per forward pass (after attention and
  // after the MLP), each as large as the boundary tensor (Shoeybi et al. 2019, Fig. 3).
  p.tp_comm_bytes_per_sample = 2 * p.boundary_bytes_per_sample;
  const TpLayout layout = TpLayoutOf(graph, layer.forward);
  const TpReplicated replicated = TpReplicatedBytes(graph, layer.forward, layout, saved);
  p.replicated_parameter_bytes = replicated.parameter_bytes;
  p.replicated_activation_bytes_per_sample = CeilDiv(replicated.saved_activation_bytes, graph_batch);
  p.column_input_bytes_per_sample = CeilDiv(replicated.column_input_bytes, graph_batch);
  FillReplicatedSeconds(graph, layer, layout, graph_batch, cost_model, p);
  FillAttentionCore(graph, layer, readers, saved, graph_batch, cost_model, p);
  p.row_parallel_linears = layout.row_parallel_linears;
  FillExperts(graph, layer, readers, saved, graph_batch, cost_model, p);
  const std::vector<ir::NodeId> attention = FillAttention(graph, layer, readers, graph_batch, cost_model, p);
  FillRecomputeMenu(graph, layer, readers, saved, layout, attention, graph_batch, cost_model, p);
  return p;
}

bool InHead(const ir::Node& node) { return node.scope == "head" || node.scope.rfind("head.", 0) == 0; }

// Each part's backward transient (LayerProfile::backward_transient_bytes_per_sample, for the whole graph
// batch), indexed by layer, then the embeddings, then the head. The graph runs in node order, each
// backward tensor live from its op until its last reader; final gradients (read by the optimizer) are
// model states, not transients.
std::vector<int64_t> BackwardTransients(const ir::Graph& graph, const ir::LayerView& view,
                                        const std::vector<std::vector<ir::NodeId>>& readers) {
  const size_t layers = view.layers.size(), embedding = layers, head = layers + 1;
  std::vector<size_t> part(static_cast<size_t>(graph.size()), head + 1);  // head + 1: not in any part
  for (size_t i = 0; i < layers; ++i)
    for (ir::NodeId id : view.layers[i].backward) part[static_cast<size_t>(id)] = i;
  for (ir::NodeId id : view.other) part[static_cast<size_t>(id)] = InHead(graph.node(id)) ? head : embedding;
  std::vector<size_t> unread(static_cast<size_t>(graph.size()), 0);
  std::vector<bool> counted(static_cast<size_t>(graph.size()), false);
  for (const ir::Node& n : graph.nodes()) {
    const auto& r = readers[static_cast<size_t>(n.id)];
    unread[static_cast<size_t>(n.id)] = r.size();
    counted[static_cast<size_t>(n.id)] =
        n.is_backward() && !n.is_persistent() && n.kind != ir::OpKind::kOptimizer &&
        std::none_of(r.begin(), r.end(), [&](ir::NodeId x) { return graph.node(x).kind == ir::OpKind::kOptimizer; });
  }
  std::vector<int64_t> peak(head + 1, 0);
  int64_t live = 0;
  for (const ir::Node& n : graph.nodes()) {
    const size_t id = static_cast<size_t>(n.id);
    if (counted[id]) live += n.output.Bytes();
    if (n.is_backward() && part[id] <= head)
      peak[part[id]] = std::max(peak[part[id]], live);
    for (ir::NodeId in : n.inputs) {
      const size_t i = static_cast<size_t>(in);
      if (unread[i] > 0 && --unread[i] == 0 && counted[i]) live -= graph.node(in).output.Bytes();
    }
    if (counted[id] && unread[id] == 0) live -= n.output.Bytes();  // read by nobody
  }
  return peak;
}

// What the head's passes change under TP, where the graph's fused loss (its cross_entropy, and the
// nll_loss_grad and cross_entropy_grad of its backward) runs as Megatron's vocabulary-parallel
// cross-entropy on fp32 logits of `logits_bytes` (CostModel::VocabParallelCrossEntropyTime).
void AddVocabParallelLoss(const ir::Graph& graph, std::span<const ir::NodeId> forward, std::span<const ir::NodeId> backward,
                          int64_t logits_bytes, int64_t graph_batch, const CostModel& cost_model, LayerProfile& p) {
  const auto fused = [&](std::span<const ir::NodeId> ids, auto is_loss) {
    std::vector<ir::NodeId> loss;
    std::copy_if(ids.begin(), ids.end(), std::back_inserter(loss), [&](ir::NodeId id) { return is_loss(graph.node(id)); });
    return SumPassWork(graph, loss, cost_model);
  };
  const PassWork f = fused(forward, [](const ir::Node& n) { return n.kind == ir::OpKind::kLoss; });
  const PassWork b = fused(backward, [](const ir::Node& n) { return n.op == "nll_loss_grad" || n.op == "cross_entropy_grad"; });
  const CostModel::PassTime vf = cost_model.VocabParallelCrossEntropyTime(logits_bytes, false);
  const CostModel::PassTime vb = cost_model.VocabParallelCrossEntropyTime(logits_bytes, true);
  const double batch = static_cast<double>(graph_batch);
  p.tp_loss_forward_seconds_per_sample = (vf.seconds - vf.overhead - f.seconds) / batch;
  p.tp_loss_backward_seconds_per_sample = (vb.seconds - vb.overhead - b.seconds) / batch;
  p.tp_loss_forward_overhead_seconds = vf.overhead - f.overhead;
  p.tp_loss_backward_overhead_seconds = vb.overhead - b.overhead;
  p.tp_loss_forward_kernels = vf.kernels - f.kernels;
  p.tp_loss_backward_kernels = vb.kernels - b.kernels;
}

// The logits' last dimension (the vocabulary, or the classes): what Megatron splits over TP in the
// embedding table and the head (vocabulary-parallel embedding and cross-entropy); 0 without a loss.
int64_t VocabularySize(const ir::Graph& graph, std::span<const ir::NodeId> ids) {
  for (ir::NodeId id : ids) {
    const ir::Node& node = graph.node(id);
    if (node.kind == ir::OpKind::kLoss && !node.is_backward()) return graph.node(node.inputs[0]).output.shape.back();
  }
  return 0;
}

// One of the two parts of `other` (ids in execution order): parameters (vocabulary-sized ones split
// over TP, the rest replicated), saved activations, times, and the TP all-reduces of Megatron's
// vocabulary-parallel embedding (its output, forward) and cross-entropy (max, target logit, sum of
// exps of each token in fp32, forward; the head's input gradient, backward; Shoeybi et al. 2019 §3).
LayerProfile OtherPart(const ir::Graph& graph, std::span<const ir::NodeId> ids, const std::vector<std::vector<ir::NodeId>>& readers,
                       int64_t vocab, bool head, int64_t graph_batch, const CostModel& cost_model) {
  LayerProfile p;
  p.name = head ? "head" : "embedding";
  std::vector<ir::NodeId> forward, backward, whole, lookups;
  bool vocab_split = false;
  int64_t saved = 0, saved_whole = 0, tokens = 0, head_input = 0, boundary = 0;
  const auto vocab_sized = [&](const ir::Node& node) {
    const ir::Shape& shape = node.output.shape;
    return vocab > 0 && std::find(shape.begin(), shape.end(), vocab) != shape.end();
  };
  for (ir::NodeId id : ids) {
    const ir::Node& node = graph.node(id);
    (node.is_backward() ? backward : forward).push_back(id);
    if (node.is_backward()) continue;
    if (node.kind == ir::OpKind::kParameter) {
      p.parameter_bytes += node.output.Bytes();
      ++p.parameter_tensors;
      if (vocab_sized(node)) vocab_split = true;
      else p.replicated_parameter_bytes += node.output.Bytes();
      continue;
    }
    // Megatron TP runs whole on every rank: the embeddings' lookups (VocabParallelEmbedding looks up
    // every token in the rank's shard, masking the others) and, without SP, what follows them; the
    // head's final norm (not its vocabulary-parallel logits, nor the loss: tp_loss_*).
    const bool runs_whole = !node.is_persistent() && node.kind != ir::OpKind::kInput &&
                            (!head || (!vocab_sized(node) && node.kind != ir::OpKind::kLoss));
    if (runs_whole) whole.push_back(id);
    if (runs_whole && !head && node.kind == ir::OpKind::kEmbedding) lookups.push_back(id);
    const auto& r = readers[static_cast<size_t>(id)];
    if (!node.is_persistent() && std::any_of(r.begin(), r.end(), [&](ir::NodeId x) { return graph.node(x).is_backward(); })) {
      saved += node.output.Bytes();
      if (runs_whole || node.kind == ir::OpKind::kInput) saved_whole += node.output.Bytes();  // token ids: every rank's
    }
    if (!node.is_persistent() && std::any_of(r.begin(), r.end(), [&](ir::NodeId x) { return graph.node(x).layer >= 0; }))
      boundary += node.output.Bytes();  // the embeddings' output, read by the first layer
    if (node.kind == ir::OpKind::kLoss) tokens = graph.node(node.inputs[1]).output.NumElements();
    for (ir::NodeId in : node.inputs)  // the head's input: a layer's output
      if (graph.node(in).layer >= 0 && !graph.node(in).is_persistent()) head_input = graph.node(in).output.Bytes();
  }
  p.activation_bytes_per_sample = CeilDiv(saved, graph_batch);
  p.boundary_bytes_per_sample = CeilDiv(head ? head_input : boundary, graph_batch);
  FillPasses(graph, forward, backward, graph_batch, cost_model, p);
  if (!vocab_split) return p;  // nothing split over TP: no TP communication
  p.replicated_activation_bytes_per_sample = CeilDiv(saved_whole, graph_batch);
  const OpsSeconds replicated = SecondsWithGradients(graph, backward, whole, graph_batch, cost_model);
  p.replicated_forward_seconds_per_sample = replicated.forward;
  p.replicated_backward_seconds_per_sample = replicated.backward;
  const OpsSeconds lookup = SecondsWithGradients(graph, backward, lookups, graph_batch, cost_model);
  p.lookup_forward_seconds_per_sample = lookup.forward;
  p.lookup_backward_seconds_per_sample = lookup.backward;
  if (head) {
    const int64_t per_token = CeilDiv(tokens * 4, graph_batch);  // fp32 [tokens] per sample
    p.tp_forward_all_reduce_bytes_per_sample.assign(3, per_token);
    if (p.boundary_bytes_per_sample > 0) {
      p.tp_backward_all_reduce_bytes_per_sample.push_back(p.boundary_bytes_per_sample);
      p.tp_backward_f_operators = 1;
    }
    AddVocabParallelLoss(graph, forward, backward, tokens * vocab * 4, graph_batch, cost_model, p);
  } else if (p.boundary_bytes_per_sample > 0) {
    p.tp_forward_all_reduce_bytes_per_sample.push_back(p.boundary_bytes_per_sample);
    p.tp_forward_g_operators = 1;
  }
  return p;
}

// Embeddings, head, loss: the nodes of no layer, split by scope ("head": the last stage's part).
void FillOther(const ir::Graph& graph, const ir::LayerView& view, const std::vector<std::vector<ir::NodeId>>& readers,
               int64_t graph_batch, const CostModel& cost_model, LayerModel& model) {
  std::vector<ir::NodeId> embedding, head;
  for (ir::NodeId id : view.other) (InHead(graph.node(id)) ? head : embedding).push_back(id);
  const int64_t vocab = VocabularySize(graph, view.other);
  model.embedding = OtherPart(graph, embedding, readers, vocab, false, graph_batch, cost_model);
  model.head = OtherPart(graph, head, readers, vocab, true, graph_batch, cost_model);
  for (ir::NodeId id : embedding) {  // the embeddings' parameters the head's forward reads: tied
    const ir::Node& node = graph.node(id);
    if (node.kind != ir::OpKind::kParameter) continue;
    const auto& r = readers[static_cast<size_t>(id)];
    if (std::any_of(r.begin(), r.end(), [&](ir::NodeId x) { return !graph.node(x).is_backward() && InHead(graph.node(x)); }))
      model.tied_embedding_bytes += node.output.Bytes();
  }
}

}  // namespace

std::optional<ZeroRuntime> ParseZeroRuntime(std::string_view name) {
  if (name == "kiwi") return ZeroRuntime::kOneLayer;
  if (name == "fsdp2") return ZeroRuntime::kFsdp2;
  return std::nullopt;
}

int64_t TiedCopyBytes(const LayerModel& model, int pp) { return pp > 1 ? model.tied_embedding_bytes : 0; }

LayerProfile PipelinedHead(const LayerModel& model, int pp) {
  LayerProfile head = model.head;
  if (const int64_t copy = TiedCopyBytes(model, pp); copy > 0) {
    head.parameter_bytes += copy;
    ++head.parameter_tensors;
  }
  return head;
}

bool SameButName(LayerProfile a, const LayerProfile& b) {
  a.name = b.name;
  return a == b;
}

Result<LayerModel> BuildLayerModel(const ir::Graph& training, int64_t graph_batch, const CostModel& cost_model) {
  if (graph_batch <= 0)
    return BadInput(fmt::format("{}: graph batch: must be positive, got {}", training.name(), graph_batch));
  Result<ir::LayerView> view = ir::BuildLayerView(training);
  if (!view) return view.error();

  LayerModel model;
  model.name = training.name();
  model.layers.reserve(view->layers.size());
  const std::vector<bool> saved = ir::SavedForBackward(training);
  const std::vector<std::vector<ir::NodeId>> readers = training.Consumers();
  for (const ir::Layer& layer : view->layers)
    model.layers.push_back(ProfileOf(training, layer, graph_batch, cost_model, saved, readers));
  FillOther(training, *view, readers, graph_batch, cost_model, model);
  const std::vector<int64_t> transients = BackwardTransients(training, *view, readers);
  for (size_t i = 0; i < model.layers.size(); ++i)
    model.layers[i].backward_transient_bytes_per_sample = CeilDiv(transients[i], graph_batch);
  model.embedding.backward_transient_bytes_per_sample = CeilDiv(transients[model.layers.size()], graph_batch);
  model.head.backward_transient_bytes_per_sample = CeilDiv(transients[model.layers.size() + 1], graph_batch);
  FillStateRatios(training, model);
  model.optimizer_tensors_per_parameter = OptimizerTensorsPerParameter(training);
  for (const ir::Node& node : training.nodes())
    if (node.kind == ir::OpKind::kOptimizer) model.optimizer = node.op;
  return model;
}

}  // namespace kiwi::cost
