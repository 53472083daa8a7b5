#pragma once
// The intra-operator sharding problem (KIWI §3.1 / appendix 7.1.4, Alpa, XLA auto-sharding; the
// ASPLOS 2025 IOPDDL contest format): pick one strategy per node so that the summed node and edge
// costs are least while, at every time step, the usages of the nodes live at that step stay within
// the usage limit. It is the IR's lowered form for sharding: model graphs (solve/sharding/lowering.h)
// and IOPDDL files (io/iopddl_json.h) both lower to it; every solver answers with a Solution that
// Evaluate() judges.
//
//   ShardingProblem p = ...;
//   Solution s(p.nodes.size(), 0);
//   Evaluation e = Evaluate(p, s);        // e.cost, e.feasible, e.peak_usage
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kiwi/util/result.h"

namespace kiwi::ir {

// Costs at or above this mark a forbidden strategy (the contest files use 10^18); totals saturate.
inline constexpr int64_t kForbiddenCost = 1'000'000'000'000'000'000;
inline constexpr int64_t kNoUsageLimit = std::numeric_limits<int64_t>::max();

struct ShardingNode {
  int64_t start = 0;            // live interval [start, end); empty when end <= start
  int64_t end = 0;
  std::vector<int64_t> cost;    // per strategy (>= 0)
  std::vector<int64_t> usage;   // per strategy (>= 0), counted at every t in [start, end)
  int32_t strategies() const { return static_cast<int32_t>(cost.size()); }
  bool live() const { return end > start; }
};

struct ShardingEdge {
  int32_t u = 0;                // edge cost depends on the strategies of u and v
  int32_t v = 0;
  std::vector<int64_t> cost;    // |S_u| x |S_v|, row-major: cost[s_u * |S_v| + s_v]
};

struct ShardingProblem {
  std::string name;
  std::vector<ShardingNode> nodes;
  std::vector<ShardingEdge> edges;
  int64_t usage_limit = kNoUsageLimit;
  std::vector<std::string> strategy_names;  // optional, per node: "S0R = S0R x RR;S1R = ..." (IR lowering)
};

using Solution = std::vector<int32_t>;  // one strategy index per node

// Checks the structure (kBadInput naming `source` and the field, in the IOPDDL file's own terms):
// every node has >= 1 strategy, costs and usages agree in length and are >= 0, edge endpoints are in
// range and distinct, and every edge matrix has |S_u| * |S_v| entries.
Status ValidateShardingProblem(const ShardingProblem& problem, const std::string& source);

// An exact, independent judge of a solution.
struct Evaluation {
  bool valid = false;           // one index per node, each in range
  bool feasible = false;        // valid, no forbidden cost and the usage limit holds at every step
  int64_t cost = 0;             // node costs + edge costs, saturating at kForbiddenCost
  int64_t peak_usage = 0;       // max over time of the summed usage of live nodes
  int64_t peak_time = 0;        // first time reaching peak_usage
  std::string violation;        // why not feasible, for humans ("usage 60 > limit 50 at t=110")
};
Evaluation Evaluate(const ShardingProblem& problem, const Solution& solution);

// Adds costs without overflow: any sum reaching kForbiddenCost is kForbiddenCost.
inline int64_t AddCost(int64_t a, int64_t b) {
  return (a >= kForbiddenCost - b) ? kForbiddenCost : a + b;
}

// The smallest usage any solution can peak at: max over time of the summed per-node minimum usage
// (a lower bound; with the limit below it no solution exists).
int64_t MinimumPeakUsage(const ShardingProblem& problem);

}  // namespace kiwi::ir
