#include "kiwi/ir/sharding.h"

#include <fmt/format.h>

namespace kiwi::ir {

ShardingSpec ShardingSpec::SplitDim(int rank, int dim, AxisMask axes) {
  ShardingSpec spec = Replicated(rank);
  spec.dim_axes.at(static_cast<size_t>(dim)) = axes;
  return spec;
}

AxisMask ShardingSpec::UsedAxes() const {
  AxisMask used = 0;
  for (AxisMask m : dim_axes) used |= m;
  return used;
}

AxisMask ShardingSpec::AxesOf(int dim) const {
  return dim >= 0 && static_cast<size_t>(dim) < dim_axes.size() ? dim_axes[static_cast<size_t>(dim)] : 0;
}

std::string ShardingSpec::ToString() const {
  if (dim_axes.empty()) return "R";
  std::string out;
  for (AxisMask m : dim_axes) {
    if (m == 0) {
      out += 'R';
      continue;
    }
    out += 'S';
    for (int a = 0; a < 32; ++a)
      if (m & AxisBit(a)) out += std::to_string(a);
  }
  return out;
}

bool ShardingSpec::operator==(const ShardingSpec& other) const {
  const size_t n = std::max(dim_axes.size(), other.dim_axes.size());
  for (size_t i = 0; i < n; ++i)
    if (AxesOf(static_cast<int>(i)) != other.AxesOf(static_cast<int>(i))) return false;
  return true;
}

Result<ShardingSpec> ParseShardingSpec(const std::string& text, int rank, int mesh_rank) {
  const auto bad = [&](const std::string& why) {
    return BadInput(fmt::format("sharding '{}': {}", text, why));
  };
  ShardingSpec spec;
  AxisMask used = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == 'R') {
      spec.dim_axes.push_back(0);
      ++i;
    } else if (text[i] == 'S') {
      ++i;
      AxisMask m = 0;
      while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
        const int axis = text[i] - '0';
        if (axis >= mesh_rank) return bad(fmt::format("mesh axis {} does not exist (mesh has {})", axis, mesh_rank));
        if ((used | m) & AxisBit(axis)) return bad(fmt::format("mesh axis {} used twice", axis));
        m |= AxisBit(axis);
        ++i;
      }
      if (m == 0) return bad("'S' must be followed by mesh axis digits");
      used |= m;
      spec.dim_axes.push_back(m);
    } else {
      return bad(fmt::format("unexpected character '{}'", text[i]));
    }
  }
  if (rank == 0 && spec.dim_axes.size() == 1 && spec.dim_axes[0] == 0) spec.dim_axes.clear();
  if (static_cast<int>(spec.dim_axes.size()) != rank)
    return bad(fmt::format("has {} dims, the tensor has {}", spec.dim_axes.size(), rank));
  return spec;
}

Shape ShardShape(const Shape& shape, const ShardingSpec& spec, const DeviceMesh& mesh) {
  Shape out = shape;
  for (size_t d = 0; d < out.size(); ++d) {
    const int64_t parts = mesh.GroupSize(spec.AxesOf(static_cast<int>(d)));
    out[d] = (out[d] + parts - 1) / parts;
  }
  return out;
}

int64_t BytesPerDevice(const TensorType& type, const ShardingSpec& spec, const DeviceMesh& mesh) {
  TensorType shard{type.dtype, ShardShape(type.shape, spec, mesh)};
  return shard.Bytes();
}

}  // namespace kiwi::ir
