#include "kiwi/solve/sharding/solver.h"

namespace kiwi::solve::sharding {

std::optional<double> ShardingResult::gap() const {
  if (!lower_bound || solution.empty()) return std::nullopt;
  const double cost = static_cast<double>(evaluation.cost);
  return cost <= 0.0 ? 0.0 : (cost - static_cast<double>(*lower_bound)) / cost;
}

}  // namespace kiwi::solve::sharding
