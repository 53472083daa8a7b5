#include "kiwi/solve/sharding/block_dp.h"

#include <algorithm>

namespace kiwi::solve::sharding {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

}  // namespace

BlockOptimizer::BlockOptimizer(const ReducedProblem& problem)
    : p_(&problem),
      mark_(problem.nodes.size(), 0),
      count_stamp_(problem.nodes.size(), 0),
      count_(problem.nodes.size(), 0),
      candidate_(problem.nodes.size(), 0) {}

void BlockOptimizer::Begin() {
  if (++stamp_ == 0) {  // wrapped: clear the marks once
    std::fill(mark_.begin(), mark_.end(), 0);
    std::fill(count_stamp_.begin(), count_stamp_.end(), 0);
    stamp_ = 1;
  }
  nodes_.clear();
  parent_.clear();
  up_.clear();
}

void BlockOptimizer::Add(int32_t r, int32_t parent, int32_t incidence) {
  mark_[Z(r)] = stamp_;
  nodes_.push_back(r);
  parent_.push_back(parent);
  up_.push_back(incidence);
  for (const Incidence& in : p_->nodes[Z(r)].incident) {
    const auto j = Z(in.neighbor);
    if (count_stamp_[j] != stamp_) count_stamp_[j] = stamp_, count_[j] = 0;
    ++count_[j];
  }
}

void BlockOptimizer::GrowTree(int32_t seed, int32_t max_size, Rng& rng, TreeShape shape) {
  Begin();
  Add(seed, -1, -1);
  frontier_.clear();
  auto push_neighbours = [&](size_t at) {
    const std::vector<Incidence>& inc = p_->nodes[Z(nodes_[at])].incident;
    const auto deg = static_cast<int32_t>(inc.size());
    const int32_t start = rng.Below(deg);
    for (int32_t k = 0; k < deg; ++k) frontier_.emplace_back(inc[Z((start + k) % deg)].neighbor, static_cast<int32_t>(at));
  };
  push_neighbours(0);
  size_t head = 0;  // breadth-first: the frontier is a queue
  while (static_cast<int32_t>(nodes_.size()) < max_size && head < frontier_.size()) {
    size_t pick = head;
    if (shape == TreeShape::kRandom) pick = head + Z(rng.Below(static_cast<int32_t>(frontier_.size() - head)));
    if (shape == TreeShape::kDepthFirst) pick = frontier_.size() - 1;
    const auto [v, at] = frontier_[pick];
    if (shape == TreeShape::kDepthFirst) frontier_.pop_back(); else std::swap(frontier_[pick], frontier_[head++]);
    if (InBlock(v) || BlockNeighbours(v) != 1) continue;
    const int32_t u = nodes_[Z(at)];
    const std::vector<Incidence>& vin = p_->nodes[Z(v)].incident;
    const auto up = std::find_if(vin.begin(), vin.end(), [u](const Incidence& in) { return in.neighbor == u; });
    Add(v, at, static_cast<int32_t>(up - vin.begin()));
    push_neighbours(nodes_.size() - 1);
  }
}

void BlockOptimizer::SetNodes(const std::vector<int32_t>& nodes) {
  Begin();
  for (int32_t r : nodes) candidate_[Z(r)] = 1;
  for (int32_t root : nodes) {
    if (!candidate_[Z(root)]) continue;
    candidate_[Z(root)] = 0;
    if (BlockNeighbours(root) > 0) continue;  // joining an earlier tree would close a cycle
    const size_t first = nodes_.size();
    Add(root, -1, -1);
    for (size_t head = first; head < nodes_.size(); ++head) {
      const int32_t u = nodes_[head];
      const std::vector<Incidence>& inc = p_->nodes[Z(u)].incident;
      for (size_t k = 0; k < inc.size(); ++k) {
        const int32_t v = inc[k].neighbor;
        if (!candidate_[Z(v)] || BlockNeighbours(v) != 1) continue;
        candidate_[Z(v)] = 0;
        const std::vector<Incidence>& vin = p_->nodes[Z(v)].incident;
        const auto up = std::find_if(vin.begin(), vin.end(), [u](const Incidence& in) { return in.neighbor == u; });
        Add(v, static_cast<int32_t>(head), static_cast<int32_t>(up - vin.begin()));
      }
    }
  }
  for (int32_t r : nodes) candidate_[Z(r)] = 0;
}

