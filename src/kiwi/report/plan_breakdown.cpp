#include "kiwi/report/plan_breakdown.h"

#include <algorithm>
#include <functional>

#include "kiwi/report/table.h"
#include "kiwi/util/units.h"

namespace kiwi::report {
namespace {

void Add(const sim::LayerTraffic& t, TrafficByKind& k) {
  k.tensor_parallel += t.tp_all_reduce_bytes + t.sp_all_gather_bytes + t.sp_reduce_scatter_bytes +
                       t.sp_gradient_all_reduce_bytes + t.sequence_gather_bytes + t.sequence_gather_backward_bytes;
  k.data_parallel += t.dp_all_reduce_bytes + t.sdp_reduce_scatter_bytes + t.sdp_all_gather_bytes + t.step_all_gather_bytes;
  k.expert_parallel += t.all_to_all_bytes + t.expert_dp_all_reduce_bytes + t.expert_reduce_scatter_bytes +
                       t.expert_step_all_gather_bytes;
  k.context_parallel += t.ring_bytes + t.ulysses_bytes + t.context_reshard_bytes;
  k.resharding += t.slice_gather_bytes + t.slice_gather_backward_bytes;
}

}  // namespace

TrafficByKind SumTraffic(const sim::PlanTraffic& traffic) {
  TrafficByKind k;
  for (const sim::LayerTraffic& t : traffic.layers) Add(t, k);
  Add(traffic.embedding, k);
  Add(traffic.head, k);
  for (int64_t b : traffic.send_forward_bytes) k.pipeline += b;
  for (int64_t b : traffic.send_backward_bytes) k.pipeline += b;
  return k;
}

const sim::StageResult& PlanBreakdown::LargestStage() const {
  return *std::max_element(simulated.stages.begin(), simulated.stages.end(),
                           [](const sim::StageResult& a, const sim::StageResult& b) {
                             return a.peak_memory_bytes < b.peak_memory_bytes;
                           });
}

std::vector<std::string> BreakdownHeader(const std::vector<PlanBreakdown>& plans) {
  std::vector<std::string> headers = {""};
  for (const PlanBreakdown& p : plans) headers.push_back(p.name);
  return headers;
}

std::vector<std::vector<std::string>> BreakdownRows(const std::vector<PlanBreakdown>& plans) {
  std::vector<std::vector<std::string>> rows;
  const auto row = [&](const std::string& label, const std::function<std::string(const PlanBreakdown&)>& cell) {
    std::vector<std::string> cells = {label};
    for (const PlanBreakdown& p : plans) cells.push_back(cell(p));
    rows.push_back(std::move(cells));
  };
  const auto section = [&](const std::string& label) { row(label, [](const PlanBreakdown&) { return std::string(); }); };
  const auto seconds = [&](const std::string& label, const std::function<double(const PlanBreakdown&)>& of) {
    row(label, [&](const PlanBreakdown& p) { return FormatSeconds(of(p)); });
  };
  const auto bytes = [&](const std::string& label, const std::function<int64_t(const PlanBreakdown&)>& of) {
    row(label, [&](const PlanBreakdown& p) { return FormatBytes(of(p)); });
  };
  section("time per iteration");
  seconds("  compute (+ optimizer step)", [](const PlanBreakdown& p) { return p.simulated.summary.time.compute; });
  seconds("  recompute", [](const PlanBreakdown& p) { return p.simulated.summary.time.recompute; });
  seconds("  communication", [](const PlanBreakdown& p) { return p.simulated.summary.time.communication; });
  seconds("    tensor / sequence parallel", [](const PlanBreakdown& p) { return p.simulated.communication.tensor_parallel; });
  seconds("    data parallel / ZeRO", [](const PlanBreakdown& p) { return p.simulated.communication.data_parallel; });
  seconds("    expert parallel", [](const PlanBreakdown& p) { return p.simulated.communication.expert_parallel; });
  seconds("    context parallel", [](const PlanBreakdown& p) { return p.simulated.communication.context_parallel; });
  seconds("    pipeline sends", [](const PlanBreakdown& p) { return p.simulated.communication.pipeline; });
  seconds("  resharding", [](const PlanBreakdown& p) { return p.simulated.summary.time.resharding; });
  seconds("  of these, pipeline bubble", [](const PlanBreakdown& p) { return p.simulated.pipeline_bubble_seconds; });
  seconds("  iteration", [](const PlanBreakdown& p) { return p.simulated.summary.iteration_seconds; });
  section("sent per iteration (a device per stage)");
  bytes("  tensor / sequence parallel", [](const PlanBreakdown& p) { return p.traffic.tensor_parallel; });
  bytes("  data parallel / ZeRO", [](const PlanBreakdown& p) { return p.traffic.data_parallel; });
  bytes("  expert parallel", [](const PlanBreakdown& p) { return p.traffic.expert_parallel; });
  bytes("  context parallel", [](const PlanBreakdown& p) { return p.traffic.context_parallel; });
  bytes("  pipeline sends", [](const PlanBreakdown& p) { return p.traffic.pipeline; });
  bytes("  resharding", [](const PlanBreakdown& p) { return p.traffic.resharding; });
  section("memory per device (largest stage)");
  bytes("  parameters", [](const PlanBreakdown& p) { return p.LargestStage().memory.parameters; });
  bytes("  gradients", [](const PlanBreakdown& p) { return p.LargestStage().memory.gradients; });
  bytes("  optimizer states", [](const PlanBreakdown& p) { return p.LargestStage().memory.optimizer_states; });
  bytes("  activations", [](const PlanBreakdown& p) { return p.LargestStage().memory.activations; });
  bytes("  backward / ZeRO buffers", [](const PlanBreakdown& p) { return p.LargestStage().memory.buffers; });
  bytes("  reserve", [](const PlanBreakdown& p) { return p.LargestStage().memory.reserved; });
  bytes("  peak", [](const PlanBreakdown& p) { return p.LargestStage().peak_memory_bytes; });
  return rows;
}

std::string BreakdownTable(const std::vector<PlanBreakdown>& plans) {
  Table t(BreakdownHeader(plans));
  for (std::vector<std::string>& row : BreakdownRows(plans)) t.AddRow(std::move(row));
  return t.Render();
}

}  // namespace kiwi::report
