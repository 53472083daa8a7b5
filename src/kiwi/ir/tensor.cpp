#include "kiwi/ir/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiwi::ir {

int64_t TensorType::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace kiwi::ir
