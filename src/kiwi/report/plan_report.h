#pragma once
// `kiwi plan --report`: one self-contained HTML page (inline CSS and SVG, nothing fetched) with the
// best plan, the planners beside it, why it wins, and the figures (report/plan_figures.h): the
// pipeline's timeline, memory per stage against the budget, the layers' strategies, and throughput
// against the memory budget for kiwi and the alternatives.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiwi/plan/plan.h"
#include "kiwi/report/plan_breakdown.h"
#include "kiwi/report/svg_plot.h"
#include "kiwi/sim/layer_simulator.h"
#include "kiwi/sim/pipeline_timeline.h"

namespace kiwi::report {

struct HtmlTable {
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
};

struct PlanReport {
  std::string title;                                      // "kiwi plan: gpt on v100-nvlink-8"
  std::vector<std::pair<std::string, std::string>> facts;  // ("model", "gpt: 4 layers, ..."), ...
  std::string verdict;                                    // one line: the best plan and its throughput
  plan::LayerPlan best_plan;
  sim::LayerSimResult best;
  sim::PipelineTimeline timeline;
  int64_t budget_bytes = 0;
  HtmlTable planners;                    // each planner's fastest plan that fits
  std::vector<PlanBreakdown> breakdowns;  // the best and the next best
  LinePlot throughput_curve;             // samples/s against the memory budget, one series per planner
  HtmlTable refinement;                  // operator-level refinement per strategy (kiwi plan --refine); may be empty
};

std::string RenderPlanReport(const PlanReport& report);

}  // namespace kiwi::report
