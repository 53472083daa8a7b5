#include "kiwi/solve/sharding/priced_exact.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kiwi/solve/sharding/core_ilp.h"
#include "kiwi/solve/wcsp/toulbar2.h"

namespace kiwi::solve::sharding {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

constexpr double kMaxPrice = 1e14;  // priced totals of 10^4 nodes stay far below kForbiddenCost (10^18)
constexpr double kMinSolverSeconds = 1.5;  // toulbar2 runs whole CPU seconds (at least 1), plus its I/O

// The priced problem as a sharding problem without usage: node k is reduced node k. `clamped` tells
// whether a price was cut at kMaxPrice (then the minimiser is not exact).
ir::ShardingProblem PricedProblem(const ReducedProblem& p, const NodePrices& prices, bool& clamped) {
  ir::ShardingProblem priced;
  priced.nodes.resize(p.nodes.size());
  for (size_t r = 0; r < p.nodes.size(); ++r) {
    ir::ShardingNode& node = priced.nodes[r];
    node.cost = p.nodes[r].cost;
    node.usage.assign(node.cost.size(), 0);
    if (prices.empty()) continue;
    for (size_t s = 0; s < node.cost.size(); ++s) {
      clamped = clamped || prices[r][s] > kMaxPrice;
      node.cost[s] = ir::AddCost(node.cost[s], std::llround(std::clamp(prices[r][s], 0.0, kMaxPrice)));
    }
  }
  priced.edges.reserve(p.edges.size());
  for (const ReducedEdge& e : p.edges) priced.edges.push_back(ir::ShardingEdge{e.u, e.v, e.cost});
  return priced;
}

// `warm` in the core's strategy indices, or empty when one of its strategies was reduced away.
std::vector<int32_t> CoreWarmStart(const ReducedProblem& core, const std::vector<int32_t>& warm) {
  if (warm.empty()) return {};
  std::vector<int32_t> x(core.nodes.size(), 0);
  for (size_t r = 0; r < core.nodes.size(); ++r) {
    const std::vector<int32_t>& keep = core.strategy_of[r];
    const auto it = std::find(keep.begin(), keep.end(), warm[Z(core.original[r])]);
    if (it == keep.end()) return {};
    x[r] = static_cast<int32_t>(it - keep.begin());
  }
  return x;
}

// The core as a cost function network for toulbar2 (its constant cost left out).
wcsp::WcspProblem CoreNetwork(const ReducedProblem& core) {
  wcsp::WcspProblem w;
  w.forbidden = ir::kForbiddenCost;
  for (const ReducedNode& node : core.nodes) w.unary.push_back(node.cost);
  for (const ReducedEdge& e : core.edges) w.binary.push_back({e.u, e.v, e.cost});
  return w;
}

std::optional<ExactResult> SolveCoreWithToulbar(const ReducedProblem& core, const std::vector<int32_t>& warm,
                                                double seconds) {
  static const bool available = wcsp::ToulbarAvailable();
  if (!available) return std::nullopt;
  const wcsp::WcspProblem network = CoreNetwork(core);
  Result<wcsp::WcspResult> r = wcsp::SolveWcsp(network, {.time_limit_seconds = seconds, .initial = warm});
  if (!r || r->x.empty() || r->cost >= ir::kForbiddenCost) return std::nullopt;
  ExactResult e;
  e.x = r->x;
  e.cost = ReducedCost(core, e.x);
  e.optimal = r->optimal;
  e.lower_bound = static_cast<double>(r->lower_bound.value_or(0) + core.constant_cost);
  return e;
}

}  // namespace

std::optional<PricedSolution> SolvePricedExactly(const ReducedProblem& problem, const NodePrices& prices,
                                                 const std::vector<int32_t>& warm, const PricedSolveOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  bool clamped = false;
  Result<ReducedProblem> core = ReduceShardingProblem(PricedProblem(problem, prices, clamped));
  if (!core) return std::nullopt;
  const double left = options.total_seconds - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double seconds = std::min(options.seconds, left);  // for the ILP or toulbar2
  PricedSolution out;
  const std::vector<int32_t> core_warm = CoreWarmStart(*core, warm);
  std::optional<ExactResult> e;
  if (core->nodes.empty()) {
    e = ExactResult{{}, core->constant_cost, static_cast<double>(core->constant_cost), true, {}};
    out.method = "reductions";
  }
  if (!e && (e = EnumerateReduced(*core, options.max_enumeration))) out.method = "enumeration";
  if (!e && seconds < kMinSolverSeconds) return std::nullopt;  // too little time left for either
  if (!e && ModelSizeForIlp(*core) <= options.max_ilp_variables) {
    e = SolveReducedIlp(*core, core_warm, {.time_limit_seconds = seconds, .relative_gap = 1e-9, .threads = 1,
                                           .max_variables = options.max_ilp_variables});
    out.method = "ilp";
  }
  if (!e && (e = SolveCoreWithToulbar(*core, core_warm, seconds))) out.method = "toulbar2";
  if (!e || (e->x.empty() && !core->nodes.empty())) return std::nullopt;
  const ir::Solution x = ExpandSolution(*core, e->x);
  out.x.assign(x.begin(), x.end());
  out.optimal = e->optimal && !clamped;
  return out;
}

}  // namespace kiwi::solve::sharding
