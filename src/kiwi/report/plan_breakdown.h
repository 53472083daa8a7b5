#pragma once
// Why one layer-level plan beats another: where its iteration goes (the simulator's time buckets and
// the pipeline bubble within them), what its devices send by kind, and what holds its largest stage's
// memory, side by side for several plans.
#include <cstdint>
#include <string>
#include <vector>

#include "kiwi/sim/layer_simulator.h"

namespace kiwi::report {

// Bytes one device of each stage passes to collectives and sends per iteration (sim::PlanTraffic),
// summed over the stages, by parallelism.
struct TrafficByKind {
  int64_t tensor_parallel = 0;  // TP all-reduces; SP all-gathers, reduce-scatters and gathers
  int64_t data_parallel = 0;    // DP all-reduces, ZeRO reduce-scatters and all-gathers
  int64_t expert_parallel = 0;  // the all-to-alls and the experts' gradient syncs and gathers
  int64_t context_parallel = 0; // ring attention's sends and the reshards between CP degrees
  int64_t pipeline = 0;         // activations and gradients sent between stages
  int64_t resharding = 0;       // Slice-Gather between layers of different layouts
};
TrafficByKind SumTraffic(const sim::PlanTraffic& traffic);

struct PlanBreakdown {
  std::string name;
  sim::LayerSimResult simulated;
  TrafficByKind traffic;
  // The stage with the largest peak.
  const sim::StageResult& LargestStage() const;
};

// Rows: time (compute with the optimizer step, recompute, communication and its kinds, resharding, of
// which pipeline bubble, iteration), bytes sent by kind, memory of the largest stage by kind and its peak; one column
// per plan after the row's label (section rows have empty cells). The header: "" and the plans' names.
std::vector<std::vector<std::string>> BreakdownRows(const std::vector<PlanBreakdown>& plans);
std::vector<std::string> BreakdownHeader(const std::vector<PlanBreakdown>& plans);
// The rows as a text table.
std::string BreakdownTable(const std::vector<PlanBreakdown>& plans);

}  // namespace kiwi::report
