#include "kiwi/solve/sharding/usage_profile.h"

#include <algorithm>
#include <limits>

namespace kiwi::solve::sharding {

UsageProfile::UsageProfile(const std::vector<int64_t>& base) : size_(static_cast<int32_t>(base.size())) {
  if (size_ == 0) return;
  max_.assign(4 * static_cast<size_t>(size_), 0);
  add_.assign(4 * static_cast<size_t>(size_), 0);
  Build(1, 0, size_, base);
}

void UsageProfile::Build(int32_t node, int32_t lo, int32_t hi, const std::vector<int64_t>& base) {
  if (hi - lo == 1) {
    max_[static_cast<size_t>(node)] = base[static_cast<size_t>(lo)];
    return;
  }
  const int32_t mid = (lo + hi) / 2;
  Build(2 * node, lo, mid, base);
  Build(2 * node + 1, mid, hi, base);
  max_[static_cast<size_t>(node)] =
      std::max(max_[static_cast<size_t>(2 * node)], max_[static_cast<size_t>(2 * node + 1)]);
}

void UsageProfile::Add(int32_t first, int32_t last, int64_t delta) {
  first = std::max(first, 0);
  last = std::min(last, size_);
  if (first >= last || delta == 0) return;
  AddRec(1, 0, size_, first, last, delta);
}

void UsageProfile::AddRec(int32_t node, int32_t lo, int32_t hi, int32_t first, int32_t last, int64_t delta) {
  const auto n = static_cast<size_t>(node);
  if (first <= lo && hi <= last) {
    max_[n] += delta;
    add_[n] += delta;
    return;
  }
  const int32_t mid = (lo + hi) / 2;
  if (first < mid) AddRec(2 * node, lo, mid, first, last, delta);
  if (last > mid) AddRec(2 * node + 1, mid, hi, first, last, delta);
  max_[n] = std::max(max_[2 * n], max_[2 * n + 1]) + add_[n];
}

int64_t UsageProfile::RangeMax(int32_t first, int32_t last) const {
  first = std::max(first, 0);
  last = std::min(last, size_);
  if (first >= last) return std::numeric_limits<int64_t>::min();
  return MaxRec(1, 0, size_, first, last);
}

int64_t UsageProfile::MaxRec(int32_t node, int32_t lo, int32_t hi, int32_t first, int32_t last) const {
  const auto n = static_cast<size_t>(node);
  if (first <= lo && hi <= last) return max_[n];
  const int32_t mid = (lo + hi) / 2;
  int64_t best = std::numeric_limits<int64_t>::min();
  if (first < mid) best = std::max(best, MaxRec(2 * node, lo, mid, first, last));
  if (last > mid) best = std::max(best, MaxRec(2 * node + 1, mid, hi, first, last));
  return best + add_[n];
}

std::vector<int64_t> UsageProfile::Values() const {
  std::vector<int64_t> out(static_cast<size_t>(size_), 0);
  if (size_ > 0) Collect(1, 0, size_, 0, out);
  return out;
}

void UsageProfile::Collect(int32_t node, int32_t lo, int32_t hi, int64_t carry, std::vector<int64_t>& out) const {
  const auto n = static_cast<size_t>(node);
  if (hi - lo == 1) {
    out[static_cast<size_t>(lo)] = max_[n] + carry;
    return;
  }
  const int32_t mid = (lo + hi) / 2;
  Collect(2 * node, lo, mid, carry + add_[n], out);
  Collect(2 * node + 1, mid, hi, carry + add_[n], out);
}

}  // namespace kiwi::solve::sharding
