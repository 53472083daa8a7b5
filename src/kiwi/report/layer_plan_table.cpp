#include "kiwi/report/layer_plan_table.h"

#include <fmt/format.h>

#include "kiwi/report/table.h"

namespace kiwi::report {

std::string LayerPlanTable(const plan::LayerPlan& p) {
  Table t({"layers", "stage", "strategy"});
  for (const plan::LayerRun& run : plan::LayerRuns(p))
    t.AddRow({run.first == run.last ? std::to_string(run.first) : fmt::format("{}-{}", run.first, run.last),
              std::to_string(run.stage), plan::StrategyName(p.layers[static_cast<size_t>(run.first)])});
  return t.Render();
}

}  // namespace kiwi::report
