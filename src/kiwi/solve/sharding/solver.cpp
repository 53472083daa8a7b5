#include "kiwi/solve/sharding/solver.h"

#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "kiwi/solve/sharding/fast_solver.h"
#include "kiwi/solve/sharding/ilp.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::sharding {

std::optional<double> ShardingResult::gap() const {
  if (!lower_bound || solution.empty()) return std::nullopt;
  const double cost = static_cast<double>(evaluation.cost);
  return cost <= 0.0 ? 0.0 : (cost - static_cast<double>(*lower_bound)) / cost;
}

Result<ShardingResult> SolveSharding(const ir::ShardingProblem& problem, ShardingSolverKind kind,
                                     const ShardingSolveOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  KIWI_RETURN_IF_ERROR(ir::ValidateShardingProblem(problem, problem.name.empty() ? "problem" : problem.name));
  const int64_t floor = ir::MinimumPeakUsage(problem);
  if (problem.usage_limit < floor)
    return Infeasible(fmt::format("usage limit {} is below {}, the smallest peak any solution can have",
                                  problem.usage_limit, floor));
  Result<ShardingResult> result =
      kind == ShardingSolverKind::kIlp ? SolveShardingIlp(problem, options) : SolveShardingFast(problem, options);
  if (!result) return result;
  result->evaluation = ir::Evaluate(problem, result->solution);  // the judge has the last word
  if (!result->evaluation.feasible)
    return Internal(
        fmt::format("{} returned an infeasible solution: {}", result->solver, result->evaluation.violation));
  result->solve_seconds = SecondsSince(start);
  return result;
}

}  // namespace kiwi::solve::sharding
