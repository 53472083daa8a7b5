// Alpha-beta ring costs of collectives (collectives.h). Several axes are decomposed hierarchically:
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
    const double alpha = s.axis->latency;
    const double beta = 1.0 / s.axis->bandwidth;  // a zero bandwidth gives an infinite time
    if (plan.point_to_point) {
      seconds += alpha + s.bytes * beta;  // a + n/B
    } else {
      seconds += plan.passes * (s.p - 1) * (alpha + s.bytes / s.p * beta);  // (p-1)(a + n/(pB)) per pass
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
