#pragma once
// An N-D logical device mesh: axis i has size[i] devices, linked with its own bandwidth and latency.
// Axis 0 is the outermost (e.g. across nodes), the last axis the innermost (e.g. NVLink in a node),
// as in the KIWI paper's mesh (2, 4) = 2 nodes x 4 GPUs.
#include <cstdint>
#include <string>
#include <vector>

#include "kiwi/util/result.h"

namespace kiwi::ir {

struct MeshAxis {
  int size = 1;
  double bandwidth = 0.0;  // bytes/s each device can send along this axis (one direction): a flat ring
  double latency = 0.0;    // seconds per message (alpha)
  std::string link;        // "nvlink", "pcie", "infiniband", ... for reports
  // An axis whose groups cross nodes (cost::Cluster::MakeMesh): a group's devices within one node
  // (>= 1), their link, and the rate each of them gets across nodes when all of them send at once (one
  // rail each when the node has the adapters). 0: the axis stays within a node.
  int per_node = 0;
  double node_bandwidth = 0.0;
  double node_latency = 0.0;
  double rail_bandwidth = 0.0;
};

// Bit mask over mesh axes: bit i set = axis i.
using AxisMask = uint32_t;
inline constexpr AxisMask AxisBit(int axis) { return AxisMask{1} << axis; }

struct DeviceMesh {
  std::vector<MeshAxis> axes;

  int Rank() const { return static_cast<int>(axes.size()); }
  int NumDevices() const;
  int GroupSize(AxisMask mask) const;  // product of the sizes of the axes in mask
  std::vector<int> Shape() const;
  std::string ShapeString() const;     // "2x4"
  AxisMask AllAxes() const { return (AxisMask{1} << Rank()) - 1; }
};

// Parses "2x4" / "(2,4)" / "8" into axis sizes; `what` names the flag in errors.
Result<std::vector<int>> ParseMeshShape(const std::string& text, const std::string& what);

}  // namespace kiwi::ir
