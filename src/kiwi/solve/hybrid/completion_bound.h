#pragma once
// A lower bound on what the rest of a pipeline stage costs within the memory it has left, for the
// layer DP's branch and bound (layer_dp.h): the LP relaxation of the multiple-choice knapsack over the
// remaining layers (pick one option per layer, their bytes at most the allowance, least total cost).
// Each layer's options are replaced by the lower convex hull of its (bytes, cost) points; the
// relaxation is then solved greedily, steepest saving per byte first (Dantzig's bound for the
// knapsack, Sinha and Zoltners 1979 for the multiple-choice one). Exact for one layer's hull points,
// never above the integer optimum.
//
//   CompletionBound rest;                      // no layers: costs 0 with any allowance >= 0
//   rest.Prepend({{100, 5.0}, {300, 2.0}});    // one layer: 100 bytes at cost 5, or 300 at cost 2
//   rest.LeastCost(200);                       // 3.5 (half-way along the hull)
//   rest.LeastCost(50);                        // +inf: no option fits
#include <cstdint>
#include <vector>

namespace kiwi::solve::hybrid {

struct CostPoint {
  int64_t bytes = 0;
  double cost = 0.0;
};

class CompletionBound {
 public:
  // Adds a layer (its options; none: nothing can complete) to the set the bound covers.
  void Prepend(const std::vector<CostPoint>& options);
  // The least cost of the covered layers with at most `bytes` between them (+inf below their
  // smallest options).
  double LeastCost(int64_t bytes) const;
  int64_t LeastBytes() const { return base_bytes_; }

 private:
  struct Segment {
    double slope = 0.0;  // cost change per byte (negative)
    int64_t bytes = 0;   // its length (> 0)
    double cost = 0.0;   // its cost change (slope * bytes)
  };
  bool infeasible_ = false;
  int64_t base_bytes_ = 0;  // every layer at its smallest option
  double base_cost_ = 0.0;  // (the cheapest of those)
  std::vector<Segment> segments_;     // of all layers, steepest first
  std::vector<int64_t> end_bytes_;    // prefix sums of segments_' bytes
  std::vector<double> end_cost_;      // and of their costs
};

}  // namespace kiwi::solve::hybrid
