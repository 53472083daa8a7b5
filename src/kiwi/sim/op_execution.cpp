#include "kiwi/sim/op_execution.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <string>

namespace kiwi::sim {
namespace {

// The mask of the axes a mesh of `rank` axes has (a shift by >= 32 would be undefined).
ir::AxisMask ValidAxes(int rank) { return rank >= 32 ? ~ir::AxisMask{0} : (ir::AxisMask{1} << rank) - 1; }

int LowestBit(ir::AxisMask mask) {
  int bit = 0;
  while (!(mask & ir::AxisBit(bit))) ++bit;
  return bit;
}

// Why `spec` cannot lay out a tensor of `rank` dims on a mesh of `mesh_rank` axes, or nullopt.
std::optional<std::string> SpecProblem(const ir::ShardingSpec& spec, int rank, int mesh_rank) {
  if (!spec.dim_axes.empty() && static_cast<int>(spec.dim_axes.size()) != rank)
    return fmt::format("has {} dims, the tensor has {}", spec.dim_axes.size(), rank);
  ir::AxisMask used = 0;
  for (ir::AxisMask m : spec.dim_axes) {
    if (m & ~ValidAxes(mesh_rank))
      return fmt::format("mesh axis {} does not exist (the plan's mesh has {} axes)",
                         LowestBit(m & ~ValidAxes(mesh_rank)), mesh_rank);
    if (m & used) return fmt::format("mesh axis {} splits two dims", LowestBit(m & used));
    used |= m;
  }
  return std::nullopt;
}

// Checks one plan entry against its node (ids of the node's inputs are known to be in range).
Status CheckOpSharding(const ir::Graph& graph, const ir::Node& node, const plan::OpSharding& s, int mesh_rank) {
  const std::string where = fmt::format("plan.shardings[node {} '{}']", node.id, node.name);
  if (auto why = SpecProblem(s.output, node.output.Rank(), mesh_rank))
    return BadInput(fmt::format("{}: output '{}': {}", where, s.output.ToString(), *why));
  if (s.reduce_axes & ~ValidAxes(mesh_rank))
    return BadInput(fmt::format("{}: reduce_axes: mesh axis {} does not exist (the plan's mesh has {} axes)", where,
                                LowestBit(s.reduce_axes & ~ValidAxes(mesh_rank)), mesh_rank));
  if (s.operands.empty()) return Status::Ok();
  if (s.operands.size() != node.inputs.size())
    return BadInput(fmt::format("{}: operands: {} layouts given, the node has {} inputs", where, s.operands.size(),
                                node.inputs.size()));
  for (size_t i = 0; i < s.operands.size(); ++i) {
    const ir::Node& input = graph.node(node.inputs[i]);
    if (auto why = SpecProblem(s.operands[i], input.output.Rank(), mesh_rank))
      return BadInput(fmt::format("{}: operands[{}] '{}' (input {} '{}'): {}", where, i, s.operands[i].ToString(),
                                  input.id, input.name, *why));
  }
  return Status::Ok();
}

// The mesh must be usable and match the plan's mesh_shape (an empty one fits any mesh).
Status CheckMesh(const plan::OperatorPlan& plan, const ir::DeviceMesh& mesh) {
  for (int a = 0; a < mesh.Rank(); ++a)
    if (mesh.axes[static_cast<size_t>(a)].size < 1)
      return BadInput(fmt::format("mesh: axis {} has size {}, must be at least 1", a, mesh.axes[static_cast<size_t>(a)].size));
  if (!plan.mesh_shape.empty() && plan.mesh_shape != mesh.Shape())
    return BadInput(fmt::format("plan.mesh_shape: {} does not match the device mesh {}",
                                fmt::join(plan.mesh_shape, "x"), mesh.ShapeString()));
  return Status::Ok();
}

// Inputs of a verified graph are always in range; checked anyway so that no input can crash us.
Status CheckInputIds(const ir::Graph& graph) {
  for (const ir::Node& node : graph.nodes())
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (node.inputs[i] < 0 || node.inputs[i] >= graph.size())
        return BadInput(fmt::format("graph: node {} '{}': inputs[{}]: node {} does not exist", node.id, node.name, i,
                                    node.inputs[i]));
  return Status::Ok();
}

}  // namespace

Result<NodeLayouts> ResolveLayouts(const ir::Graph& graph, const plan::OperatorPlan& plan, const ir::DeviceMesh& mesh) {
  KIWI_RETURN_IF_ERROR(CheckMesh(plan, mesh));
  KIWI_RETURN_IF_ERROR(CheckInputIds(graph));
  const int plan_mesh_rank = static_cast<int>(plan.mesh_shape.size());
  const auto n = static_cast<size_t>(graph.size());
  NodeLayouts layouts{std::vector<ir::ShardingSpec>(n), std::vector<const plan::OpSharding*>(n, nullptr),
                      std::vector<int64_t>(n, 0)};
  for (const auto& [id, sharding] : plan.shardings) {
    if (id < 0 || id >= graph.size())
      return BadInput(fmt::format("plan.shardings: node {} does not exist (the graph has {} nodes)", id, graph.size()));
    KIWI_RETURN_IF_ERROR(CheckOpSharding(graph, graph.node(id), sharding, plan_mesh_rank));
    layouts.sharding[static_cast<size_t>(id)] = &sharding;
  }
  for (const ir::Node& node : graph.nodes()) {
    const auto i = static_cast<size_t>(node.id);
    layouts.output[i] = layouts.sharding[i] ? layouts.sharding[i]->output : ir::ShardingSpec::Replicated(node.output.Rank());
    layouts.bytes_per_device[i] = cost::CostModel::BytesPerDevice(node.output, layouts.output[i], mesh);
  }
  return layouts;
}

OpTime ExecutionTime(const ir::Graph& graph, const NodeLayouts& layouts, const ir::Node& node,
                     const cost::CostModel& cost_model, const ir::DeviceMesh& mesh) {
  const auto id = static_cast<size_t>(node.id);
  const plan::OpSharding* sharding = layouts.sharding[id];
  const ir::AxisMask reduce_axes = sharding ? sharding->reduce_axes : 0;
  const cost::CostModel::ShardedOpTime sharded = cost_model.ShardedTime(node, layouts.output[id], reduce_axes, mesh);
  OpTime time;
  time.compute = sharded.compute;
  time.communication = sharded.communication;
  if (sharding == nullptr) return time;
  for (size_t i = 0; i < sharding->operands.size(); ++i) {
    const ir::Node& input = graph.node(node.inputs[i]);
    const ir::ShardingSpec& produced = layouts.output[static_cast<size_t>(input.id)];
    if (!(produced == sharding->operands[i]))
      time.resharding += cost_model.ReshardTime(input.output, produced, sharding->operands[i], mesh);
  }
  return time;
}

}  // namespace kiwi::sim
