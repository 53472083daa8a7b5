// What an op costs per device when a plan shards it (cost_model.h ShardedTime, WorkFraction,
// PartialSumTime): its share of the work and the collectives that complete its partial sums.
#include "kiwi/cost/cost_model.h"

namespace kiwi::cost {

double CostModel::WorkFraction(const ir::ShardingSpec& output, ir::AxisMask reduce_axes, const ir::DeviceMesh& mesh) {
  return 1.0 / mesh.GroupSize(output.UsedAxes() | reduce_axes);
}

double CostModel::PartialSumTime(const ir::TensorType& type, const ir::ShardingSpec& output, ir::AxisMask reduce_axes,
                                 const ir::DeviceMesh& mesh) const {
  const ir::AxisMask scattered = reduce_axes & output.UsedAxes();
  const ir::AxisMask all_reduced = reduce_axes & ~scattered;
  double seconds = 0.0;
  if (scattered != 0) {
    // The partial buffer is the output shard before the scattered axes split it.
    ir::ShardingSpec partial = output;
    for (ir::AxisMask& m : partial.dim_axes) m &= ~scattered;
    seconds += CollectiveTime(Collective::kReduceScatter, BytesPerDevice(type, partial, mesh), mesh, scattered);
  }
  if (all_reduced != 0)
    seconds += CollectiveTime(Collective::kAllReduce, BytesPerDevice(type, output, mesh), mesh, all_reduced);
  return seconds;
}

CostModel::ShardedOpTime CostModel::ShardedTime(const ir::Node& node, const ir::ShardingSpec& output,
                                                ir::AxisMask reduce_axes, const ir::DeviceMesh& mesh) const {
  return {ComputeTime(node, WorkFraction(output, reduce_axes, mesh)), PartialSumTime(node.output, output, reduce_axes, mesh)};
}

}  // namespace kiwi::cost
