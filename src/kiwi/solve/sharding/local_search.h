#pragma once
// Local search moves of the fast sharding solver over a ReducedProblem: sweeps of tree-block
// dynamic programming (block_dp.h) under an optional Lagrangian price, either unconstrained (the
// priced objective only: the Lagrangian subproblem) or feasible (a move stands only if the usage
// limit still holds and the true cost drops), and random perturbations for iterated local search.
//
//   SearchContext ctx(reduced, x0, deadline, seed);
//   DescendPriced(ctx, &prices, {.max_sweeps = 3});
//   if (ctx.state.Feasible()) DescendFeasible(ctx, &prices, {});
#include <chrono>
#include <cstdint>
#include <vector>

#include "kiwi/solve/sharding/block_dp.h"
#include "kiwi/solve/sharding/search_state.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::sharding {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  Deadline(Clock::time_point start, double seconds)
      : start_(start), end_(DeadlineAfter(start, seconds)) {}
  bool Passed() const { return Clock::now() >= end_; }
  double Elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double Left() const { return std::chrono::duration<double>(end_ - Clock::now()).count(); }

 private:
  Clock::time_point start_;
  Clock::time_point end_;
};

struct SearchContext {
  SearchContext(const ReducedProblem& problem, std::vector<int32_t> x, const Deadline& deadline, uint64_t seed);

  const ReducedProblem& problem;
  SearchState state;
  BlockOptimizer optimizer;
  Rng rng;
  const Deadline& deadline;
  std::vector<int32_t> order;     // seed order, reshuffled each sweep
  std::vector<uint32_t> covered;  // per node: sweep stamp of the last block holding it
  std::vector<uint8_t> dirty;     // per node: may improve (its price or a neighbour changed since)
  uint32_t sweep = 0;
  std::vector<int32_t> proposal;
};

struct SweepOptions {
  int32_t max_sweeps = 1;
  int32_t block_size = 50;
  TreeShape shape = TreeShape::kBreadthFirst;
  bool dirty_only = false;  // seed only at dirty nodes; blocks that cannot improve become clean
};

// Strategy changes as (node, previous strategy), so that a tentative move can be undone.
using ChangeLog = std::vector<std::pair<int32_t, int32_t>>;
void LoggedSet(SearchContext& ctx, ChangeLog& log, int32_t r, int32_t s);
void Undo(SearchContext& ctx, ChangeLog& log);

// Marks r and its neighbours dirty.
void MarkDirty(SearchContext& ctx, int32_t r);

// Sweeps of tree blocks, seeded at nodes not yet covered in the sweep, applying every block whose
// priced objective drops (the usage limit is ignored). Stops after a sweep without a move, after
// max_sweeps, or at the deadline. Returns the number of moves.
int64_t DescendPriced(SearchContext& ctx, const NodePrices* prices, const SweepOptions& options);

// The same sweeps, keeping a block's new strategies only when the solution stays within the usage
// limit and its true cost drops (the state must be feasible to start with).
int64_t DescendFeasible(SearchContext& ctx, const NodePrices* prices, const SweepOptions& options);

// Gives the nodes of a breadth-first ball of `size` nodes around a random node random strategies.
void Perturb(SearchContext& ctx, int32_t size);

// A solution built in node order: each node takes the strategy cheapest against the neighbours
// already decided (forbidden entries avoided where possible).
std::vector<int32_t> GreedyInitialSolution(const ReducedProblem& problem, const NodePrices* prices = nullptr,
                                           Rng* noise = nullptr, double noise_level = 0.0);

}  // namespace kiwi::solve::sharding
