// The multi-layer perceptron of the KIWI paper's Table 1: each linear (+bias) and its activation is
// one layer of the layer view; the last layer's activations feed a cross-entropy loss.
#include "kiwi/models/mlp.h"

#include <fmt/format.h>

#include "kiwi/models/builder.h"

namespace kiwi::models {
namespace {

Status ValidateMlp(const MlpConfig& config) {
  if (config.widths.size() < 2)
    return BadInput(fmt::format("mlp config: widths: needs at least 2 entries (one layer), got {}",
                                config.widths.size()));
  for (size_t i = 0; i < config.widths.size(); ++i) {
    if (config.widths[i] <= 0)
      return BadInput(fmt::format("mlp config: widths[{}]: must be positive, got {}", i, config.widths[i]));
  }
  if (config.batch <= 0) return BadInput(fmt::format("mlp config: batch: must be positive, got {}", config.batch));
  if (config.activation != "relu" && config.activation != "gelu")
    return BadInput(fmt::format("mlp config: activation: '{}' is not relu or gelu", config.activation));
  return Status::Ok();
}

}  // namespace

Result<ir::Graph> BuildMlpForward(const MlpConfig& config) {
  KIWI_RETURN_IF_ERROR(ValidateMlp(config));
  detail::GraphBuilder gb("mlp", config.dtype);
  gb.Enter(-1, "input");
  detail::NodeId x = gb.Input("x", config.dtype, {config.batch, config.widths.front()});
  for (size_t i = 0; i + 1 < config.widths.size(); ++i) {
    const int32_t layer = static_cast<int32_t>(i);
    gb.Enter(layer, fmt::format("layer{}", layer));
    x = detail::Linear(gb, "fc", x, config.widths[i + 1], config.bias);
    x = detail::Unary(gb, config.activation, "act", x);
  }
  detail::LossHead(gb, x);
  return std::move(gb).Finish();
}

}  // namespace kiwi::models
