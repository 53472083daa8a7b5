#include "kiwi/solve/sharding/local_search.h"

#include <algorithm>
#include <numeric>

namespace kiwi::solve::sharding {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

void Shuffle(std::vector<int32_t>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[Z(rng.Below(static_cast<int32_t>(i)))]);
}

// One sweep; `apply` decides about each proposal and returns whether it was kept.
template <typename Apply>
int64_t Sweep(SearchContext& ctx, const NodePrices* prices, const SweepOptions& options, Apply apply) {
  Shuffle(ctx.order, ctx.rng);
  ++ctx.sweep;
  int64_t moves = 0;
  std::vector<int32_t> before;
  for (size_t k = 0; k < ctx.order.size(); ++k) {
    const int32_t seed = ctx.order[k];
    if (ctx.covered[Z(seed)] == ctx.sweep || (options.dirty_only && !ctx.dirty[Z(seed)])) continue;
    if ((k & 15) == 0 && ctx.deadline.Passed()) break;
    ctx.optimizer.GrowTree(seed, options.block_size, ctx.rng, options.shape);
    const std::vector<int32_t>& nodes = ctx.optimizer.nodes();
    before.resize(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) ctx.covered[Z(nodes[i])] = ctx.sweep, before[i] = ctx.state.x(nodes[i]);
    const double gain = ctx.optimizer.Optimize(ctx.state, prices, ctx.proposal);
    const double scale = ctx.state.forbidden() > 0 ? 1.0 : static_cast<double>(ctx.state.Cost());
    const bool kept = gain > 1e-9 * std::max(1.0, scale) && apply();  // below: rounding noise
    for (int32_t r : nodes) ctx.dirty[Z(r)] = 0;
    if (!kept) continue;
    ++moves;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (ctx.state.x(nodes[i]) != before[i]) MarkDirty(ctx, nodes[i]);
  }
  return moves;
}

}  // namespace

SearchContext::SearchContext(const ReducedProblem& p, std::vector<int32_t> x, const Deadline& d, uint64_t seed)
    : problem(p), state(p, std::move(x)), optimizer(p), rng(seed), deadline(d), covered(p.nodes.size(), 0),
      dirty(p.nodes.size(), 1) {
  order.resize(p.nodes.size());
  std::iota(order.begin(), order.end(), 0);
}

void LoggedSet(SearchContext& ctx, ChangeLog& log, int32_t r, int32_t s) {
  if (ctx.state.x(r) == s) return;
  log.emplace_back(r, ctx.state.x(r));
  ctx.state.Set(r, s);
}

void Undo(SearchContext& ctx, ChangeLog& log) {
  for (size_t i = log.size(); i-- > 0;) ctx.state.Set(log[i].first, log[i].second);
  log.clear();
}

void MarkDirty(SearchContext& ctx, int32_t r) {
  ctx.dirty[Z(r)] = 1;
  for (const Incidence& in : ctx.problem.nodes[Z(r)].incident) ctx.dirty[Z(in.neighbor)] = 1;
}

int64_t DescendPriced(SearchContext& ctx, const NodePrices* prices, const SweepOptions& options) {
  int64_t total = 0;
  for (int32_t sweep = 0; sweep < options.max_sweeps && !ctx.deadline.Passed(); ++sweep) {
    const int64_t moves = Sweep(ctx, prices, options, [&] {
      const std::vector<int32_t>& nodes = ctx.optimizer.nodes();
      for (size_t i = 0; i < nodes.size(); ++i) ctx.state.Set(nodes[i], ctx.proposal[i]);
      return true;
    });
    total += moves;
    if (moves == 0) break;
  }
  return total;
}

int64_t DescendFeasible(SearchContext& ctx, const NodePrices* prices, const SweepOptions& options) {
  ChangeLog log;
  int64_t total = 0;
  for (int32_t sweep = 0; sweep < options.max_sweeps && !ctx.deadline.Passed(); ++sweep) {
    const int64_t moves = Sweep(ctx, prices, options, [&] {
      const int64_t cost = ctx.state.Cost();
      log.clear();
      for (size_t i = 0; i < ctx.proposal.size(); ++i) LoggedSet(ctx, log, ctx.optimizer.nodes()[i], ctx.proposal[i]);
      if (ctx.state.Feasible() && ctx.state.Cost() < cost) return true;
      Undo(ctx, log);
      return false;
    });
    total += moves;
    if (moves == 0) break;
  }
  return total;
}

namespace {

// The nodes of a breadth-first ball of `size` nodes around a random node.
std::vector<int32_t> RandomBall(SearchContext& ctx, int32_t size) {
  std::vector<int32_t> ball{ctx.rng.Below(static_cast<int32_t>(ctx.problem.nodes.size()))};
  ++ctx.sweep;
  ctx.covered[Z(ball[0])] = ctx.sweep;
  for (size_t head = 0; head < ball.size() && static_cast<int32_t>(ball.size()) < size; ++head)
    for (const Incidence& in : ctx.problem.nodes[Z(ball[head])].incident) {
      if (ctx.covered[Z(in.neighbor)] == ctx.sweep || static_cast<int32_t>(ball.size()) >= size) continue;
      ctx.covered[Z(in.neighbor)] = ctx.sweep;
      ball.push_back(in.neighbor);
    }
  return ball;
}

}  // namespace

void Perturb(SearchContext& ctx, int32_t size) {
  if (ctx.problem.nodes.empty()) return;
  for (int32_t r : RandomBall(ctx, size)) ctx.state.Set(r, ctx.rng.Below(ctx.problem.nodes[Z(r)].strategies()));
}

std::vector<int32_t> GreedyInitialSolution(const ReducedProblem& problem, const NodePrices* prices, Rng* noise,
                                           double noise_level) {
  std::vector<int32_t> x(problem.nodes.size(), -1);
  std::vector<double> value;
  for (size_t r = 0; r < problem.nodes.size(); ++r) {
    const ReducedNode& node = problem.nodes[r];
    const size_t n = node.cost.size();
    value.assign(n, 0.0);
    auto add = [&](size_t s, int64_t c) { value[s] += c >= ir::kForbiddenCost ? kForbiddenPriced : static_cast<double>(c); };
    for (size_t s = 0; s < n; ++s) add(s, node.cost[s]);
    if (prices != nullptr && !prices->empty())
      for (size_t s = 0; s < n; ++s) value[s] += (*prices)[r][s];
    for (const Incidence& in : node.incident) {
      if (x[Z(in.neighbor)] < 0) continue;
      const int64_t* row = problem.Matrix(in) + Z(x[Z(in.neighbor)]) * n;
      for (size_t s = 0; s < n; ++s) add(s, row[s]);
    }
    if (noise != nullptr)
      for (double& v : value) v *= 1.0 + noise_level * (2.0 * noise->Unit() - 1.0);
    x[r] = static_cast<int32_t>(std::min_element(value.begin(), value.end()) - value.begin());
  }
  return x;
}

}  // namespace kiwi::solve::sharding
