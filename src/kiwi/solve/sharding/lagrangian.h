#pragma once
// Lagrangian treatment of the usage limit (KIWI appendix 7.1.4's memory constraint; Fisher 1981,
// "The Lagrangian relaxation method for solving integer programming problems"): a price
// lambda_k >= 0 per time segment turns "usage_k(x) <= limit" into the cost term
// lambda_k * (usage_k(x) - limit), so a node's strategy s pays sum over its usage terms of
// usage[s] * (sum of lambda over the term's segments). Any lambda gives a lower bound
// L(lambda) = min_x [cost(x) + sum_k lambda_k (usage_k(x) - limit)] on the optimum.
//
//   std::vector<double> lambda(reduced.segments(), 0.0);
//   NodePrices prices;
//   ComputeNodePrices(reduced, lambda, prices);   // then search with BlockOptimizer(..., &prices)
#include <cstdint>
#include <functional>
#include <vector>

#include "kiwi/solve/sharding/block_dp.h"
#include "kiwi/solve/sharding/local_search.h"
#include "kiwi/solve/sharding/reduction.h"

namespace kiwi::solve::sharding {

// Subgradient optimisation of the prices with Polyak's step (Polyak 1969; Held, Wolfe & Crowder
// 1974): lambda_k <- max(0, lambda_k + theta * (upper - value) / |g|^2 * g_k), g_k = usage_k - limit,
// `value` the Lagrangian value of the current (heuristic) minimiser.
class SubgradientPrices {
 public:
  explicit SubgradientPrices(const ReducedProblem& problem);

  void SetUniform(double lambda);
  // One step from the usage of the state's solution; returns the Lagrangian value of that solution
  // under the prices before the step.
  double Step(const SearchState& state, double upper_bound, double theta);
  const NodePrices& prices() const { return prices_; }
  const std::vector<double>& lambda() const { return lambda_; }
  // Nodes whose prices the last SetUniform or Step changed.
  const std::vector<int32_t>& changed() const { return changed_; }

 private:
  const ReducedProblem* p_;
  std::vector<double> lambda_;
  NodePrices prices_;
  NodePrices previous_;
  std::vector<int32_t> changed_;

  void Update();  // prices from lambda, recording the changed nodes
};

void ComputeNodePrices(const ReducedProblem& problem, const std::vector<double>& lambda, NodePrices& prices);

// L(lambda) = min_x cost(x) + sum_k lambda_k (usage_k(x) - limit), which is <= the optimum, from a
// lower bound on the priced problem min_x (cost(x) - constant_cost + sum_r prices[r][x_r]) with
// prices = ComputeNodePrices(lambda): L(lambda) >= constant_cost + sum_k lambda_k (base_k - limit)
// + that bound.
double LagrangianBound(const ReducedProblem& problem, const std::vector<double>& lambda, double priced_lower_bound);

// A valid lower bound on min_x cost(x) + sum_k lambda_k (usage_k(x) - limit) <= optimum: every
// edge's cost is split half-and-half between its ends and each end takes its least row value, so
// the bound is a sum of independent per-node minima (exact on edgeless problems).
double StarLowerBound(const ReducedProblem& problem, const std::vector<double>& lambda, const NodePrices& prices);

// Prices the usage into the state until it fits: uniform prices from 1e-3 x its cost per unit of its
// usage x duration, ten times higher each round, each round a priced descent from the state, until
// the state fits the limit or ctx.deadline passes. `on_round` runs after each round (the fast
// solver offers the state as an incumbent). True when the state fits. From an answer that
// overflows at a few segments (the core ILP's last one) this is a repair. With `fitted_price` (in and
// out) a positive price from an earlier call, the rounds start half a decade below it and rise by half
// a decade; the price of the round that fits is written back.
bool DescendIntoLimit(SearchContext& ctx, SubgradientPrices& prices, int32_t block_size,
                      const std::function<void()>& on_round = {}, double* fitted_price = nullptr);

}  // namespace kiwi::solve::sharding
