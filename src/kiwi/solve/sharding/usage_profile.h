#pragma once
// Summed usage over (compressed) time for the sharding search: a segment tree with range add and
// range max, so that a strategy change's effect on the peak is O(log T) per live interval and the
// global peak is O(1) (the root).
//
//   UsageProfile p(base);                // base[k] = usage of segment k that no choice changes
//   p.Add(3, 7, 40);                     // segments [3, 7) gain 40
//   if (p.Max() > limit) p.Add(3, 7, -40);
#include <cstdint>
#include <vector>

namespace kiwi::solve::sharding {

class UsageProfile {
 public:
  UsageProfile() = default;
  explicit UsageProfile(const std::vector<int64_t>& base);

  int32_t size() const { return size_; }
  // Adds `delta` to every segment in [first, last); empty ranges are ignored.
  void Add(int32_t first, int32_t last, int64_t delta);
  // Max over all segments (0 segments: 0).
  int64_t Max() const { return size_ == 0 ? 0 : max_[1]; }
  // Max over [first, last) (empty range: the lowest int64).
  int64_t RangeMax(int32_t first, int32_t last) const;
  // The usage of every segment (O(T)), for price updates and diagnostics.
  std::vector<int64_t> Values() const;

 private:
  void Build(int32_t node, int32_t lo, int32_t hi, const std::vector<int64_t>& base);
  void AddRec(int32_t node, int32_t lo, int32_t hi, int32_t first, int32_t last, int64_t delta);
  int64_t MaxRec(int32_t node, int32_t lo, int32_t hi, int32_t first, int32_t last) const;
  void Collect(int32_t node, int32_t lo, int32_t hi, int64_t carry, std::vector<int64_t>& out) const;

  int32_t size_ = 0;
  std::vector<int64_t> max_;   // max of the subtree, including this node's own pending add
  std::vector<int64_t> add_;   // add applied to the whole subtree
};

}  // namespace kiwi::solve::sharding
