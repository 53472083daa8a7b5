// Swin Transformer (Liu et al. 2021): hierarchical stages of window attention with patch merging.
// Each stage doubles the width and the heads (heads = dim / 32 for Swin-H); attention runs over
// non-overlapping windows of window^2 tokens as batch dims [b * num_windows, heads]. Shifted windows
// are modelled as regular windows: the cyclic shift moves data but changes no shape, flop or byte count
// that the planner sees (the IR has no roll op).
#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "kiwi/models/builder.h"

namespace kiwi::models::detail {
namespace {

constexpr int64_t kMlpRatio = 4;

// [b, R*R, C] -> [b * (R/w)^2, w*w, C]: tokens grouped by window.
NodeId WindowPartition(GraphBuilder& gb, NodeId x, int64_t resolution, int64_t window) {
  const Shape& in = gb.shape(x);
  const int64_t b = in[0], c = in[2], n = resolution / window;
  NodeId r = Reshape(gb, "window_split", x, {b, n, window, n, window, c});
  NodeId t = Transpose(gb, "window_order", r, {0, 1, 3, 2, 4, 5});
  return Reshape(gb, "windows", t, {b * n * n, window * window, c});
}

// Inverse of WindowPartition.
NodeId WindowReverse(GraphBuilder& gb, NodeId x, int64_t batch, int64_t resolution, int64_t window) {
  const int64_t c = gb.shape(x).back(), n = resolution / window;
  NodeId r = Reshape(gb, "window_unsplit", x, {batch, n, n, window, window, c});
  NodeId t = Transpose(gb, "window_unorder", r, {0, 1, 3, 2, 4, 5});
  return Reshape(gb, "unwindows", t, {batch, resolution * resolution, c});
}

// Relative position bias of one block: table[(2w-1)^2, heads] gathered by a [T, T] index -> [heads, T, T].
NodeId WindowBias(GraphBuilder& gb, NodeId index, const SwinStage& stage) {
  const int64_t span = 2 * stage.window - 1;
  NodeId table = gb.Parameter("relative_bias.weight", {span * span, stage.heads});
  return Transpose(gb, "relative_bias", Embedding(gb, "relative_bias_lookup", table, index), {2, 0, 1});
}

NodeId SwinBlock(GraphBuilder& gb, int32_t layer, NodeId x, const SwinStage& stage, NodeId index, double p) {
  const int64_t batch = gb.shape(x)[0];
  gb.Enter(layer, fmt::format("layer{}.attn", layer));
  NodeId windows = WindowPartition(gb, Norm(gb, "norm", x, NormKind::kLayerNorm), stage.resolution, stage.window);
  AttentionOptions attn = {.heads = stage.heads, .kv_heads = stage.heads, .bias = true, .rotary = false,
                           .dropout_p = p, .score_bias = WindowBias(gb, index, stage)};
  NodeId a = WindowReverse(gb, Attention(gb, windows, windows, attn), batch, stage.resolution, stage.window);
  x = Binary(gb, "add", "residual", x, a);
  gb.Enter(layer, fmt::format("layer{}.mlp", layer));
  MlpOptions mlp = {.ffn = kMlpRatio * stage.dim, .activation = Activation::kGelu, .bias = true, .dropout_p = p};
  return Binary(gb, "add", "residual", x, FeedForward(gb, Norm(gb, "norm", x, NormKind::kLayerNorm), mlp));
}

// Patch merging: 2x2 neighbouring tokens concatenated (reshape + transpose), layernorm, 4C -> 2C.
NodeId PatchMerge(GraphBuilder& gb, int32_t layer, NodeId x, const SwinStage& stage) {
  gb.Enter(layer, fmt::format("layer{}.merge", layer));
  const int64_t b = gb.shape(x)[0], c = stage.dim, half = stage.resolution / 2;
  NodeId r = Reshape(gb, "split", x, {b, half, 2, half, 2, c});
  NodeId t = Transpose(gb, "gather", r, {0, 1, 3, 4, 2, 5});
  NodeId merged = Reshape(gb, "merge", t, {b, half * half, 4 * c});
  return Linear(gb, "reduction", Norm(gb, "norm", merged, NormKind::kLayerNorm), 2 * c, false);
}

NodeId PatchEmbedding(GraphBuilder& gb, const TransformerConfig& c, const SwinStage& first) {
  NodeId image = gb.Input("image", c.dtype, {c.batch, kImageChannels, c.image, c.image});
  NodeId w = gb.Parameter("patch.weight", {first.dim, kImageChannels, c.patch, c.patch});
  NodeId x = Conv2d(gb, "patch", image, w, gb.Parameter("patch.bias", {first.dim}), c.patch);
  const int64_t tokens = first.resolution * first.resolution;
  x = Transpose(gb, "tokens", Reshape(gb, "flatten", x, {c.batch, first.dim, tokens}), {0, 2, 1});
  return Norm(gb, "patch_norm", x, NormKind::kLayerNorm);
}

}  // namespace

std::vector<SwinStage> SwinStages(const TransformerConfig& c) {
  std::vector<SwinStage> stages;
  int64_t scale = 1;
  for (int depth : c.stage_depths) {
    const int64_t resolution = c.image / c.patch / scale;
    stages.push_back({.dim = c.hidden * scale, .heads = c.heads * scale, .resolution = resolution,
                      .window = std::min(c.window, resolution), .depth = depth});
    scale *= 2;
  }
  return stages;
}

Status ValidateSwin(const TransformerConfig& c) {
  if (c.stage_depths.empty()) return BadInput("stage_depths: swin needs at least one stage");
  int total = 0;
  for (int depth : c.stage_depths) {
    if (depth <= 0) return BadInput(fmt::format("stage_depths: depth {} must be positive", depth));
    total += depth;
  }
  if (total != c.layers)
    return BadInput(fmt::format("stage_depths: sum {} differs from layers {}", total, c.layers));
  for (auto [value, field] : {std::pair{c.image, "image"}, {c.patch, "patch"}, {c.window, "window"}}) {
    if (value <= 0) return BadInput(fmt::format("{}: must be positive, got {}", field, value));
  }
  const int64_t merges = int64_t{1} << (c.stage_depths.size() - 1);
  if (c.image % (c.patch * merges) != 0)
    return BadInput(fmt::format("image: {} is not divisible by patch {} x {} (patch merging)",
                                c.image, c.patch, merges));
  for (const SwinStage& stage : SwinStages(c)) {
    if (stage.resolution % stage.window != 0)
      return BadInput(fmt::format("window: {} does not divide the stage resolution {}", stage.window,
                                  stage.resolution));
  }
  return Status::Ok();
}

Result<ir::Graph> BuildSwinForward(const TransformerConfig& c) {
  GraphBuilder gb("swin", c.dtype);
  const std::vector<SwinStage> stages = SwinStages(c);
  const double p = c.dropout ? c.dropout_p : 0.0;
  gb.Enter(-1, "embed");
  NodeId x = c.embeddings ? Dropout(gb, "dropout", PatchEmbedding(gb, c, stages[0]), p)
                          : gb.Input("hidden", c.dtype, {c.batch, stages[0].resolution * stages[0].resolution,
                                                         stages[0].dim});
  std::vector<std::pair<int64_t, NodeId>> index_by_window;  // one relative-position index per window size
  for (const SwinStage& stage : stages) {
    if (!index_by_window.empty() && index_by_window.back().first == stage.window) continue;
    const int64_t t = stage.window * stage.window;
    index_by_window.emplace_back(stage.window, gb.Input(fmt::format("relative_index_w{}", stage.window),
                                                        ir::DType::kI64, {t, t}));
  }
  int32_t layer = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    NodeId index = ir::kNoNode;
    for (const auto& [window, id] : index_by_window) if (window == stages[s].window) index = id;
    for (int j = 0; j < stages[s].depth; ++j) x = SwinBlock(gb, layer++, x, stages[s], index, p);
    if (s + 1 < stages.size()) x = PatchMerge(gb, layer - 1, x, stages[s]);  // part of the stage, as in Swin
  }
  if (c.embeddings) {
    gb.Enter(-1, "head");
    x = ReduceMean(gb, "pool", Norm(gb, "final_norm", x, NormKind::kLayerNorm), 1);
    x = Linear(gb, "classifier", x, c.vocab, true);
  }
  LossHead(gb, x);
  return std::move(gb).Finish();
}

int64_t SwinParameterCount(const TransformerConfig& c) {
  const std::vector<SwinStage> stages = SwinStages(c);
  int64_t total = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    const int64_t dim = stages[s].dim, span = 2 * stages[s].window - 1;
    total += stages[s].depth * (12 * dim * dim + 13 * dim + span * span * stages[s].heads);
    if (s + 1 < stages.size()) total += 8 * dim * dim + 8 * dim;  // merge: layernorm(4C) + 4C x 2C
  }
  if (!c.embeddings) return total;
  const int64_t first = stages.front().dim, last = stages.back().dim;
  total += kImageChannels * c.patch * c.patch * first + first + 2 * first;  // conv + bias + patch norm
  return total + 2 * last + last * c.vocab + c.vocab;                      // final norm + classifier
}

}  // namespace kiwi::models::detail
