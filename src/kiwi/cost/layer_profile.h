#pragma once
// Per-layer figures the layer-level (Galvatron-BMW) simulator and planner work with, derived from an
// operator-level training graph (ir/layers.h) and the cost model, so both levels share one source.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiwi/cost/cost_model.h"
#include "kiwi/cost/recompute_set.h"
#include "kiwi/ir/graph.h"
#include "kiwi/util/result.h"

namespace kiwi::cost {

struct LayerProfile {
  std::string name;
  int64_t parameter_bytes = 0;               // the layer's weights (training dtype)
  int parameter_tensors = 0;                 // and how many tensors hold them (the optimizer's per-tensor work)
  int64_t activation_bytes_per_sample = 0;   // forward tensors kept for backward, no checkpointing
  int64_t boundary_bytes_per_sample = 0;     // the layer's output: kept when checkpointed, sent between stages
  // The most the layer's backward pass holds at once beyond the saved activations and the parameters'
  // final gradients (counted with the model states): the gradients in flight (the loss's dense
  // nll_loss_grad among them), in the order the training graph runs them.
  int64_t backward_transient_bytes_per_sample = 0;
  double forward_seconds_per_sample = 0.0;   // one device, no parallelism
  double backward_seconds_per_sample = 0.0;
  // The model FLOPs of one sample's forward + backward pass (ir::Node::flops of the part's ops; no
  // recomputation, no optimizer step): what MFU counts (0 where unknown, as in Galvatron's profiles).
  double flops_per_sample = 0.0;
  // What each pass of one micro-batch pays per op whatever its size and the TP degree (every rank runs
  // every op): a CPU's eager dispatch (CostModel::OverheadIn), not in the per-sample seconds. Without
  // it split out, a layer at TP 2 or micro-batch 1/m of the batch was priced half or 1/m of it.
  double forward_overhead_seconds = 0.0;
  double backward_overhead_seconds = 0.0;
  // Of those seconds, what Megatron TP runs whole on every rank without sequence parallelism: the ops
  // whose inputs and output it keeps whole (norms, residual adds, dropouts; the linears it keeps whole:
  // routers, gates, MLA's latents and shared rotary key head) and their gradients; of the embeddings all
  // of them, of the head its final norm. Sequence parallelism splits them by tokens (Korthikanti et al.
  // 2023 §4.2.2), as it does their saved activations.
  double replicated_forward_seconds_per_sample = 0.0;
  double replicated_backward_seconds_per_sample = 0.0;
  // Of those, what it runs whole even with SP: the embeddings' vocabulary-parallel lookups (each rank
  // looks up every token in its vocabulary shard, Megatron's VocabParallelEmbedding) and their gradients.
  double lookup_forward_seconds_per_sample = 0.0;
  double lookup_backward_seconds_per_sample = 0.0;
  int forward_kernels = 0;                   // kernels one forward pass of one micro-batch launches
  int backward_kernels = 0;                  // (whatever the micro-batch and TP degree)
  int64_t tp_comm_bytes_per_sample = 0;      // bytes all-reduced by Megatron TP in one forward pass
  // Part of parameter_bytes Megatron TP keeps whole on every TP rank (layernorms, row-parallel biases,
  // position embeddings): a TP shard holds (parameter_bytes - replicated) / tp + replicated.
  int64_t replicated_parameter_bytes = 0;
  // Part of activation_bytes_per_sample Megatron TP keeps whole on every TP rank without sequence
  // parallelism (Korthikanti et al. 2023, eq. 2: 10 sbh of a GPT layer's 34 sbh); the rest is split.
  int64_t replicated_activation_bytes_per_sample = 0;
  // Of those, the inputs of the column-parallel linears (each group's input once: attention's q/k/v, the
  // MLP's up/gate). PyTorch's sequence parallelism all-gathers them and the linears save the gathered
  // tensor, whole on every rank (DTensor's ColwiseParallel, what kiwi.torch.parallelize runs), where
  // Megatron saves the sequence shard and gathers it again in the backward (Korthikanti et al. 2023 §4.2.2).
  int64_t column_input_bytes_per_sample = 0;
  // Whether what runs the layer saves them so under sequence parallelism (LayerModel::zero_runtime
  // kFsdp2: kiwi.torch.parallelize; Megatron's and kiwi's own runtime do not).
  bool sequence_parallel_saves_gathered_inputs = false;
  // The embeddings and the head have their own TP all-reduces, per sample, one entry per all-reduce
  // (vocabulary-parallel embedding: its output, forward; vocabulary-parallel cross-entropy: max,
  // target logit and sum of exps, forward; the head's input gradient, backward). When both are empty
  // the profile is a transformer layer: 2 forward + 2 backward of tp_comm_bytes_per_sample / 2.
  std::vector<int64_t> tp_forward_all_reduce_bytes_per_sample;
  std::vector<int64_t> tp_backward_all_reduce_bytes_per_sample;
  // How many of those, the first ones, are Megatron's g operator on the embeddings' output (forward)
  // and f operator on the head's input (its gradient, backward): sequence parallelism turns each into a
  // reduce-scatter + all-gather pair (Korthikanti et al. 2023 §4.2.2). The loss's statistics stay all-reduces.
  int tp_forward_g_operators = 0;
  int tp_backward_f_operators = 0;
  // The head under TP runs Megatron's vocabulary-parallel cross-entropy in place of the graph's fused
  // loss (cross_entropy; nll_loss_grad and cross_entropy_grad backward): what that adds to each pass,
  // per sample on one device (seconds) and per micro-batch (kernels); 0 for the other parts and at TP 1.
  double tp_loss_forward_seconds_per_sample = 0.0;
  double tp_loss_backward_seconds_per_sample = 0.0;
  double tp_loss_forward_overhead_seconds = 0.0;
  double tp_loss_backward_overhead_seconds = 0.0;
  int tp_loss_forward_kernels = 0;
  int tp_loss_backward_kernels = 0;
  // Megatron's selective recomputation (plan::LayerStrategy::selective_recompute) of the layer's
  // attention core (AttentionCore in layer_profile.cpp): the saved activations it drops, per sample
  // (split over TP like the heads: Korthikanti et al. 2023 eq. 6, 5as^2b of a GPT layer in 16 bits),
  // and the core's forward work, run again in the backward pass. 0 where there is no core to recompute
  // (fused attention never keeps the scores; the embeddings and the head).
  int64_t attention_core_bytes_per_sample = 0;
  double attention_core_seconds_per_sample = 0.0;
  double attention_core_overhead_seconds = 0.0;
  int attention_core_kernels = 0;
  // A mixture of experts (models/builder.h MoeFeedForward): how many experts (0: a dense layer), the
  // part of parameter_bytes their weights are (split over TP like linears, and over EP), and the rows
  // its router dispatches per sample (each token's top_k copies of its hidden state): the buffer of each
  // expert-parallel all-to-all.
  int64_t experts = 0;
  int64_t expert_parameter_bytes = 0;
  int64_t routed_bytes_per_sample = 0;
  // Megatron's mixture under sequence parallelism (expert TP = TP, its all-to-all token dispatcher,
  // megatron/core/transformer/moe/token_dispatcher.py): each rank routes its own 1/tp of the tokens and
  // all-to-alls them, then the TP group all-gathers the dispatched rows before the experts and
  // reduce-scatters their outputs. So the collective pair that wraps a dense MLP carries the routed rows
  // instead of h; each rank keeps the gathered rows its experts read (the dispatch's saved output) whole,
  // and sorts them by its local experts and back (sort_chunks_by_idxs), a routed gather's work each on
  // all of them. Without SP the whole layer is TP's as above (Megatron refuses MoE + TP without SP).
  int64_t gathered_activation_bytes_per_sample = 0;         // the dispatch's saved output; 0 for a dense layer
  double routed_gather_forward_seconds_per_sample = 0.0;    // the dispatch and combine gathers
  double routed_gather_backward_seconds_per_sample = 0.0;   // and their gradients
  // The layer's row-parallel dense linears (attention's out, a shared expert's down): under SP each has
  // its [s, b, h] all-gather before and reduce-scatter after. A dense layer's are tp_comm_bytes_per_sample's two.
  int row_parallel_linears = 0;
  // Context parallelism (plan::LayerStrategy::cp, ring attention): the sequence length of the layer's
  // attention, which CP splits (0: no attention; kRingless: attention a ring cannot split, with a score
  // bias or queries and keys of unequal lengths); the keys' and values' bytes per sample the ring passes
  // (as the attention reads them: grouped-query K/V unexpanded); and the attention's own work per sample
  // (the fused kernel, or scores, softmax, dropout and context), forward and backward: what hides the ring.
  static constexpr int64_t kRingless = -1;
  int64_t attention_sequence = 0;
  int64_t attention_kv_bytes_per_sample = 0;
  double attention_forward_seconds_per_sample = 0.0;
  double attention_backward_seconds_per_sample = 0.0;
  // The layer's forward ops, what each keeps for the backward pass and what it costs: what recompute
  // sets (plan::LayerStrategy::recompute) are priced from; empty for the embeddings and the head.
  SharedRecomputeMenu recompute_menu;

