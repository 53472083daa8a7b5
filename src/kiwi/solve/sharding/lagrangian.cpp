#include "kiwi/solve/sharding/lagrangian.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiwi::solve::sharding {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

double Priced(int64_t c) { return c >= ir::kForbiddenCost ? kForbiddenPriced : static_cast<double>(c); }

}  // namespace

SubgradientPrices::SubgradientPrices(const ReducedProblem& problem)
    : p_(&problem), lambda_(Z(problem.segments()), 0.0) {
  ComputeNodePrices(problem, lambda_, prices_);
}

void SubgradientPrices::SetUniform(double lambda) {
  std::fill(lambda_.begin(), lambda_.end(), lambda);
  Update();
}

void SubgradientPrices::Update() {
  std::swap(previous_, prices_);
  ComputeNodePrices(*p_, lambda_, prices_);
  changed_.clear();
  for (size_t r = 0; r < prices_.size(); ++r)
    if (previous_.size() != prices_.size() || previous_[r] != prices_[r]) changed_.push_back(static_cast<int32_t>(r));
}

double SubgradientPrices::Step(const SearchState& state, double upper_bound, double theta) {
  const std::vector<int64_t> usage = state.profile().Values();
  const auto limit = static_cast<double>(p_->usage_limit);
  double value = static_cast<double>(state.Cost()), norm = 0.0;
  for (size_t k = 0; k < usage.size(); ++k) {
    const double g = static_cast<double>(usage[k]) - limit;
    value += lambda_[k] * g;
    if (g > 0 || lambda_[k] > 0) norm += g * g;
  }
  if (norm <= 0.0) return value;
  const double step = theta * std::max(upper_bound - value, 1e-3 * std::abs(upper_bound)) / norm;
  for (size_t k = 0; k < usage.size(); ++k)
    lambda_[k] = std::max(0.0, lambda_[k] + step * (static_cast<double>(usage[k]) - limit));
  Update();
  return value;
}

void ComputeNodePrices(const ReducedProblem& problem, const std::vector<double>& lambda, NodePrices& prices) {
  std::vector<double> prefix(lambda.size() + 1, 0.0);
  for (size_t k = 0; k < lambda.size(); ++k) prefix[k + 1] = prefix[k] + lambda[k];
  prices.resize(problem.nodes.size());
  for (size_t r = 0; r < problem.nodes.size(); ++r) {
    const ReducedNode& node = problem.nodes[r];
    prices[r].assign(node.cost.size(), 0.0);
    for (const UsageTerm& t : node.terms) {
      const double weight = prefix[Z(t.last)] - prefix[Z(t.first)];
      if (weight == 0.0) continue;
      for (size_t s = 0; s < node.cost.size(); ++s) prices[r][s] += weight * static_cast<double>(t.usage[s]);
    }
  }
}

double LagrangianBound(const ReducedProblem& problem, const std::vector<double>& lambda, double priced_lower_bound) {
  double bound = static_cast<double>(problem.constant_cost) + priced_lower_bound;
  for (size_t k = 0; k < lambda.size(); ++k)
    bound += lambda[k] * static_cast<double>(problem.base_usage[k] - problem.usage_limit);
  return bound;
}

double StarLowerBound(const ReducedProblem& problem, const std::vector<double>& lambda, const NodePrices& prices) {
  double bound = 0.0;
  std::vector<double> value;
  for (size_t r = 0; r < problem.nodes.size(); ++r) {
    const ReducedNode& node = problem.nodes[r];
    const size_t n = node.cost.size();
    value.assign(n, 0.0);
    for (size_t s = 0; s < n; ++s) value[s] = Priced(node.cost[s]) + (prices.empty() ? 0.0 : prices[r][s]);
    for (const Incidence& in : node.incident) {
      const int64_t* m = problem.Matrix(in);
      const size_t rows = problem.nodes[Z(in.neighbor)].cost.size();
      for (size_t s = 0; s < n; ++s) {
        double least = std::numeric_limits<double>::infinity();
        for (size_t t = 0; t < rows; ++t) least = std::min(least, Priced(m[t * n + s]));
        value[s] += 0.5 * least;
      }
    }
    bound += *std::min_element(value.begin(), value.end());
  }
  return LagrangianBound(problem, lambda, bound);
}

bool DescendIntoLimit(SearchContext& ctx, SubgradientPrices& prices, int32_t block_size,
                      const std::function<void()>& on_round, double* fitted_price) {
  const SearchState& st = ctx.state;
  double start = 0.0, growth = 10.0;
  if (fitted_price && *fitted_price > 0.0) {  // R: 5 decades of 1-2 s rounds skipped, a finer overshoot
    growth = std::sqrt(10.0);  // half a decade
    start = *fitted_price / growth;
  } else {
    double area = 0.0;  // summed usage x duration (in segments) of the state's usage terms
    for (size_t r = 0; r < ctx.problem.nodes.size(); ++r)
      for (const UsageTerm& t : ctx.problem.nodes[r].terms)
        area += static_cast<double>(t.usage[Z(st.x(static_cast<int32_t>(r)))]) * (t.last - t.first);
    const double cost = st.forbidden() > 0 ? 1.0 : static_cast<double>(st.Cost());
    start = 1e-3 * std::max(cost, 1.0) / std::max(area, 1.0);
  }
  for (double lambda = start; !st.Feasible() && !ctx.deadline.Passed() && lambda < start * 1e15; lambda *= growth) {
    prices.SetUniform(lambda);
    DescendPriced(ctx, &prices.prices(), {.max_sweeps = 100, .block_size = block_size});
    if (on_round) on_round();
    if (st.Feasible() && fitted_price) *fitted_price = lambda;
  }
  return st.Feasible();
}

}  // namespace kiwi::solve::sharding
