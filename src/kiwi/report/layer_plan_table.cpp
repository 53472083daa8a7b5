#include "kiwi/report/layer_plan_table.h"

#include <fmt/format.h>

#include <vector>

#include "kiwi/report/table.h"

namespace kiwi::report {

std::string LayerPlanTable(const plan::LayerPlan& p) {
  Table t({"layers", "stage", "strategy"});
  std::vector<int> stage_of;
  for (size_t c = 0; c < p.pp_partition.size(); ++c)
    stage_of.insert(stage_of.end(), static_cast<size_t>(p.pp_partition[c]), p.StageOfChunk(static_cast<int>(c)));
  stage_of.resize(p.layers.size(), 0);  // no partition: one stage
  for (size_t i = 0; i < p.layers.size();) {
    size_t j = i;
    while (j + 1 < p.layers.size() && p.layers[j + 1] == p.layers[i] && stage_of[j + 1] == stage_of[i]) ++j;
    t.AddRow({i == j ? std::to_string(i) : fmt::format("{}-{}", i, j), std::to_string(stage_of[i]),
              plan::StrategyName(p.layers[i])});
    i = j + 1;
  }
  return t.Render();
}

}  // namespace kiwi::report
