// What the layer plan's readers (io/plan_json.cpp, sim/layer_simulator.cpp) say of a partition of the
// wrong length (plan.h PartitionLengthError), and a plan's layers by stage and by runs of one strategy.
#include <fmt/format.h>

#include "kiwi/plan/plan.h"

namespace kiwi::plan {

std::string PartitionLengthError(const LayerPlan& plan) {
  if (plan.virtual_stages == 1)
    return fmt::format("has {} stages, pp_degree is {}", plan.pp_partition.size(), plan.pp_degree);
  return fmt::format("has {} chunks, pp_degree {} x virtual_stages {} is {}", plan.pp_partition.size(), plan.pp_degree,
                     plan.virtual_stages, plan.NumChunks());
}

std::vector<int> LayerStages(const LayerPlan& plan) {
  std::vector<int> stage_of;
  for (size_t c = 0; c < plan.pp_partition.size(); ++c)
    stage_of.insert(stage_of.end(), static_cast<size_t>(plan.pp_partition[c]), plan.StageOfChunk(static_cast<int>(c)));
  stage_of.resize(plan.layers.size(), 0);
  return stage_of;
}

std::vector<LayerRun> LayerRuns(const LayerPlan& plan) {
  const std::vector<int> stage_of = LayerStages(plan);
  std::vector<LayerRun> runs;
  for (size_t i = 0; i < plan.layers.size();) {
    size_t j = i;
    while (j + 1 < plan.layers.size() && plan.layers[j + 1] == plan.layers[i] && stage_of[j + 1] == stage_of[i]) ++j;
    runs.push_back({static_cast<int>(i), static_cast<int>(j), stage_of[i]});
    i = j + 1;
  }
  return runs;
}

}  // namespace kiwi::plan
