#pragma once
// Brute force for tiny discrete problems: visits every assignment x with 0 <= x[i] < sizes[i], in
// odometer order (x[0] turns fastest). Shared by the sharding, WCSP and priced-subproblem tests.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiwi::test_util {

template <typename Visit>
void ForEachAssignment(const std::vector<int32_t>& sizes, Visit&& visit) {
  std::vector<int32_t> x(sizes.size(), 0);
  for (;;) {
    visit(static_cast<const std::vector<int32_t>&>(x));
    size_t i = 0;
    while (i < x.size() && ++x[i] == sizes[i]) x[i++] = 0;
    if (i == x.size()) return;
  }
}

}  // namespace kiwi::test_util
