#pragma once
// How a tensor is laid out over a device mesh: for each tensor dimension, the set of mesh axes it is
// split over (Alpa's notation: "S0R" = dim 0 split over mesh axis 0, dim 1 replicated; "RS01" = dim 1
// split over axes 0 and 1). Axes used by no dimension replicate the tensor.
#include <string>
#include <vector>

#include "kiwi/ir/mesh.h"
#include "kiwi/ir/tensor.h"
#include "kiwi/util/result.h"

namespace kiwi::ir {

struct ShardingSpec {
  std::vector<AxisMask> dim_axes;  // one mask per tensor dim; empty vector = fully replicated

  static ShardingSpec Replicated(int rank) { return {std::vector<AxisMask>(static_cast<size_t>(rank), 0)}; }
  static ShardingSpec SplitDim(int rank, int dim, AxisMask axes);

  AxisMask UsedAxes() const;       // union of all dims' axes
  bool IsReplicated() const { return UsedAxes() == 0; }
  AxisMask AxesOf(int dim) const;  // 0 for dims beyond dim_axes (replicated)
  std::string ToString() const;    // "S0R", "RR", "S01R"; "R" for a replicated scalar
  bool operator==(const ShardingSpec& other) const;
};

// Parses Alpa notation for a tensor of `rank` dims; checks axes exist in a mesh of `mesh_rank` axes,
// and that no axis splits two dims.
Result<ShardingSpec> ParseShardingSpec(const std::string& text, int rank, int mesh_rank);

// Per-device shape: each dim divided (rounding up) by the product of its axes' sizes.
Shape ShardShape(const Shape& shape, const ShardingSpec& spec, const DeviceMesh& mesh);
int64_t BytesPerDevice(const TensorType& type, const ShardingSpec& spec, const DeviceMesh& mesh);

}  // namespace kiwi::ir
