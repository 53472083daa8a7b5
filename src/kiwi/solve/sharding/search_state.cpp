#include "kiwi/solve/sharding/search_state.h"

namespace kiwi::solve::sharding {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

}  // namespace

SearchState::SearchState(const ReducedProblem& problem, std::vector<int32_t> x)
    : p_(&problem), x_(std::move(x)), profile_(ReducedUsage(problem, x_)) {
  finite_cost_ = problem.constant_cost;
  offset_.assign(problem.nodes.size() + 1, 0);
  for (size_t r = 0; r < x_.size(); ++r) {
    const int64_t c = problem.nodes[r].cost[Z(x_[r])];
    if (c >= ir::kForbiddenCost) ++forbidden_; else finite_cost_ += c;
    offset_[r + 1] = offset_[r] + problem.nodes[r].cost.size();
  }
  for (const ReducedEdge& e : problem.edges) {
    const int64_t c = e.cost[Z(x_[Z(e.u)]) * problem.nodes[Z(e.v)].cost.size() + Z(x_[Z(e.v)])];
    if (c >= ir::kForbiddenCost) ++forbidden_; else finite_cost_ += c;
  }
  nb_cost_.assign(offset_.back(), 0);
  nb_forbidden_.assign(offset_.back(), 0);
  for (size_t r = 0; r < x_.size(); ++r) {
    const size_t n = problem.nodes[r].cost.size();
    for (const Incidence& in : problem.nodes[r].incident) {
      const int64_t* row = problem.Matrix(in) + Z(x_[Z(in.neighbor)]) * n;
      for (size_t s = 0; s < n; ++s) {
        if (row[s] >= ir::kForbiddenCost) ++nb_forbidden_[offset_[r] + s]; else nb_cost_[offset_[r] + s] += row[s];
      }
    }
  }
}

void SearchState::LocalCosts(int32_t r, std::vector<int64_t>& out) const {
  const ReducedNode& node = p_->nodes[Z(r)];
  const size_t n = node.cost.size(), o = offset_[Z(r)];
  out.resize(n);
  for (size_t s = 0; s < n; ++s)
    out[s] = nb_forbidden_[o + s] > 0 ? ir::kForbiddenCost : ir::AddCost(node.cost[s], nb_cost_[o + s]);
}

void SearchState::Set(int32_t r, int32_t s) {
  const int32_t old = x_[Z(r)];
  if (old == s) return;
  const ReducedNode& node = p_->nodes[Z(r)];
  auto account = [&](int64_t c, int sign) {
    if (c >= ir::kForbiddenCost) forbidden_ += sign; else finite_cost_ += sign * c;
  };
  account(node.cost[Z(old)], -1);
  account(node.cost[Z(s)], +1);
  for (const Incidence& in : node.incident) {
    const size_t j = Z(in.neighbor), nj = p_->nodes[j].cost.size(), o = offset_[j];
    const int64_t* m = p_->MatrixFromNeighbor(in);  // [s_r][s_j]
    const int64_t* before = m + Z(old) * nj;
    const int64_t* after = m + Z(s) * nj;
    account(before[Z(x_[j])], -1);
    account(after[Z(x_[j])], +1);
    for (size_t t = 0; t < nj; ++t) {
      if (before[t] >= ir::kForbiddenCost) --nb_forbidden_[o + t]; else nb_cost_[o + t] -= before[t];
      if (after[t] >= ir::kForbiddenCost) ++nb_forbidden_[o + t]; else nb_cost_[o + t] += after[t];
    }
  }
  x_[Z(r)] = s;
  for (const UsageTerm& t : node.terms) profile_.Add(t.first, t.last, t.usage[Z(s)] - t.usage[Z(old)]);
}

}  // namespace kiwi::solve::sharding