  bool operator==(const LayerProfile&) const = default;
};

// Two profiles equal but for their names: one layer type of a model.
bool SameButName(LayerProfile a, const LayerProfile& b);

struct LayerModel;
// The head as the last of `pp` pipeline stages holds it: with pp > 1 a tied embedding's copy joins its
// parameters (LayerModel::tied_embedding_bytes; split over TP like the embedding's, sharded and stepped
// with the head).
LayerProfile PipelinedHead(const LayerModel& model, int pp);
// The tied embedding's bytes each end of a `pp`-stage pipeline holds a copy of and all-reduces the gradient
// of (cost::PlacedLayer::tied_copy_bytes): the whole tied table with stages, 0 without.
int64_t TiedCopyBytes(const LayerModel& model, int pp);

// What runs sharded data parallelism, by what a ZeRO-3 layer holds beside its shards while it runs:
// kOneLayer ("kiwi": kiwi.torch.distributed, DeepSpeed/Galvatron-BMW Eq. 1) its whole parameters, then
// its whole gradient; kFsdp2 (PyTorch's fully_shard, what kiwi.torch.parallelize runs) in the backward
// pass also the next layer's all-gather output, prefetched, and the previous layer's reduce-scatter
// input, freed only at this layer's post-backward (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py:
// backward prefetch, post_backward's wait on the last reduce-scatter; measured in docs/distributed.md).
enum class ZeroRuntime { kOneLayer, kFsdp2 };
inline constexpr std::string_view kZeroRuntimeNames = "kiwi, fsdp2";
std::optional<ZeroRuntime> ParseZeroRuntime(std::string_view name);

struct LayerModel {
  std::string name;
  std::vector<LayerProfile> layers;
  // What belongs to no layer, where Megatron runs it: the embeddings (everything before the layers) on
  // the first pipeline stage with the first layer's tp/dp/sdp, the final norm + head + loss (scope
  // "head") on the last stage with the last layer's; never checkpointed. Tied embedding/head weights
  // are counted once, on the embedding; in a pipeline the last stage holds a copy (PipelinedHead).
  LayerProfile embedding;
  LayerProfile head;
  // Of the embedding's parameters, the bytes the head reads as its weight (a tied word embedding: GPT-2,
  // BERT's MLM decoder, T5). In a pipeline the last stage keeps its own copy and the two copies'
  // gradients are summed once per step (Megatron-LM's embedding group; kiwi.torch's tied_embedding.py).
  int64_t tied_embedding_bytes = 0;
  // Gradients + optimizer states (+ fp32 master weights) per byte of parameters: e.g. fp32 Adam = 3.
  double state_bytes_per_parameter_byte = 0.0;
  // Of which gradients (ZeRO-2 shards them, ZeRO-1 only the rest): 1 where they have the parameters' dtype.
  double gradient_bytes_per_parameter_byte = 1.0;
  double GradientBytesPerParameterByte() const {
    return std::min(gradient_bytes_per_parameter_byte, state_bytes_per_parameter_byte);
  }
  double OptimizerStateBytesPerParameterByte() const {
    return state_bytes_per_parameter_byte - GradientBytesPerParameterByte();
  }
  // Tensors the optimizer step reads per parameter tensor (itself, its gradient, its states: Adam 4).
  double optimizer_tensors_per_parameter = 0.0;
  // The optimizer step run once per iteration over every device's parameters ("adam", "fused_adam", "sgd"; empty:
  // none, as in models read from Galvatron's profiles, which time no optimizer step).
  std::string optimizer;
  ZeroRuntime zero_runtime = ZeroRuntime::kOneLayer;
  // Mixed precision with an fp32 master copy per parameter: the optimizer step turns every 16-bit gradient
  // into an fp32 one, all of them there at once (layer_cost.cpp GradientsComeAsActivationsGo).
  bool master_weights = false;