// Node cost plus edges to fixed neighbours: the state's per-strategy neighbour costs minus the
// block's own tree edges, then priced.
void BlockOptimizer::Unary(const SearchState& state, const NodePrices* prices) {
  offset_.assign(nodes_.size() + 1, 0);
  for (size_t i = 0; i < nodes_.size(); ++i) offset_[i + 1] = offset_[i] + p_->nodes[Z(nodes_[i])].cost.size();
  finite_.resize(offset_.back());
  forbidden_.resize(offset_.back());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const ReducedNode& node = p_->nodes[Z(nodes_[i])];
    const int64_t* nb = state.NeighbourCost(nodes_[i]);
    const int32_t* nf = state.NeighbourForbidden(nodes_[i]);
    for (size_t s = 0; s < node.cost.size(); ++s) {
      const bool bad = node.cost[s] >= ir::kForbiddenCost;
      finite_[offset_[i] + s] = nb[s] + (bad ? 0 : node.cost[s]);
      forbidden_[offset_[i] + s] = nf[s] + (bad ? 1 : 0);
    }
  }
  auto remove = [&](size_t i, const int64_t* row) {
    for (size_t s = 0; s < offset_[i + 1] - offset_[i]; ++s) {
      if (row[s] >= ir::kForbiddenCost) --forbidden_[offset_[i] + s]; else finite_[offset_[i] + s] -= row[s];
    }
  };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (parent_[i] < 0) continue;
    const auto p = Z(parent_[i]);
    const Incidence& in = p_->nodes[Z(nodes_[i])].incident[Z(up_[i])];
    remove(i, p_->Matrix(in) + Z(state.x(nodes_[p])) * (offset_[i + 1] - offset_[i]));
    remove(p, p_->MatrixFromNeighbor(in) + Z(state.x(nodes_[i])) * (offset_[p + 1] - offset_[p]));
  }
  h_.resize(offset_.back());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const std::vector<double>* price = prices != nullptr && !prices->empty() ? &(*prices)[Z(nodes_[i])] : nullptr;
    for (size_t s = 0, o = offset_[i]; o < offset_[i + 1]; ++s, ++o)
      h_[o] = static_cast<double>(finite_[o]) + kForbiddenPriced * forbidden_[o] + (price ? (*price)[s] : 0.0);
  }
}

// Value of the block's current strategies under the same objective (unary + tree edges).
double BlockOptimizer::CurrentValue(const SearchState& state) const {
  double current = 0.0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const int32_t r = nodes_[i];
    current += h_[offset_[i] + Z(state.x(r))];
    if (parent_[i] < 0) continue;
    const Incidence& in = p_->nodes[Z(r)].incident[Z(up_[i])];
    current += Matrix(in)[Z(state.x(in.neighbor)) * (offset_[i + 1] - offset_[i]) + Z(state.x(r))];
  }
  return current;
}

// Min-sum messages towards the roots: h[parent][sp] += min_s (edge[sp][s] + h[i][s]).
void BlockOptimizer::Upward() {
  for (size_t i = nodes_.size(); i-- > 0;) {
    if (parent_[i] < 0) continue;
    const size_t n = offset_[i + 1] - offset_[i];
    const auto p = Z(parent_[i]);
    const size_t np = offset_[p + 1] - offset_[p];
    const double* m = Matrix(p_->nodes[Z(nodes_[i])].incident[Z(up_[i])]);
    const double* h = h_.data() + offset_[i];
    double* hp = h_.data() + offset_[p];
    for (size_t sp = 0; sp < np; ++sp) {
      const double* row = m + sp * n;
      double best = row[0] + h[0];
      for (size_t s = 1; s < n; ++s) best = std::min(best, row[s] + h[s]);
      hp[sp] += best;
    }
  }
}

// Best strategy of block node i given its parent's choice (or at a root), ties to the current one.
int32_t BlockOptimizer::Choose(const SearchState& state, size_t i, const std::vector<int32_t>& proposal) const {
  const size_t n = offset_[i + 1] - offset_[i];
  const double* h = h_.data() + offset_[i];
  const double* row = nullptr;
  if (parent_[i] >= 0)
    row = Matrix(p_->nodes[Z(nodes_[i])].incident[Z(up_[i])]) + Z(proposal[Z(parent_[i])]) * n;
  auto value = [&](size_t s) { return row ? row[s] + h[s] : h[s]; };
  size_t best_s = Z(state.x(nodes_[i]));
  double best = value(best_s);
  for (size_t s = 0; s < n; ++s)
    if (value(s) < best) best = value(s), best_s = s;
  return static_cast<int32_t>(best_s);
}

double BlockOptimizer::Optimize(const SearchState& state, const NodePrices* prices, std::vector<int32_t>& proposal) {
  Unary(state, prices);
  const double current = CurrentValue(state);
  Upward();
  proposal.assign(nodes_.size(), 0);
  double best_total = 0.0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    proposal[i] = Choose(state, i, proposal);
    if (parent_[i] < 0) best_total += h_[offset_[i] + Z(proposal[i])];
  }
  return current - best_total;
}

}  // namespace kiwi::solve::sharding
