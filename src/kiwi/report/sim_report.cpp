#include "kiwi/report/sim_report.h"

#include <fmt/format.h>

#include "kiwi/report/table.h"
#include "kiwi/util/units.h"

namespace kiwi::report {
namespace {

nlohmann::json TimeJson(const sim::TimeBreakdown& t) {
  return {{"compute_seconds", t.compute},
          {"recompute_seconds", t.recompute},
          {"communication_seconds", t.communication},
          {"resharding_seconds", t.resharding}};
}

std::string TimeText(const sim::TimeBreakdown& t, double iteration) {
  std::string out = fmt::format("  iteration time   {}\n", FormatSeconds(iteration));
  auto share = [&](const char* name, double v) {
    if (v > 0) out += fmt::format("    {:<14} {:>10}  ({:.1f}%)\n", name, FormatSeconds(v), 100.0 * v / t.total());
  };
  share("compute", t.compute);
  share("recompute", t.recompute);
  share("communication", t.communication);
  share("resharding", t.resharding);
  return out;
}

std::string BudgetText(int64_t peak, const SimReportOptions& o) {
  if (!o.memory_budget) return "";
  return fmt::format("  budget           {} per device: {}\n", FormatBytes(*o.memory_budget),
                     peak <= *o.memory_budget ? "fits" : "DOES NOT FIT");
}

// "0-5", or "0-5,48-53" for an interleaved stage's chunks.
std::string LayerRanges(const std::vector<int>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    out += fmt::format("{}{}-{}", out.empty() ? "" : ",", layers[i], layers[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

nlohmann::json ToJson(const sim::SimResult& r, const SimReportOptions& o) {
  nlohmann::json j = {{"peak_memory_bytes", r.peak_memory_bytes},
                      {"peak_memory_per_device", r.peak_memory_per_device},
                      {"peak_step", r.peak_step},
                      {"iteration_seconds", r.iteration_seconds},
                      {"recomputations", r.recomputations},
                      {"time", TimeJson(r.time)}};
  if (o.memory_budget) {
    j["memory_budget_bytes"] = *o.memory_budget;
    j["within_budget"] = r.peak_memory_bytes <= *o.memory_budget;
  }
  if (o.timeline) {
    nlohmann::json events = nlohmann::json::array();
    for (const sim::MemoryEvent& e : r.timeline)
      events.push_back({{"step", e.step},
                        {"op", e.kind == plan::StepKind::kCompute ? "compute" : "free"},
                        {"node", e.node},
                        {"bytes_after", e.bytes_after}});
    j["timeline"] = std::move(events);
  }
  return j;
}

nlohmann::json ToJson(const sim::StageMemorySplit& m, int64_t peak_bytes) {
  return {{"parameters", m.parameters}, {"gradients", m.gradients}, {"optimizer_states", m.optimizer_states},
          {"activations", m.activations}, {"buffers", m.buffers}, {"reserved", m.reserved}, {"peak", peak_bytes}};
}

nlohmann::json ToJson(const cost::CommunicationByKind& c) {
  return {{"tensor_parallel", c.tensor_parallel},
          {"data_parallel", c.data_parallel},
          {"expert_parallel", c.expert_parallel},
          {"context_parallel", c.context_parallel},
          {"pipeline", c.pipeline}};
}

nlohmann::json ToJson(const sim::LayerSimResult& r, const SimReportOptions& o) {
  nlohmann::json j = ToJson(r.summary, o);
  j["throughput_samples_per_second"] = r.throughput_samples_per_second;
  j["communication_seconds"] = ToJson(r.communication);
  j["pipeline_bubble_seconds"] = r.pipeline_bubble_seconds;
  nlohmann::json stages = nlohmann::json::array();
  for (const sim::StageResult& s : r.stages)
    stages.push_back({{"layers", s.layers},
                      {"peak_memory_bytes", s.peak_memory_bytes},
                      {"memory_bytes", ToJson(s.memory, s.peak_memory_bytes)},
                      {"microbatch_seconds", s.microbatch_seconds},
                      {"gradient_sync_seconds", s.gradient_sync_seconds}});
  j["stages"] = std::move(stages);
  return j;
}

std::string ToText(const sim::SimResult& r, const ir::Graph* graph, const SimReportOptions& o) {
  std::string out = fmt::format("  peak memory      {} per device", FormatBytes(r.peak_memory_bytes));
  if (graph != nullptr && r.peak_step >= 0 && static_cast<size_t>(r.peak_step) < r.timeline.size()) {
    const ir::NodeId at = r.timeline[static_cast<size_t>(r.peak_step)].node;
    out += fmt::format(" (right after computing '{}', step {})", graph->node(at).name, r.peak_step);
  }
  out += '\n' + BudgetText(r.peak_memory_bytes, o) + TimeText(r.time, r.iteration_seconds);
  if (r.recomputations > 0) out += fmt::format("  recomputations   {}\n", r.recomputations);
  return out;
}

std::string ToText(const sim::LayerSimResult& r, const SimReportOptions& o) {
  std::string out = fmt::format("  peak memory      {} per device (largest stage)\n", FormatBytes(r.summary.peak_memory_bytes));
  out += BudgetText(r.summary.peak_memory_bytes, o) + TimeText(r.summary.time, r.summary.iteration_seconds);
  out += fmt::format("  throughput       {:.2f} samples/s\n", r.throughput_samples_per_second);
  Table t({"stage", "layers", "peak memory", "micro-batch time", "grad sync"});
  for (size_t i = 0; i < r.stages.size(); ++i) {
    const sim::StageResult& s = r.stages[i];
    const std::string layers = s.layers.empty() ? "-" : LayerRanges(s.layers);
    t.AddRow({std::to_string(i), layers, FormatBytes(s.peak_memory_bytes), FormatSeconds(s.microbatch_seconds),
              FormatSeconds(s.gradient_sync_seconds)});
  }
  return out + t.Render();
}

}  // namespace kiwi::report
