#include "kiwi/sim/pipeline_timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

namespace kiwi::sim {
namespace {

using Kind = TimelineBlock::Kind;

struct Op {
  bool forward = true;
  int chunk = 0;  // the stage's chunk
  int micro_batch = 0;
};

// Stage s's order of forward and backward passes (Narayanan et al. 2021 §2; Megatron-LM's schedules).
std::vector<Op> StageOrder(const plan::LayerPlan& plan, int s) {
  const int pp = plan.pp_degree, m = plan.micro_batches, v = plan.virtual_stages;
  std::vector<Op> order;
  if (plan.pipeline == plan::PipelineSchedule::kGPipe) {
    for (int i = 0; i < m; ++i) order.push_back({true, 0, i});
    for (int i = 0; i < m; ++i) order.push_back({false, 0, i});
    return order;
  }
  // Forward k and backward k of the stage's m x v: chunk by groups of pp micro-batches (v = 1: chunk 0,
  // micro-batch k).
  const auto nth = [&](int k, bool forward) {
    const int group = k % (pp * v);
    const int chunk = forward ? group / pp : v - 1 - group / pp;
    return Op{forward, chunk, (k / (pp * v)) * pp + k % pp};
  };
  const int total = m * v;
  const int warmup = v == 1 ? std::min(pp - s - 1, m) : std::min((pp - s - 1) * 2 + (v - 1) * pp, total);
  int f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back(nth(f, true));
  for (; f < total; ++f, ++b) {
    order.push_back(nth(f, true));
    order.push_back(nth(b, false));
  }
  for (; b < total; ++b) order.push_back(nth(b, false));
  return order;
}

}  // namespace

Result<PipelineTimeline> ReplayPipeline(const plan::LayerPlan& plan, const LayerSimResult& result) {
  const int pp = plan.pp_degree, v = plan.virtual_stages;
  if (static_cast<int>(result.stages.size()) != pp)
    return BadInput(fmt::format("pipeline timeline: {} stages simulated, the plan has {}", result.stages.size(), pp));
  for (const StageResult& stage : result.stages)
    if (static_cast<int>(stage.chunk_forward_seconds.size()) != v || static_cast<int>(stage.chunk_backward_seconds.size()) != v)
      return BadInput(fmt::format("pipeline timeline: a stage simulated with {} chunks, the plan has {}",
                                  stage.chunk_forward_seconds.size(), v));
  std::vector<std::vector<Op>> orders;
  for (int s = 0; s < pp; ++s) orders.push_back(StageOrder(plan, s));
  // When each (forward?, global chunk, micro-batch) pass ended; global chunk g runs on stage g % pp.
  std::map<std::tuple<bool, int, int>, double> done;
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  std::vector<double> free_at(static_cast<size_t>(pp), 0.0);
  PipelineTimeline t;
  const int last = pp * v - 1;
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int s = 0; s < pp; ++s) {
      while (next[static_cast<size_t>(s)] < orders[static_cast<size_t>(s)].size()) {
        const Op op = orders[static_cast<size_t>(s)][next[static_cast<size_t>(s)]];
        const int g = op.chunk * pp + s;
        // a forward waits for the previous chunk's forward, a backward for the next chunk's backward
        // (the last chunk's for its own forward)
        const auto input = op.forward ? std::tuple{true, g - 1, op.micro_batch}
                                      : (g == last ? std::tuple{true, g, op.micro_batch} : std::tuple{false, g + 1, op.micro_batch});
        double ready = 0.0;
        if (!(op.forward && g == 0)) {
          const auto it = done.find(input);
          if (it == done.end()) break;
          ready = it->second;
        }
        const StageResult& stage = result.stages[static_cast<size_t>(s)];
        const double length = (op.forward ? stage.chunk_forward_seconds : stage.chunk_backward_seconds)[static_cast<size_t>(op.chunk)];
        const double start = std::max(ready, free_at[static_cast<size_t>(s)]);
        t.blocks.push_back({op.forward ? Kind::kForward : Kind::kBackward, s, op.chunk, op.micro_batch, start, start + length});
        free_at[static_cast<size_t>(s)] = start + length;
        done[{op.forward, g, op.micro_batch}] = start + length;
        ++next[static_cast<size_t>(s)];
        progressed = true;
      }
    }
  }
  for (int s = 0; s < pp; ++s)
    if (next[static_cast<size_t>(s)] != orders[static_cast<size_t>(s)].size())
      return BadInput(fmt::format("pipeline timeline: stage {} cannot run its schedule (micro-batches {} over {} stages)", s,
                                  plan.micro_batches, pp));
  // Then each stage's unhidden gradient sync; the steps start together once every stage has synced.
  double synced = 0.0;
  for (int s = 0; s < pp; ++s) {
    const double end = free_at[static_cast<size_t>(s)] + result.stages[static_cast<size_t>(s)].gradient_sync_seconds;
    if (end > free_at[static_cast<size_t>(s)]) t.blocks.push_back({Kind::kGradientSync, s, 0, -1, free_at[static_cast<size_t>(s)], end});
    synced = std::max(synced, end);
  }
  for (int s = 0; s < pp; ++s) {
    const double step = result.stages[static_cast<size_t>(s)].optimizer_seconds;
    if (step > 0.0) t.blocks.push_back({Kind::kOptimizerStep, s, 0, -1, synced, synced + step});
  }
  for (const TimelineBlock& b : t.blocks) t.makespan = std::max(t.makespan, b.end);
  return t;
}

}  // namespace kiwi::sim
