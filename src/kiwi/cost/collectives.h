#pragma once
// Alpha-beta costs of collectives on a device mesh (ring algorithms per axis; several axes at once
// are decomposed hierarchically, the fastest axis carrying the most data).
#include <cstdint>
#include <string_view>

#include "kiwi/ir/mesh.h"

namespace kiwi::cost {

enum class Collective : uint8_t { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kPointToPoint };

std::string_view CollectiveName(Collective c);

// Seconds for a collective among the devices spanned by `axes` (a group of mesh.GroupSize(axes)).
// `bytes` is the per-device buffer: all-reduce: the buffer reduced; all-gather: the gathered result;
// reduce-scatter: the input before scattering; all-to-all: each device's buffer; point-to-point: the
// message (sent over the slowest axis in `axes`). Ring formulas on one axis of p devices with
// bandwidth B and latency a: all-reduce 2(p-1)(a + n/(pB)); all-gather, reduce-scatter and all-to-all
// (p-1)(a + n/(pB)); point-to-point a + n/B. On an axis crossing nodes with k = MeshAxis::per_node
// devices of a group in each node, NCCL's other algorithms replace the ring when faster: all-reduce's
// tree, 2(ceil(log2 p) a + n/B); for k > 1 the hierarchical all-reduce, all-gather and reduce-scatter
// (inside the node over k, across the p/k nodes on k rails at once; collectives.cpp). A group of one
// device costs 0.
// CollectiveBytesSent stays the ring's count: what gloo, the runtime tested here, sends.
double CollectiveTime(Collective c, int64_t bytes, const ir::DeviceMesh& mesh, ir::AxisMask axes);

// Bytes each device sends for the collective (what a runtime would measure through it).
int64_t CollectiveBytesSent(Collective c, int64_t bytes, const ir::DeviceMesh& mesh, ir::AxisMask axes);

}  // namespace kiwi::cost
