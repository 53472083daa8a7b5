#include "kiwi/solve/sharding/priced_exact.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kiwi/solve/sharding/core_ilp.h"
#include "kiwi/solve/sharding/message_passing.h"
#include "kiwi/solve/wcsp/toulbar2.h"

namespace kiwi::solve::sharding {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

constexpr double kMaxPrice = 1e14;  // priced totals of 10^4 nodes stay far below kForbiddenCost (10^18)
constexpr double kMinSolverSeconds = 1.5;  // toulbar2 runs whole CPU seconds (at least 1), plus its I/O
// Priced cores from this size on are reparametrised by message passing before toulbar2 (a fifth of
// its time): there toulbar2 alone proves nothing in 5 s (N, 3.5k nodes: 0 of 16 steps), while the
// smaller cores' proofs (L: 733 nodes) give the search its bound.
constexpr size_t kReparametriseNodes = 1000;
constexpr double kReparametriseShare = 0.2;

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

// The core as a cost function network whose costs message passing (message_passing.h) has
// reparametrised for `seconds`: every assignment keeps its cost up to rounding (half a unit per
// table), and each edge's table (each edgeless node's unary) is shifted to a least entry of 0. So
// toulbar2's search starts from message passing's bound, not from its own much lower one (N's first
// step: 203e9 against 167e9), and prunes accordingly.
wcsp::WcspProblem ReparametrisedNetwork(const ReducedProblem& core, double seconds) {
  MessagePassing mp(core);
  mp.LowerBound(seconds);
  std::vector<std::vector<double>> edge_terms, node_terms;
  mp.Reparametrised(edge_terms, node_terms);
  auto shifted = [](const std::vector<double>& t) {
    const double low = *std::min_element(t.begin(), t.end());
    std::vector<int64_t> c(t.size());
    for (size_t k = 0; k < t.size(); ++k)
      c[k] = t[k] - low >= kForbiddenPriced / 10 ? ir::kForbiddenCost : std::llround(t[k] - low);
    return c;
  };
  wcsp::WcspProblem w;
  w.forbidden = ir::kForbiddenCost;
  for (size_t i = 0; i < core.nodes.size(); ++i) {
    w.unary.push_back(node_terms[i].empty() ? std::vector<int64_t>(core.nodes[i].cost.size(), 0) : shifted(node_terms[i]));
  }
  for (size_t e = 0; e < core.edges.size(); ++e) w.binary.push_back({core.edges[e].u, core.edges[e].v, shifted(edge_terms[e])});
  return w;
}

// toulbar2 on the core, as it is or (large cores) reparametrised first; the answer's cost is the
// core's own. A proof on the reparametrised network concerns its rounded costs: not claimed.
std::optional<ExactResult> SolveCoreWithToulbar(const ReducedProblem& core, const std::vector<int32_t>& warm,
                                                double seconds) {
  static const bool available = wcsp::ToulbarAvailable();
  if (!available) return std::nullopt;
  const auto start = std::chrono::steady_clock::now();
  const bool reparametrise = core.nodes.size() >= kReparametriseNodes;
  const wcsp::WcspProblem network =
      reparametrise ? ReparametrisedNetwork(core, kReparametriseShare * seconds) : CoreNetwork(core);
  const double left = seconds - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Result<wcsp::WcspResult> r = wcsp::SolveWcsp(network, {.time_limit_seconds = left, .initial = warm});
  if (!r || r->x.empty()) return std::nullopt;
  ExactResult e;
  e.x = r->x;
  e.cost = ReducedCost(core, e.x);
  if (e.cost >= ir::kForbiddenCost) return std::nullopt;
  e.optimal = r->optimal && !reparametrise;
  e.lower_bound = reparametrise ? 0.0 : static_cast<double>(r->lower_bound.value_or(0) + core.constant_cost);
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
  if (!e && (e = SolveCoreWithToulbar(*core, core_warm, seconds)))
    out.method = core->nodes.size() >= kReparametriseNodes ? "toulbar2, reparametrised" : "toulbar2";
  if (!e || (e->x.empty() && !core->nodes.empty())) return std::nullopt;
  const ir::Solution x = ExpandSolution(*core, e->x);
  out.x.assign(x.begin(), x.end());
  out.optimal = e->optimal && !clamped;
  return out;
}

}  // namespace kiwi::solve::sharding
