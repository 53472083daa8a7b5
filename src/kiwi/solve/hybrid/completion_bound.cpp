#include "kiwi/solve/hybrid/completion_bound.h"

#include <algorithm>
#include <limits>

namespace kiwi::solve::hybrid {

void CompletionBound::Prepend(const std::vector<CostPoint>& options) {
  if (options.empty()) infeasible_ = true;
  if (infeasible_) return;
  std::vector<CostPoint> points = options;
  std::sort(points.begin(), points.end(), [](const CostPoint& a, const CostPoint& b) {
    return a.bytes != b.bytes ? a.bytes < b.bytes : a.cost < b.cost;
  });
  // The lower convex hull from the smallest option to the cheapest (more bytes never cost more in
  // the relaxation: a layer may leave bytes unused).
  std::vector<CostPoint> hull;
  for (const CostPoint& q : points) {
    if (!hull.empty() && q.cost >= hull.back().cost) continue;  // no saving for its extra bytes
    while (hull.size() >= 2) {
      const CostPoint &a = hull[hull.size() - 2], &b = hull.back();
      // b is above the segment a-q (or on it): drop it. Slopes compared by cross-multiplying.
      const double lhs = (b.cost - a.cost) * static_cast<double>(q.bytes - a.bytes);
      const double rhs = (q.cost - a.cost) * static_cast<double>(b.bytes - a.bytes);
      if (lhs < rhs) break;
      hull.pop_back();
    }
    hull.push_back(q);
  }
  base_bytes_ += hull.front().bytes;
  base_cost_ += hull.front().cost;
  std::vector<Segment> added;
  for (size_t k = 1; k < hull.size(); ++k) {
    const int64_t bytes = hull[k].bytes - hull[k - 1].bytes;
    const double cost = hull[k].cost - hull[k - 1].cost;
    added.push_back({cost / static_cast<double>(bytes), bytes, cost});
  }
  std::vector<Segment> merged(segments_.size() + added.size());
  std::merge(segments_.begin(), segments_.end(), added.begin(), added.end(), merged.begin(),
             [](const Segment& a, const Segment& b) { return a.slope < b.slope; });
  // Segments of equal slope are taken one after the other: one segment. Identical layers' hulls
  // coincide, so a stage of them keeps its own hull's few segments, not one set per layer (the DP
  // holds a bound per layer of a stage, up to kMaxLayers of them).
  segments_.clear();
  for (const Segment& g : merged) {
    if (!segments_.empty() && segments_.back().slope == g.slope) {
      segments_.back().bytes += g.bytes;
      segments_.back().cost += g.cost;
    } else {
      segments_.push_back(g);
    }
  }
  end_bytes_.resize(segments_.size());
  end_cost_.resize(segments_.size());
  int64_t bytes = 0;
  double cost = 0.0;
  for (size_t k = 0; k < segments_.size(); ++k) {
    end_bytes_[k] = bytes += segments_[k].bytes;
    end_cost_[k] = cost += segments_[k].cost;
  }
}

double CompletionBound::LeastCost(int64_t bytes) const {
  if (infeasible_ || bytes < base_bytes_) return std::numeric_limits<double>::infinity();
  const int64_t extra = bytes - base_bytes_;
  // The first segment that does not fit whole; the ones before it are taken, it in part.
  const size_t k = static_cast<size_t>(std::upper_bound(end_bytes_.begin(), end_bytes_.end(), extra) - end_bytes_.begin());
  if (k == segments_.size()) return base_cost_ + (segments_.empty() ? 0.0 : end_cost_.back());
  const int64_t before_bytes = k == 0 ? 0 : end_bytes_[k - 1];
  const double before_cost = k == 0 ? 0.0 : end_cost_[k - 1];
  return base_cost_ + before_cost + segments_[k].slope * static_cast<double>(extra - before_bytes);
}

}  // namespace kiwi::solve::hybrid
