// Layout conversion cost (cost_model.h ReshardTime), axis by axis as in Alpa's resharding: first the
// free local slices (axes only `to` uses), which shrink what later steps move; then an all-to-all per
// axis that moves between dims, on the current per-device bytes; then an all-gather per axis dropped,
// slowest axis first so the fastest carries the most data (collectives.h hierarchy), each on the
// per-device result.
#include <algorithm>
#include <vector>

#include "kiwi/cost/cost_model.h"

namespace kiwi::cost {
namespace {

// The dim a mesh axis splits in `spec`, or -1 when the axis replicates the tensor.
int DimOf(const ir::ShardingSpec& spec, int rank, int axis) {
  for (int d = 0; d < rank; ++d)
    if (spec.AxesOf(d) & ir::AxisBit(axis)) return d;
  return -1;
}

// Axes that `from` splits and `to` does not, slowest first (ties: the outer axis first).
std::vector<int> DroppedAxesSlowestFirst(const ir::ShardingSpec& from, const ir::ShardingSpec& to, int rank,
                                         const ir::DeviceMesh& mesh) {
  std::vector<int> dropped;
  for (int a = 0; a < mesh.Rank(); ++a)
    if (DimOf(from, rank, a) >= 0 && DimOf(to, rank, a) < 0) dropped.push_back(a);
  std::stable_sort(dropped.begin(), dropped.end(), [&](int x, int y) {
    return mesh.axes[static_cast<size_t>(x)].bandwidth < mesh.axes[static_cast<size_t>(y)].bandwidth;
  });
  return dropped;
}

}  // namespace

double CostModel::ReshardTime(const ir::TensorType& type, const ir::ShardingSpec& from, const ir::ShardingSpec& to,
                              const ir::DeviceMesh& mesh) const {
  const int rank = type.Rank();
  ir::ShardingSpec current = ir::ShardingSpec::Replicated(rank);
  for (int d = 0; d < rank; ++d) current.dim_axes[static_cast<size_t>(d)] = from.AxesOf(d);
  auto set_axis = [&](int axis, int old_dim, int new_dim) {
    if (old_dim >= 0) current.dim_axes[static_cast<size_t>(old_dim)] &= ~ir::AxisBit(axis);
    if (new_dim >= 0) current.dim_axes[static_cast<size_t>(new_dim)] |= ir::AxisBit(axis);
  };
  for (int a = 0; a < mesh.Rank(); ++a)  // local slicing: free
    if (DimOf(from, rank, a) < 0 && DimOf(to, rank, a) >= 0) set_axis(a, -1, DimOf(to, rank, a));
  // An all-to-all keeps each device's share; all of them move the bytes of the sliced layout (a
  // half-moved layout in between could round dims differently).
  const int64_t sliced_bytes = BytesPerDevice(type, current, mesh);
  double seconds = 0.0;
  for (int a = 0; a < mesh.Rank(); ++a) {
    const int src = DimOf(from, rank, a);
    const int dst = DimOf(to, rank, a);
    if (src < 0 || dst < 0 || src == dst) continue;
    seconds += CollectiveTime(Collective::kAllToAll, sliced_bytes, mesh, ir::AxisBit(a));
    set_axis(a, src, dst);
  }
  for (int a : DroppedAxesSlowestFirst(from, to, rank, mesh)) {
    set_axis(a, DimOf(current, rank, a), -1);
    seconds += CollectiveTime(Collective::kAllGather, BytesPerDevice(type, current, mesh), mesh, ir::AxisBit(a));
  }
  return seconds;
}

}  // namespace kiwi::cost
