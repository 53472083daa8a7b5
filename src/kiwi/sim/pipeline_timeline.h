#pragma once
// One iteration of a layer-level plan's pipeline, block by block: each stage's forward and backward
// passes of each micro-batch (and model chunk), in the order its schedule runs them (GPipe; 1F1B-flush;
// Megatron-LM's interleaved 1F1B), each starting when its stage is free and its input has arrived (the
// previous chunk's forward, the next chunk's backward), then the stage's unhidden gradient sync and its
// optimizer step. The blocks' lengths are the simulator's (StageResult's per-chunk seconds); the
// simulator's iteration time is Galvatron-BMW Eq. 8 (its interleaved form with v > 1), which this
// replay equals with equal stages and only approaches with unequal ones. What `kiwi plan --report` draws.
#include <vector>

#include "kiwi/plan/plan.h"
#include "kiwi/sim/layer_simulator.h"
#include "kiwi/util/result.h"

namespace kiwi::sim {

struct TimelineBlock {
  enum class Kind : uint8_t { kForward, kBackward, kGradientSync, kOptimizerStep };
  Kind kind = Kind::kForward;
  int stage = 0;
  int chunk = 0;        // the stage's model chunk (0 without interleaving)
  int micro_batch = 0;  // -1 for the sync and the step
  double start = 0.0, end = 0.0;  // seconds from the iteration's start
};

struct PipelineTimeline {
  std::vector<TimelineBlock> blocks;
  double makespan = 0.0;  // the last block's end
};

// `result` is SimulateLayerPlan's on `plan`. kBadInput when they do not match (stages, chunks).
Result<PipelineTimeline> ReplayPipeline(const plan::LayerPlan& plan, const LayerSimResult& result);

}  // namespace kiwi::sim
