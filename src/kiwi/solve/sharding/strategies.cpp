// Sharding strategies from loop nests (strategies.h), costed with the simulator's own formulas.
#include "kiwi/solve/sharding/strategies.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "kiwi/solve/sharding/op_indexing.h"

namespace kiwi::solve::sharding {
namespace {

using internal::kNoIndex;
using internal::LoopIndex;
using internal::OpIndexing;

// Mesh axes worth splitting over: more than one device (a split over one device changes nothing);
// AxisMask holds 32 axes.
std::vector<int> SplitAxes(const ir::DeviceMesh& mesh) {
  std::vector<int> axes;
  for (int a = 0; a < std::min(mesh.Rank(), 32); ++a)
    if (mesh.axes[static_cast<size_t>(a)].size > 1) axes.push_back(a);
  return axes;
}

// The mesh axes in `mask`, ascending.
std::vector<int> AxesIn(ir::AxisMask mask) {
  std::vector<int> axes;
  for (int a = 0; a < 32; ++a)
    if (mask & ir::AxisBit(a)) axes.push_back(a);
  return axes;
}

// The axes of `axes` whose positions are the bits of `subset` (0 < subset < 2^axes.size()).
ir::AxisMask SubsetOf(const std::vector<int>& axes, uint64_t subset) {
  ir::AxisMask mask = 0;
  for (size_t k = 0; k < axes.size(); ++k)
    if (subset & (uint64_t{1} << k)) mask |= ir::AxisBit(axes[k]);
  return mask;
}

// Whether a dim of `size` may be split into `parts` shards (strategies.h StrategyOptions).
bool Allowed(const LoopIndex& index, int64_t parts, const StrategyOptions& options) {
  if (parts == 1) return true;
  if (parts > index.size) return false;
  return (!options.require_divisible && !index.exact) || index.size % parts == 0;
}

ir::ShardingSpec SpecOf(const std::vector<int>& dims, const std::vector<ir::AxisMask>& masks) {
  ir::ShardingSpec spec = ir::ShardingSpec::Replicated(static_cast<int>(dims.size()));
  for (size_t d = 0; d < dims.size(); ++d)
    if (dims[d] != kNoIndex) spec.dim_axes[d] = masks[static_cast<size_t>(dims[d])];
  return spec;
}

// The OpSharding of one assignment of mesh axes to the nest's indices (masks[i]: the axes of index i).
plan::OpSharding ShardingOf(const OpIndexing& ix, const std::vector<ir::AxisMask>& masks) {
  plan::OpSharding s;
  s.output = SpecOf(ix.output, masks);
  for (const std::vector<int>& dims : ix.operands) s.operands.push_back(SpecOf(dims, masks));
  for (size_t i = 0; i < ix.indices.size(); ++i)
    if (ix.IsContracted(static_cast<int>(i))) s.reduce_axes |= masks[i];
  return s;
}

// Variants of `base` that reduce-scatter its partial sums instead of all-reducing them (the result
// lands sharded: ZeRO's gradient reduce-scatter, Megatron's sequence-parallel output): per non-empty
// subset of the reduce axes, those axes also split the first output dim they divide, the dim the
// optimizer's sharded update asks for. `base` is a copy: `layouts` grows.
void AddScatterVariants(plan::OpSharding base, const ir::Shape& out_shape, const ir::DeviceMesh& mesh,
                        const StrategyOptions& options, std::vector<plan::OpSharding>& layouts) {
  const std::vector<int> axes = AxesIn(base.reduce_axes);
  for (uint64_t subset = 1; subset < (uint64_t{1} << axes.size()); ++subset) {
    const ir::AxisMask scattered = SubsetOf(axes, subset);
    for (size_t d = 0; d < out_shape.size(); ++d) {
      const ir::AxisMask dim_axes = base.output.dim_axes[d] | scattered;
      if (!Allowed({out_shape[d], false}, mesh.GroupSize(dim_axes), options)) continue;
      layouts.push_back(base);
      layouts.back().output.dim_axes[d] = dim_axes;
      break;
    }
  }
}

// Every assignment of each splittable mesh axis to one index or to none (an odometer, the last axis
// turning fastest), kept when each index's split is allowed; then its reduce-scatter variants.
std::vector<plan::OpSharding> LayoutsOfNest(const OpIndexing& ix, const ir::Shape& out_shape,
                                            const ir::DeviceMesh& mesh, const StrategyOptions& options) {
  const std::vector<int> axes = SplitAxes(mesh);
  const int choices = static_cast<int>(ix.indices.size()) + 1;  // 0 = none, c = index c - 1
  std::vector<int> pick(axes.size(), 0);
  std::vector<plan::OpSharding> layouts;
  for (;;) {
    std::vector<ir::AxisMask> masks(ix.indices.size(), 0);
    for (size_t k = 0; k < axes.size(); ++k)
      if (pick[k] > 0) masks[static_cast<size_t>(pick[k] - 1)] |= ir::AxisBit(axes[k]);
    bool allowed = true;
    for (size_t i = 0; i < ix.indices.size() && allowed; ++i)
      allowed = Allowed(ix.indices[i], mesh.GroupSize(masks[i]), options);
    if (allowed) layouts.push_back(ShardingOf(ix, masks));
    if (allowed && options.reduce_scatter) AddScatterVariants(layouts.back(), out_shape, mesh, options, layouts);
    size_t k = axes.size();
    for (; k > 0; --k) {
      if (++pick[k - 1] < choices) break;
      pick[k - 1] = 0;
    }
    if (k == 0) return layouts;
  }
}

std::string AxisDigits(ir::AxisMask mask) {
  std::string digits;
  for (int a : AxesIn(mask)) digits += std::to_string(a);
  return digits;
}

// The optimizer update sharded over `axes` (ZeRO): each device updates its shard of every operand,
// split along the operand's first dim the group divides; its scalar output is all-reduced.
plan::OpSharding ShardedUpdate(const ir::Graph& graph, const ir::Node& node, ir::AxisMask axes,
                               const ir::DeviceMesh& mesh, const StrategyOptions& options) {
  plan::OpSharding s;
  s.output = ir::ShardingSpec::Replicated(node.output.Rank());
  s.reduce_axes = axes;
  s.strategy = fmt::format("update sharded@{} (all-reduce@{})", AxisDigits(axes), AxisDigits(axes));
  for (ir::NodeId in : node.inputs) {
    const ir::TensorType& type = graph.node(in).output;
    ir::ShardingSpec spec = ir::ShardingSpec::Replicated(type.Rank());
    for (int d = 0; d < type.Rank(); ++d) {
      if (!Allowed({type.shape[static_cast<size_t>(d)], false}, mesh.GroupSize(axes), options)) continue;
      spec.dim_axes[static_cast<size_t>(d)] = axes;
      break;
    }
    s.operands.push_back(std::move(spec));
  }
  return s;
}

// The optimizer: per non-empty set of splittable axes, the update sharded over them.
std::vector<plan::OpSharding> OptimizerLayouts(const ir::Graph& graph, const ir::Node& node,
                                               const ir::DeviceMesh& mesh, const StrategyOptions& options) {
  const std::vector<int> axes = SplitAxes(mesh);
  std::vector<plan::OpSharding> layouts;
  for (uint64_t subset = 1; subset < (uint64_t{1} << axes.size()); ++subset)
    layouts.push_back(ShardedUpdate(graph, node, SubsetOf(axes, subset), mesh, options));
  return layouts;
}

// Output and every operand replicated: the op runs whole on every device.
plan::OpSharding Replicated(const ir::Graph& graph, const ir::Node& node) {
  plan::OpSharding s;
  s.output = ir::ShardingSpec::Replicated(node.output.Rank());
  for (ir::NodeId in : node.inputs) {
    const bool known = in >= 0 && in < graph.size();
    s.operands.push_back(ir::ShardingSpec::Replicated(known ? graph.node(in).output.Rank() : 0));
  }
  if (node.kind == ir::OpKind::kOptimizer) s.strategy = "update replicated";
  return s;
}

// The strategies beyond the replicated one: the optimizer's sharded updates, or the splits of the
// node's loop nest; none for nodes without a nest and for inputs that do not exist (an unverified graph).
std::vector<plan::OpSharding> SplitLayouts(const ir::Graph& graph, const ir::Node& node, const ir::DeviceMesh& mesh,
                                           const StrategyOptions& options) {
  for (ir::NodeId in : node.inputs)
    if (in < 0 || in >= graph.size()) return {};
  if (node.kind == ir::OpKind::kOptimizer) return OptimizerLayouts(graph, node, mesh, options);
  std::optional<OpIndexing> nest = internal::DescribeOp(graph, node);
  return nest ? LayoutsOfNest(*nest, node.output.shape, mesh, options) : std::vector<plan::OpSharding>{};
}

// What identifies a layout regardless of its name.
std::string LayoutKey(const plan::OpSharding& s) {
  std::string key = s.output.ToString() + '|' + std::to_string(s.reduce_axes);
  for (const ir::ShardingSpec& operand : s.operands) key += '|' + operand.ToString();
  return key;
}

Strategy Costed(plan::OpSharding sharding, const ir::Node& node, const cost::CostModel& cost_model,
                const ir::DeviceMesh& mesh) {
  Strategy s;
  // As the simulator's ExecutionTime (sim/op_execution.h) charges it: replays agree exactly.
  const cost::CostModel::ShardedOpTime time = cost_model.ShardedTime(node, sharding.output, sharding.reduce_axes, mesh);
  s.compute_seconds = time.compute;
  s.communication_seconds = time.communication;
  s.output_bytes = ir::BytesPerDevice(node.output, sharding.output, mesh);
  if (sharding.strategy.empty()) sharding.strategy = StrategyName(sharding);
  s.sharding = std::move(sharding);
  return s;
}

}  // namespace

std::string StrategyName(const plan::OpSharding& sharding) {
  std::string name = sharding.output.ToString();
  for (size_t i = 0; i < sharding.operands.size(); ++i)
    name += (i == 0 ? " = " : " x ") + sharding.operands[i].ToString();
  const ir::AxisMask scattered = sharding.reduce_axes & sharding.output.UsedAxes();
  const ir::AxisMask all_reduced = sharding.reduce_axes & ~scattered;
  std::vector<std::string> reductions;
  if (scattered != 0) reductions.push_back("reduce-scatter@" + AxisDigits(scattered));
  if (all_reduced != 0) reductions.push_back("all-reduce@" + AxisDigits(all_reduced));
  if (!reductions.empty()) name += fmt::format(" ({})", fmt::join(reductions, ", "));
  return name;
}

std::vector<Strategy> EnumerateStrategies(const ir::Graph& graph, const ir::Node& node,
                                          const cost::CostModel& cost_model, const ir::DeviceMesh& mesh,
                                          const StrategyOptions& options) {
  std::vector<plan::OpSharding> layouts = {Replicated(graph, node)};
  std::set<std::string> seen = {LayoutKey(layouts[0])};
  for (plan::OpSharding& s : SplitLayouts(graph, node, mesh, options))
    if (seen.insert(LayoutKey(s)).second) layouts.push_back(std::move(s));
  std::vector<Strategy> strategies;
  strategies.reserve(layouts.size());
  for (plan::OpSharding& s : layouts) strategies.push_back(Costed(std::move(s), node, cost_model, mesh));
  return strategies;
}

}  // namespace kiwi::solve::sharding
