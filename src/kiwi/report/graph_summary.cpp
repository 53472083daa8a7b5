#include "kiwi/report/graph_summary.h"

#include <fmt/format.h>

#include <set>

#include "kiwi/ir/backward.h"
#include "kiwi/sim/simulator.h"
#include "kiwi/util/units.h"

namespace kiwi::report {

Result<GraphSummary> SummarizeGraph(const ir::Graph& graph, const cost::CostModel& cost_model) {
  GraphSummary s;
  s.name = graph.name();
  s.nodes = graph.size();
  s.edges = graph.NumEdges();
  s.forward_nodes = graph.NumNodes(ir::Pass::kForward);
  s.backward_nodes = graph.NumNodes(ir::Pass::kBackward);
  std::set<int32_t> layers;
  s.measured_costs = true;
  for (const ir::Node& n : graph.nodes()) {
    if (n.is_persistent()) s.persistent_bytes += n.output.Bytes();
    if (n.kind == ir::OpKind::kParameter) s.parameters += n.output.NumElements();
    if (n.layer >= 0) layers.insert(n.layer);
    if (!n.measured_cost && !n.is_persistent() && n.kind != ir::OpKind::kInput) s.measured_costs = false;
  }
  s.layers = static_cast<int64_t>(layers.size());
  s.saved_activation_bytes = ir::SavedActivationBytes(graph);

  const ir::DeviceMesh one_device{{ir::MeshAxis{}}};
  Result<sim::SimResult> sim = sim::SimulateOperatorPlan(graph, plan::OperatorPlan{}, cost_model, one_device);
  if (!sim) return sim.error();
  s.checkpoint_all_peak_bytes = sim->peak_memory_bytes;
  s.compute_cost = sim->time.total();
  s.per_op_seconds = cost_model.KernelOverhead();
  return s;
}

nlohmann::json ToJson(const GraphSummary& s) {
  return {{"name", s.name},
          {"nodes", s.nodes},
          {"edges", s.edges},
          {"forward_nodes", s.forward_nodes},
          {"backward_nodes", s.backward_nodes},
          {"checkpoint_all_peak_bytes", s.checkpoint_all_peak_bytes},
          {"compute_cost", s.compute_cost},
          {"compute_cost_unit", s.measured_costs ? "as measured in the graph file" : "seconds"},
          {"parameters", s.parameters},
          {"persistent_bytes", s.persistent_bytes},
          {"saved_activation_bytes", s.saved_activation_bytes},
          {"layers", s.layers},
          {"per_op_seconds", s.per_op_seconds}};
}

std::string ToText(const GraphSummary& s) {
  const std::string cost = s.measured_costs ? fmt::format("{:g} (the graph file's unit)", s.compute_cost)
                                            : FormatSeconds(s.compute_cost) + " (roofline, one device)";
  std::string out = fmt::format("graph {}\n", s.name.empty() ? "(unnamed)" : s.name);
  out += fmt::format("  nodes                   {} ({} forward, {} backward), {} edges\n", s.nodes,
                     s.forward_nodes, s.backward_nodes, s.edges);
  if (s.layers > 0) out += fmt::format("  layers                  {}\n", s.layers);
  out += fmt::format("  checkpoint-all peak     {} ({} bytes)\n", FormatBytes(s.checkpoint_all_peak_bytes),
                     s.checkpoint_all_peak_bytes);
  out += fmt::format("  compute cost            {}\n", cost);
  if (s.per_op_seconds > 0.0)
    out += fmt::format("  per-op time             {} (each op, beyond its work)\n", FormatSeconds(s.per_op_seconds));
  if (s.parameters > 0) {
    const double n = static_cast<double>(s.parameters);
    out += fmt::format("  parameters              {} ({:.2f} {})\n", s.parameters, n >= 1e9 ? n / 1e9 : n / 1e6,
                       n >= 1e9 ? "billion" : "million");
  }
  if (s.persistent_bytes > 0)
    out += fmt::format("  parameters + optimizer  {}\n", FormatBytes(s.persistent_bytes));
  out += fmt::format("  saved for backward      {}\n", FormatBytes(s.saved_activation_bytes));
  return out;
}

}  // namespace kiwi::report
