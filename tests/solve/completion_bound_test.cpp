// The layer DP's completion bound (completion_bound.h): never above the cheapest assignment of the
// covered layers within the allowance (brute force over every assignment), exact on one layer's hull
// points and where the allowance lets every layer take its cheapest option, +inf below the smallest.
#include "kiwi/solve/hybrid/completion_bound.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <vector>

namespace kiwi::solve::hybrid {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The cheapest assignment of one option per layer with at most `bytes` between them (+inf if none).
double BruteForce(const std::vector<std::vector<CostPoint>>& layers, int64_t bytes, size_t layer = 0) {
  if (layer == layers.size()) return bytes >= 0 ? 0.0 : kInf;
  double best = kInf;
  for (const CostPoint& o : layers[layer]) best = std::min(best, o.cost + BruteForce(layers, bytes - o.bytes, layer + 1));
  return best;
}

TEST(CompletionBound, NoLayersCostNothing) {
  const CompletionBound none;
  EXPECT_EQ(none.LeastCost(0), 0.0);
  EXPECT_EQ(none.LeastCost(1 << 20), 0.0);
  EXPECT_EQ(none.LeastCost(-1), kInf);
}

TEST(CompletionBound, OneLayerFollowsItsLowerHull) {
  CompletionBound one;
  // (200, 4.5) lies above the segment (100, 5)-(300, 2); (400, 2.5) costs more than (300, 2).
  one.Prepend({{300, 2.0}, {100, 5.0}, {200, 4.5}, {400, 2.5}, {100, 6.0}});
  EXPECT_EQ(one.LeastBytes(), 100);
  EXPECT_EQ(one.LeastCost(99), kInf);
  EXPECT_DOUBLE_EQ(one.LeastCost(100), 5.0);
  EXPECT_DOUBLE_EQ(one.LeastCost(200), 3.5);  // half-way along the hull, below the option at 200
  EXPECT_DOUBLE_EQ(one.LeastCost(300), 2.0);
  EXPECT_DOUBLE_EQ(one.LeastCost(1000), 2.0);
}

TEST(CompletionBound, IdenticalLayersScaleOneLayersHull) {  // their segments coalesce, the bound stays exact
  const std::vector<CostPoint> options = {{100, 5.0}, {300, 2.0}, {500, 1.5}};
  CompletionBound one, three;
  one.Prepend(options);
  for (int k = 0; k < 3; ++k) three.Prepend(options);
  EXPECT_EQ(three.LeastBytes(), 300);
  for (int64_t bytes : {100, 150, 300, 450, 500})
    EXPECT_NEAR(three.LeastCost(3 * bytes), 3 * one.LeastCost(bytes), 1e-12) << bytes;
}

TEST(CompletionBound, ALayerWithoutOptionsCannotComplete) {
  CompletionBound b;
  b.Prepend({{10, 1.0}});
  b.Prepend({});
  b.Prepend({{10, 1.0}});
  EXPECT_EQ(b.LeastCost(1 << 30), kInf);
}

TEST(CompletionBound, NeverAboveBruteForceAndExactAtTheEnds) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> count(1, 5), bytes(0, 50);
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::vector<CostPoint>> layers(static_cast<size_t>(1 + trial % 4));
    CompletionBound bound;
    for (size_t l = layers.size(); l-- > 0;) {
      for (int k = count(rng); k > 0; --k) layers[l].push_back({bytes(rng), cost(rng)});
      bound.Prepend(layers[l]);
    }
    int64_t least = 0, roomy = 0;
    double cheapest = 0.0;
    for (const auto& options : layers) {
      int64_t small = std::numeric_limits<int64_t>::max(), big = 0;
      double low = kInf;
      for (const CostPoint& o : options) {
        small = std::min(small, o.bytes);
        big = std::max(big, o.bytes);
        low = std::min(low, o.cost);
      }
      least += small;
      roomy += big;
      cheapest += low;
    }
    EXPECT_EQ(bound.LeastBytes(), least);
    EXPECT_EQ(bound.LeastCost(least - 1), kInf);
    for (int64_t b = least; b <= roomy + 1; ++b)
      EXPECT_LE(bound.LeastCost(b), BruteForce(layers, b) + 1e-9) << "trial " << trial << " bytes " << b;
    EXPECT_NEAR(bound.LeastCost(roomy), cheapest, 1e-9) << "trial " << trial;
  }
}

}  // namespace
}  // namespace kiwi::solve::hybrid
