// Alpha-beta costs of collectives (collectives.h): per axis the fastest of ring, tree and hierarchical
// (StageSeconds). Several axes are decomposed hierarchically:
// reduce-scatter runs from the fastest axis to the slowest (each stage scatters what the previous
// one left), all-gather runs the same stages in reverse (slowest axis on the smallest data first),
// all-reduce is reduce-scatter then all-gather; all-to-all exchanges the full buffer on every axis;
// point-to-point crosses the slowest axis.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kiwi/cost/collectives.h"

namespace kiwi::cost {
namespace {

// One ring stage: p devices exchanging a buffer of `bytes` along one mesh axis.
struct Stage {
  int p = 1;
  double bytes = 0.0;
  const ir::MeshAxis* axis = nullptr;
};

// The axes of `axes` with more than one device, fastest first (ties: the inner axis first).
std::vector<const ir::MeshAxis*> AxesFastestFirst(const ir::DeviceMesh& mesh, ir::AxisMask axes) {
  std::vector<int> ids;
  for (int i = mesh.Rank() - 1; i >= 0; --i)
    if ((axes & ir::AxisBit(i)) && mesh.axes[static_cast<size_t>(i)].size > 1) ids.push_back(i);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) {
    return mesh.axes[static_cast<size_t>(a)].bandwidth > mesh.axes[static_cast<size_t>(b)].bandwidth;
  });
  std::vector<const ir::MeshAxis*> out;
  for (int i : ids) out.push_back(&mesh.axes[static_cast<size_t>(i)]);
  return out;
}

// Reduce-scatter stages of an n-byte input: axis k scatters n / (p_1 ... p_{k-1}) bytes. The
// all-gather of an n-byte result has the same stages (run in reverse order).
std::vector<Stage> ScatterStages(double n, const std::vector<const ir::MeshAxis*>& fastest_first) {
  std::vector<Stage> stages;
  for (const ir::MeshAxis* axis : fastest_first) {
    stages.push_back({axis->size, n, axis});
    n /= axis->size;
  }
  return stages;
}

// The stages a collective runs and how many ring passes each takes (2 for all-reduce).
struct Plan {
  std::vector<Stage> stages;
  int passes = 1;
  bool point_to_point = false;
};

Plan Decompose(Collective c, int64_t bytes, const ir::DeviceMesh& mesh, ir::AxisMask axes) {
  const std::vector<const ir::MeshAxis*> order = AxesFastestFirst(mesh, axes);
  Plan plan;
  if (order.empty() || bytes <= 0) return plan;  // one device, or nothing to send: no collective
  const double n = static_cast<double>(bytes);
  switch (c) {
    case Collective::kAllReduce:
      plan.stages = ScatterStages(n, order);
      plan.passes = 2;
      break;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      plan.stages = ScatterStages(n, order);
      break;
    case Collective::kAllToAll:
      for (const ir::MeshAxis* axis : order) plan.stages.push_back({axis->size, n, axis});
      break;
    case Collective::kPointToPoint:
      plan.stages.push_back({2, n, order.back()});
      plan.point_to_point = true;
      break;
  }
  return plan;
}

// ceil(log2(p)): the depth of a binary tree over p devices.
int TreeDepth(int p) {
  int depth = 0;
  while ((1 << depth) < p) ++depth;
  return depth;
}

// One stage as NCCL runs it: the fastest of the algorithms it chooses between (NCCL picks by its own
// tuning model; the cheapest under this one stands for that choice).
//  - ring: passes x (p-1)(a + n/(pB)) on the axis's flat-ring bandwidth;
//  - tree (all-reduce across nodes only, where NCCL uses its double binary tree; pipelined):
//    2(ceil(log2 p) a + n/B), latency growing with the tree's depth instead of the ring's p - 1 steps;
//  - hierarchical, on an axis whose groups hold k = per_node devices in each of N nodes: inside the
//    node a reduce-scatter (all-gather) over k, across nodes k rings at once, each on 1/k of the data
//    over its own rail: passes x ((k-1)(a_node + n/(k B_node)) + (N-1)(a + n/(k N B_rail))).
double StageSeconds(const Stage& s, int passes, Collective c) {
  const ir::MeshAxis& axis = *s.axis;
  const double p = static_cast<double>(s.p);
  double best = passes * (p - 1) * (axis.latency + s.bytes / (p * axis.bandwidth));
  if (c == Collective::kAllReduce && axis.per_node >= 1)
    best = std::min(best, 2.0 * (TreeDepth(s.p) * axis.latency + s.bytes / axis.bandwidth));
  const int k = axis.per_node;
  if ((c == Collective::kAllReduce || c == Collective::kAllGather || c == Collective::kReduceScatter) && k > 1 &&
      k < s.p && s.p % k == 0 && axis.node_bandwidth > 0.0 && axis.rail_bandwidth > 0.0) {
    const double nodes = static_cast<double>(s.p / k);
    const double local = (k - 1) * (axis.node_latency + s.bytes / (k * axis.node_bandwidth));
    const double across = (nodes - 1) * (axis.latency + s.bytes / (k * nodes * axis.rail_bandwidth));
    best = std::min(best, passes * (local + across));
  }
  return best;
}

}  // namespace

std::string_view CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all-reduce";
    case Collective::kAllGather: return "all-gather";
    case Collective::kReduceScatter: return "reduce-scatter";
    case Collective::kAllToAll: return "all-to-all";
    case Collective::kPointToPoint: return "point-to-point";
  }
  return "unknown";
}

double CollectiveTime(Collective c, int64_t bytes, const ir::DeviceMesh& mesh, ir::AxisMask axes) {
  const Plan plan = Decompose(c, bytes, mesh, axes);
  double seconds = 0.0;
  for (const Stage& s : plan.stages) {
    if (plan.point_to_point) {
      seconds += s.axis->latency + s.bytes / s.axis->bandwidth;  // a + n/B (a zero bandwidth: infinite)
    } else {
      seconds += StageSeconds(s, plan.passes, c);
    }
  }
  return seconds;
}

int64_t CollectiveBytesSent(Collective c, int64_t bytes, const ir::DeviceMesh& mesh, ir::AxisMask axes) {
  const Plan plan = Decompose(c, bytes, mesh, axes);
  double sent = 0.0;
  for (const Stage& s : plan.stages)
    sent += plan.point_to_point ? s.bytes : plan.passes * s.bytes * (s.p - 1) / s.p;  // ring: (p-1)/p of n
  return std::llround(sent);
}

}  // namespace kiwi::cost
