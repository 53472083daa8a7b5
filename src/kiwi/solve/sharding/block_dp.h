#pragma once
// Multi-node moves for the sharding search: grow a tree-shaped block of reduced nodes (the block's
// induced subgraph is a tree) and re-optimise all its strategies at once by dynamic programming
// (min-sum on a tree), every node outside the block held at its current strategy. The objective is
// the true cost plus optional Lagrangian usage prices (lagrangian.h); the usage limit itself is
// checked by the caller. Cost of one DP: sum over tree edges of |S_p| * |S_c| plus the boundary.
//
//   BlockOptimizer opt(reduced);
//   opt.GrowTree(seed, 64, rng);
//   if (opt.Optimize(state, &prices, proposal) > 0) { /* apply proposal to opt.nodes() */ }
#include <cstdint>
#include <vector>

#include "kiwi/solve/sharding/search_state.h"

namespace kiwi::solve::sharding {

// A small deterministic generator (splitmix64): the search's only source of randomness.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int32_t Below(int32_t n) { return n <= 0 ? 0 : static_cast<int32_t>(Next() % static_cast<uint64_t>(n)); }
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_;
};

// How a tree block grows from its seed: level by level, from a random frontier node, or deepest first
// (long paths, e.g. along a model's layer chain).
enum class TreeShape : uint8_t { kBreadthFirst, kRandom, kDepthFirst };

// Per reduced node and strategy, the priced usage (empty: no prices).
using NodePrices = std::vector<std::vector<double>>;

class BlockOptimizer {
 public:
  explicit BlockOptimizer(const ReducedProblem& problem);

  // A tree block grown from `seed`: a node joins when exactly one of its neighbours is already in
  // the block. Neighbours are scanned from a random offset.
  void GrowTree(int32_t seed, int32_t max_size, Rng& rng, TreeShape shape = TreeShape::kBreadthFirst);
  // A block of given nodes, which must induce a forest (checked: nodes breaking it are dropped).
  void SetNodes(const std::vector<int32_t>& nodes);
  const std::vector<int32_t>& nodes() const { return nodes_; }

  // The block's best strategies given the rest of `state` (ties keep the current strategy), into
  // proposal[i] for nodes()[i]. Returns the priced objective's decrease (>= 0 up to rounding).
  double Optimize(const SearchState& state, const NodePrices* prices, std::vector<int32_t>& proposal);

 private:
  bool InBlock(int32_t r) const { return mark_[static_cast<size_t>(r)] == stamp_; }
  int32_t BlockNeighbours(int32_t r) const {
    return count_stamp_[static_cast<size_t>(r)] == stamp_ ? count_[static_cast<size_t>(r)] : 0;
  }
  void Begin();
  void Add(int32_t r, int32_t parent, int32_t incidence);
  void Unary(const SearchState& state, const NodePrices* prices);
  double CurrentValue(const SearchState& state) const;
  void Upward();
  int32_t Choose(const SearchState& state, size_t i, const std::vector<int32_t>& proposal) const;
  const double* Matrix(const Incidence& in) const { return p_->PricedMatrix(in); }

  const ReducedProblem* p_;
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  std::vector<uint32_t> count_stamp_;  // count_[r] = r's neighbours in the block, valid at stamp_
  std::vector<int32_t> count_;
  std::vector<uint8_t> candidate_;
  std::vector<int64_t> finite_;        // unary before pricing: finite part and forbidden count
  std::vector<int32_t> forbidden_;
  std::vector<std::pair<int32_t, int32_t>> frontier_;  // (candidate, index of its block neighbour)
  std::vector<int32_t> nodes_;
  std::vector<int32_t> parent_;     // index in nodes_, -1 for roots
  std::vector<int32_t> up_;         // incidence index (in the node's list) towards the parent
  std::vector<size_t> offset_;      // into h_
  std::vector<double> h_;
};

}  // namespace kiwi::solve::sharding
