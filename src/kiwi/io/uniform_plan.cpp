#include "kiwi/io/uniform_plan.h"

#include <fmt/format.h>

namespace kiwi::io {

Error Unexpressible(size_t layer, std::string_view what, std::string_view framework) {
  return BadInput(fmt::format("layer {}: {}, which {} cannot express", layer, what, framework));
}

Status CheckOneStrategy(const plan::LayerPlan& p, std::string_view framework) {
  if (p.layers.empty()) return BadInput("the plan has no layers");
  const auto without_checkpoint = [](plan::LayerStrategy s) {
    s.checkpoint = false;
    return s;
  };
  const plan::LayerStrategy& first = p.layers.front();
  for (size_t i = 1; i < p.layers.size(); ++i)
    if (without_checkpoint(p.layers[i]) != without_checkpoint(first))
      return Unexpressible(i, fmt::format("strategy {} beside layer 0's {} ({} runs one strategy in every layer)",
                                          plan::StrategyName(p.layers[i]), plan::StrategyName(first), framework),
                           framework);
  // Per layer: a set is moot in a checkpointed layer, so layer 0 alone does not say.
  for (size_t i = 0; i < p.layers.size(); ++i) {
    if (p.layers[i].RecomputesSet()) return Unexpressible(i, "a recompute set of its ops", framework);
    if (p.layers[i].offload) return Unexpressible(i, "optimizer offloading", framework);
  }
  return Status::Ok();
}

}  // namespace kiwi::io
