#include "kiwi/ir/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiwi::ir {

int DeviceMesh::NumDevices() const {
  int n = 1;
  for (const MeshAxis& a : axes) n *= a.size;
  return n;
}

int DeviceMesh::GroupSize(AxisMask mask) const {
  int n = 1;
  for (int i = 0; i < Rank(); ++i)
    if (mask & AxisBit(i)) n *= axes[static_cast<size_t>(i)].size;
  return n;
}

std::vector<int> DeviceMesh::Shape() const {
  std::vector<int> shape;
  for (const MeshAxis& a : axes) shape.push_back(a.size);
  return shape;
}

std::string DeviceMesh::ShapeString() const { return fmt::format("{}", fmt::join(Shape(), "x")); }

Result<std::vector<int>> ParseMeshShape(const std::string& text, const std::string& what) {
  const std::string bad = fmt::format("{}: '{}' is not a mesh shape (write e.g. 2x4 or 8)", what, text);
  std::vector<int> shape;
  std::string digits;
  auto flush = [&]() -> bool {
    if (digits.empty()) return false;
    if (digits.size() > 6) return false;
    const int v = std::stoi(digits);
    if (v <= 0) return false;
    shape.push_back(v);
    digits.clear();
    return true;
  };
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      digits += c;
    } else if (c == 'x' || c == 'X' || c == ',') {
      if (!flush()) return BadInput(bad);
    } else if (c != '(' && c != ')' && c != ' ' && c != '[' && c != ']') {
      return BadInput(bad);
    }
  }
  if (!flush() || shape.size() > 8) return BadInput(bad);
  return shape;
}

}  // namespace kiwi::ir
