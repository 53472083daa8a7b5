#pragma once
// The figures of `kiwi plan --report` as standalone SVG text: the pipeline's timeline (a Gantt chart of
// one iteration), each stage's memory by kind against the budget, and the layers' strategies along the
// model. Colors are fixed per kind (kFigureColors), so a screenshot can be checked for each figure.
#include <cstdint>
#include <string>

#include "kiwi/plan/plan.h"
#include "kiwi/sim/layer_simulator.h"
#include "kiwi/sim/pipeline_timeline.h"

namespace kiwi::report {

struct FigureColors {
  const char* forward = "#4e79a7";
  const char* backward = "#59a14f";
  const char* gradient_sync = "#f28e2b";
  const char* optimizer_step = "#9c755f";
  const char* parameters = "#2f5f8a";
  const char* gradients = "#76b7b2";
  const char* optimizer_states = "#e39c42";
  const char* activations = "#8cd17d";
  const char* buffers = "#edc948";
  const char* reserved = "#bab0ac";
  const char* budget = "#e15759";
};
inline constexpr FigureColors kFigureColors{};

// Rows per stage, blocks per pass (micro-batch numbers where they fit); a dashed line at
// `predicted_seconds` (the simulator's iteration).
std::string TimelineSvg(const sim::PipelineTimeline& timeline, int stages, double predicted_seconds);

// One stacked bar per stage (StageResult::memory), a line at the budget.
std::string StageMemorySvg(const sim::LayerSimResult& result, int64_t budget_bytes);

// One cell per layer colored by its strategy, stage boundaries marked, a legend of the strategies.
std::string LayerStrategySvg(const plan::LayerPlan& plan);

}  // namespace kiwi::report