  // The most experts a layer has (0: a dense model): what expert parallelism can split.
  int64_t MaxExperts() const {
    int64_t most = 0;
    for (const LayerProfile& p : layers) most = std::max(most, p.experts);
    return most;
  }
  // The sequence length context parallelism can split over every layer: the common length of their
  // attention (layers without attention split with it); 0 when some layer's attention cannot be
  // ring-split, lengths differ, or no layer has attention.
  int64_t ContextParallelSequence() const {
    int64_t sequence = 0;
    for (const LayerProfile& p : layers) {
      if (p.attention_sequence == 0) continue;
      if (p.attention_sequence < 0 || (sequence != 0 && sequence != p.attention_sequence)) return 0;
      sequence = p.attention_sequence;
    }
    return sequence;
  }
  // The model FLOPs of one training sample: every layer's, the embeddings' and the head's.
  double TrainingFlopsPerSample() const {
    double flops = embedding.flops_per_sample + head.flops_per_sample;
    for (const LayerProfile& p : layers) flops += p.flops_per_sample;
    return flops;
  }
  // Whether some layer has an attention core that selective recomputation can drop.
  bool HasAttentionCore() const {
    return std::any_of(layers.begin(), layers.end(), [](const LayerProfile& p) { return p.attention_core_bytes_per_sample > 0; });
  }
  bool operator==(const LayerModel&) const = default;
};

// Groups the training graph by layer (ir::BuildLayerView) and divides activation bytes and times by
// the graph's batch size `graph_batch` (the batch it was built for) to get per-sample figures.
Result<LayerModel> BuildLayerModel(const ir::Graph& training, int64_t graph_batch, const CostModel& cost_model);

}  // namespace kiwi::cost
