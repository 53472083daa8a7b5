#include "kiwi/solve/remat/optimal_r.h"

#include <utility>

namespace kiwi::solve::remat {
namespace {

size_t Z(int32_t i) { return static_cast<size_t>(i); }

// The cheapest R[t] given S[t] and S[t+1]: the dependency closure of {t} + (S[t+1] \ S[t]) through
// tensors S[t] does not hold. Positions descend, so every reader is settled before its inputs.
void ComputeStage(const StageGraph& g, StageSolution& sol, int32_t t) {
  std::vector<uint8_t>& r = sol.R[Z(t)];
  r.assign(Z(t) + 1, 0);
  r[Z(t)] = 1;
  for (int32_t i = 0; i < t; ++i)
    if (sol.Stored(t + 1, i) && !sol.Stored(t, i)) r[Z(i)] = 1;
  for (int32_t k = t; k >= 0; --k) {
    if (!r[Z(k)]) continue;
    for (int32_t i : g.parents[Z(k)])
      if (!sol.Stored(t, i)) r[Z(i)] = 1;
  }
}

// Drops S[t][i] when stage t neither reads i nor keeps it for stage t + 1: R[t] is unchanged (nothing
// computed needed i) and the stage holds less.
void DropUnusedStored(const StageGraph& g, StageSolution& sol, int32_t t) {
  std::vector<uint8_t>& s = sol.S[Z(t)];
  for (int32_t i = 0; i < t; ++i) {
    if (!s[Z(i)] || g.persistent[Z(i)] || sol.Stored(t + 1, i)) continue;
    bool read = false;
    for (int32_t j : g.children[Z(i)]) {
      if (j > t) break;
      read = read || sol.Computed(t, j);
    }
    if (!read) s[Z(i)] = 0;
  }
}

}  // namespace

StageSolution OptimalR(const StageGraph& g, std::vector<std::vector<uint8_t>> S) {
  StageSolution sol;
  sol.S = std::move(S);
  sol.S.resize(Z(g.n));
  sol.R.resize(Z(g.n));
  for (int32_t t = 0; t < g.n; ++t) {
    sol.S[Z(t)].resize(Z(t), 0);
    for (int32_t i = 0; i < t; ++i)
      if (g.persistent[Z(i)]) sol.S[Z(t)][Z(i)] = 1;
  }
  // Backwards: stage t's R needs the final S[t+1], and dropping unused S[t] entries changes S[t]'s
  // role as stage t-1's "keep" set only, which stage t-1 reads next.
  for (int32_t t = g.n - 1; t >= 0; --t) {
    ComputeStage(g, sol, t);
    DropUnusedStored(g, sol, t);
  }
  return sol;
}

}  // namespace kiwi::solve::remat
