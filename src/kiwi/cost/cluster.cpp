// Laying a logical device mesh over a cluster (cluster.h): which link each mesh axis runs on.
#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiwi/cost/cluster.h"

namespace kiwi::cost {
namespace {

// How the groups of one mesh axis sit on the nodes. Devices are numbered row-major over the mesh
// (the last axis varies fastest) and device d lives on node d / devices_per_node.
struct AxisPlacement {
  bool uneven = false;    // some group takes different numbers of devices from the nodes it touches
  int crossing_flows = 0; // most groups crossing one node's NIC at once (0 = every group within a node)
  int per_node = 0;       // devices of a crossing group on each node it touches
};

AxisPlacement PlaceAxis(int num_devices, int stride, int size, int devices_per_node) {
  AxisPlacement placement;
  std::map<int, int> crossing_per_node;
  for (int base = 0; base < num_devices; ++base) {
    if ((base / stride) % size != 0) continue;  // not the first device of its group
    std::map<int, int> per_node;                // node -> devices of this group on it
    for (int k = 0; k < size; ++k) ++per_node[(base + k * stride) / devices_per_node];
    if (per_node.size() < 2) continue;
    for (const auto& [node, count] : per_node) {
      if (count != per_node.begin()->second) placement.uneven = true;
      placement.per_node = count;
      // A ring visits a group's devices in index order, so it leaves each node it touches once per
      // direction: one flow through that node's NIC per crossing group.
      placement.crossing_flows = std::max(placement.crossing_flows, ++crossing_per_node[node]);
    }
  }
  return placement;
}

// The link of an axis whose rings cross nodes: the slowest hop bounds a ring (one adapter's rate, or
// a share of the node's adapters when more rings cross it at once than it has adapters), and the
// slowest hop's latency is paid at every step.
// With k devices of a group per node, NCCL's hierarchical algorithms run k rings across nodes at once
// (one per local device), so k x flows rings share the adapters.
ir::MeshAxis CrossNodeAxis(const Cluster& cluster, int size, int flows, int per_node) {
  ir::MeshAxis axis;
  axis.size = size;
  const double adapters = static_cast<double>(std::max(cluster.adapters_per_node, 1));
  auto share = [&](int rings) { return std::min(1.0, adapters / rings); };
  axis.bandwidth = std::min(cluster.intra_node.bandwidth, cluster.inter_node.bandwidth * share(flows));
  axis.latency = std::max(cluster.intra_node.latency, cluster.inter_node.latency);
  axis.link = cluster.inter_node.name;
  if (per_node >= 1) {
    axis.per_node = per_node;
    axis.node_bandwidth = cluster.intra_node.bandwidth;
    axis.node_latency = cluster.intra_node.latency;
    axis.rail_bandwidth = std::min(cluster.intra_node.bandwidth, cluster.inter_node.bandwidth * share(flows * per_node));
  }
  return axis;
}

ir::MeshAxis IntraNodeAxis(const Cluster& cluster, int size) {
  return {size, cluster.intra_node.bandwidth, cluster.intra_node.latency, cluster.intra_node.name};
}

}  // namespace

Result<ir::DeviceMesh> Cluster::MakeMesh(const std::vector<int>& shape) const {
  const std::string flag = fmt::format("--mesh {}", fmt::join(shape, "x"));
  if (shape.empty()) return BadInput("--mesh: empty mesh shape");
  if (num_nodes < 1 || devices_per_node < 1)
    return BadInput(fmt::format("cluster {}: num_nodes and devices_per_node must be positive", name));
  int64_t needed = 1;
  for (int s : shape) {
    if (s < 1) return BadInput(fmt::format("{}: axis sizes must be positive", flag));
    needed *= s;
    if (needed > NumDevices()) break;  // stops before the product can overflow
  }
  if (needed > NumDevices())
    return BadInput(fmt::format("{}: needs {} devices, cluster {} has {}", flag,
                                needed, name, NumDevices()));
  ir::DeviceMesh mesh;
  mesh.axes.resize(shape.size());
  int stride = 1;  // product of the sizes of the axes inside axis i
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    const int size = shape[static_cast<size_t>(i)];
    const AxisPlacement placement = PlaceAxis(static_cast<int>(needed), stride, size, devices_per_node);
    if (placement.uneven)
      return BadInput(fmt::format("{}: axis {} (size {}) would straddle a node boundary of cluster {} "
                                  "({} devices per node) without tiling it",
                                  flag, i, size, name, devices_per_node));
    mesh.axes[static_cast<size_t>(i)] = placement.crossing_flows == 0
                                            ? IntraNodeAxis(*this, size)
                                            : CrossNodeAxis(*this, size, placement.crossing_flows, placement.per_node);
    stride *= size;
  }
  return mesh;
}

ir::DeviceMesh Cluster::FlatMesh() const {
  Result<ir::DeviceMesh> mesh = MakeMesh({NumDevices()});
  if (mesh) return *std::move(mesh);
  // Only a malformed cluster (no devices) gets here: one device on the intra-node link.
  return {{IntraNodeAxis(*this, 1)}};
}

}  // namespace kiwi::cost
