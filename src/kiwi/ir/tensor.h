#pragma once
// A tensor's type: element type and shape. Sizes are int64 bytes (DESIGN.md conventions).
#include <cstdint>
#include <string>
#include <vector>

#include "kiwi/ir/dtype.h"

namespace kiwi::ir {

using Shape = std::vector<int64_t>;

struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;  // empty = scalar

  int64_t NumElements() const;
  int64_t Bytes() const { return NumElements() * DTypeBytes(dtype); }
  int Rank() const { return static_cast<int>(shape.size()); }
  bool operator==(const TensorType&) const = default;
};

std::string ShapeString(const Shape& shape);  // "[16, 1024, 5120]"

}  // namespace kiwi::ir
