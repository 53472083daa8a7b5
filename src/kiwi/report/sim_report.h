#pragma once
// Renders the simulator's results (reports read the simulator, never a solver's internals).
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kiwi/ir/graph.h"
#include "kiwi/sim/layer_simulator.h"
#include "kiwi/sim/simulator.h"

namespace kiwi::report {

struct SimReportOptions {
  std::optional<int64_t> memory_budget;  // adds "within_budget"
  bool timeline = false;                 // include the per-step memory timeline
};

nlohmann::json ToJson(const sim::SimResult& result, const SimReportOptions& options = {});
nlohmann::json ToJson(const sim::LayerSimResult& result, const SimReportOptions& options = {});
// A stage's peak by what holds it ("memory_bytes" of kiwi simulate's stages and kiwi plan's breakdown).
nlohmann::json ToJson(const sim::StageMemorySplit& memory, int64_t peak_bytes);
// Seconds of communication by kind ("tensor_parallel", "data_parallel", "expert_parallel",
// "context_parallel", "pipeline"), as a layer plan's iteration pays them.
nlohmann::json ToJson(const cost::CommunicationByKind& communication);

// Human text: peak memory, time split, and the ops resident at the peak for operator plans.
std::string ToText(const sim::SimResult& result, const ir::Graph* graph, const SimReportOptions& options = {});
std::string ToText(const sim::LayerSimResult& result, const SimReportOptions& options = {});

}  // namespace kiwi::report
