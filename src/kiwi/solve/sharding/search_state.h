#pragma once
// A solution of a ReducedProblem under change: the strategies, the exact cost (forbidden entries
// counted apart so deltas stay exact), the usage per time segment (UsageProfile) and, per node and
// strategy, the summed cost of the edges to the current neighbours. Set() updates all of it in
// O(sum of the neighbours' strategy counts + terms * log T).
//
//   SearchState st(reduced, x0);
//   st.Set(r, s);                            // move node r to strategy s
//   if (!st.Feasible()) st.Set(r, old);      // undo
#include <cstdint>
#include <vector>

#include "kiwi/solve/sharding/reduction.h"
#include "kiwi/solve/sharding/usage_profile.h"

namespace kiwi::solve::sharding {

class SearchState {
 public:
  SearchState(const ReducedProblem& problem, std::vector<int32_t> x);

  const ReducedProblem& problem() const { return *p_; }
  const std::vector<int32_t>& x() const { return x_; }
  int32_t x(int32_t r) const { return x_[static_cast<size_t>(r)]; }
  // Exact total cost, ir::kForbiddenCost when any chosen entry is forbidden.
  int64_t Cost() const { return forbidden_ > 0 ? ir::kForbiddenCost : finite_cost_; }
  int64_t forbidden() const { return forbidden_; }
  int64_t Peak() const { return profile_.Max(); }
  bool Feasible() const { return forbidden_ == 0 && profile_.Max() <= p_->usage_limit; }
  const UsageProfile& profile() const { return profile_; }

  // Edges to the current neighbours of r if r took strategy s: finite part and forbidden count.
  const int64_t* NeighbourCost(int32_t r) const { return nb_cost_.data() + offset_[static_cast<size_t>(r)]; }
  const int32_t* NeighbourForbidden(int32_t r) const { return nb_forbidden_.data() + offset_[static_cast<size_t>(r)]; }
  // Node cost plus edges to the current neighbours per strategy of r (saturating at kForbiddenCost).
  void LocalCosts(int32_t r, std::vector<int64_t>& out) const;

  void Set(int32_t r, int32_t s);

 private:
  const ReducedProblem* p_;
  std::vector<int32_t> x_;
  int64_t finite_cost_ = 0;   // sum of the non-forbidden chosen entries (constant cost included)
  int64_t forbidden_ = 0;     // number of forbidden chosen entries
  UsageProfile profile_;
  std::vector<size_t> offset_;
  std::vector<int64_t> nb_cost_;
  std::vector<int32_t> nb_forbidden_;
};

}  // namespace kiwi::solve::sharding
