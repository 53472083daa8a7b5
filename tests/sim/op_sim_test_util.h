#pragma once
// Small builders shared by the operator-level simulator tests: graphs whose nodes carry measured
// costs (so ComputeTime is exactly cost * work fraction) and byte-sized outputs.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/graph.h"
#include "kiwi/plan/plan.h"

namespace kiwi::sim::op_test {

inline plan::Step C(ir::NodeId v) { return {plan::StepKind::kCompute, v}; }
inline plan::Step F(ir::NodeId v) { return {plan::StepKind::kFree, v}; }

// A node producing `type`, with measured cost `seconds` (ignored by the cost model for inputs,
// parameters and optimizer state, which cost 0).
inline ir::NodeId AddTyped(ir::Graph& g, const std::string& name, ir::TensorType type, double seconds,
                           std::vector<ir::NodeId> inputs, ir::OpKind kind = ir::OpKind::kOpaque) {
  ir::Node node;
  node.name = name;
  node.kind = kind;
  node.output = std::move(type);
  node.inputs = std::move(inputs);
  node.measured_cost = seconds;
  return g.Add(std::move(node));
}

// An opaque op whose output is a buffer of `bytes` bytes.
inline ir::NodeId AddBytes(ir::Graph& g, const std::string& name, int64_t bytes, double seconds,
                           std::vector<ir::NodeId> inputs, ir::OpKind kind = ir::OpKind::kOpaque) {
  return AddTyped(g, name, {ir::DType::kU8, {bytes}}, seconds, std::move(inputs), kind);
}

// Measured costs are used as they are; nothing else is needed from the device.
inline cost::CostModel MeasuredCostModel() {
  cost::DeviceSpec device;
  device.name = "test-device";
  device.SetPeakFlops(ir::DType::kF32, 1e12);
  device.memory_bytes = int64_t{1} << 34;
  device.memory_bandwidth = 1e12;
  cost::CostModelOptions options;
  options.use_measured_costs = true;
  options.kernel_overhead = 0.0;
  return cost::CostModel(device, options);
}

inline ir::DeviceMesh SingleDevice() { return ir::DeviceMesh{}; }

}  // namespace kiwi::sim::op_test
