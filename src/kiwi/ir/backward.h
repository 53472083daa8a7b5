#pragma once
// Derives the training graph (forward + backward + optimizer update) from a forward graph, so that
// rematerialization decisions are meaningful: each backward op reads exactly the forward tensors its
// gradient formula needs (e.g. d(X W)/dW reads X and dY, never the matmul's output; GELU's gradient
// reads its input; softmax's gradient reads its output; a dropout multiply reads only the mask).
//
//   Result<Graph> training = BuildTrainingGraph(forward, {.optimizer = Optimizer::kAdam});
//
// Gradient rules live in a table keyed by (kind, op) with one small handler each; an op without a
// rule is rejected with an error naming it.
#include <optional>
#include <string_view>
#include <vector>

#include "kiwi/ir/graph.h"
#include "kiwi/util/result.h"

namespace kiwi::ir {

// kFusedAdam: Adam as one kernel per step (PyTorch's Adam(fused=True), Apex/Transformer Engine
// FusedAdam in Megatron-LM): the same states, one pass over them instead of PyTorch's eighteen.
enum class Optimizer : uint8_t { kNone, kSgd, kAdam, kFusedAdam };

// "adam", "fused_adam", "sgd", "none": the names the command line, plan files and the Python API use,
// and the optimizer node's op (ir::Node::op) for all but "none".
std::optional<Optimizer> ParseOptimizer(std::string_view name);
std::string_view OptimizerName(Optimizer optimizer);
inline constexpr std::string_view kOptimizerNames = "adam, fused_adam, sgd, none";

struct TrainingOptions {
  Optimizer optimizer = Optimizer::kAdam;  // adam adds two fp32 state tensors per parameter
  bool master_weights = false;             // mixed precision: an fp32 master copy per parameter
};

// Requires exactly one kLoss node and a verified forward-only graph. The result keeps the forward
// nodes with their ids, then the backward nodes in reverse topological order of the forward pass
// (pass = kBackward, grad_of set, layer/scope inherited), then the optimizer state nodes (kind
// kOptimizerState) and a final kOptimizer node reading every parameter gradient. With optimizer states
// the graph gets an explicit order that runs them first: they are resident for the whole step.
// Gradients are only built for tensors that depend on a parameter (inputs and random masks get none).
Result<Graph> BuildTrainingGraph(const Graph& forward, const TrainingOptions& options);

// The position in `order` of the first backward op that computes something (optimizer states, resident
// from the start, are not one): where the backward pass begins; order.size() when there is none.
int32_t FirstBackwardPosition(const Graph& training, const std::vector<NodeId>& order);

// Per node: a forward tensor (not a parameter or optimizer state) that at least one backward op reads.
std::vector<bool> SavedForBackward(const Graph& training);
// Bytes of forward tensors (not parameters/optimizer state) read by at least one backward op: the
// activations a no-rematerialization schedule keeps for the backward pass. `layer` = -1 sums all.
int64_t SavedActivationBytes(const Graph& training, int32_t layer = -1);
// The same for layers 0..layers-1 at once (one pass, not one per layer).
std::vector<int64_t> SavedActivationBytesByLayer(const Graph& training, int32_t layers);

}  // namespace kiwi::ir
