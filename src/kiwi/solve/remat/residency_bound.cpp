#include "kiwi/solve/remat/residency_bound.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "kiwi/solve/milp/model.h"
#include "kiwi/solve/milp/solve.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::remat {
namespace {

size_t Z(int32_t i) { return static_cast<size_t>(i); }

// A tensor (by position) between two positions that need it resident: if it is not resident after
// some frontier compute first..last, it is computed again before position last + 1.
struct Gap {
  int32_t tensor = 0;
  int32_t first = 0, last = 0;
};

// A tensor that can be freed and costs something to compute again (the others never enter a bound).
bool Recomputable(const StageGraph& g, int32_t i) { return !g.persistent[Z(i)] && g.cost[Z(i)] > 0.0; }

// The last position that reads i (its own when nothing does).
int32_t LastUse(const StageGraph& g, int32_t i) { return g.children[Z(i)].empty() ? i : g.children[Z(i)].back(); }

std::vector<Gap> Gaps(const StageGraph& g) {
  std::vector<Gap> gaps;
  for (int32_t i = 0; i < g.n; ++i) {
    if (!Recomputable(g, i)) continue;  // never freed, or free to recompute
    int32_t previous = i;
    for (int32_t c : g.children[Z(i)]) {
      if (c > previous + 1) gaps.push_back({i, previous + 1, c - 1});
      previous = c;
    }
  }
  return gaps;
}

// f(p, from) for each input p of a gap's tensor whose last use comes before the gap's last stage, with
// from the gap's first stage past that use: a recomputation of the tensor after a stage t >= from
// needs p held past its last use, or computed again. The link rows are written at those stages.
template <typename F>
void ForEachLinkedInput(const StageGraph& g, const Gap& gap, F&& f) {
  for (int32_t p : g.parents[Z(gap.tensor)])
    if (Recomputable(g, p) && LastUse(g, p) < gap.last) f(p, std::max(gap.first, LastUse(g, p) + 1));
}

// Link rows are one per (gap, input, stage); where they would pass max_rows, only every stride-th
// stage (and each gap's last) gets one, and w and y only there: fewer rows and fewer terms in the
// memory rows are still a relaxation, so still a bound.
int32_t LinkStride(const StageGraph& g, const std::vector<Gap>& gaps, int64_t max_rows) {
  int64_t rows = 0;
  for (const Gap& gap : gaps) ForEachLinkedInput(g, gap, [&](int32_t, int32_t from) { rows += gap.last - from + 1; });
  max_rows = std::max<int64_t>(1, max_rows);
  return static_cast<int32_t>(std::max<int64_t>(1, (rows + max_rows - 1) / max_rows));
}

struct ResidencyModel {
  milp::Model model;
  int32_t stride = 1;
};

// The model, rows at the binding stages only (the others hold whatever is chosen). Variables:
//   keep_g  gap g's tensor i is resident at every frontier compute of the gap (else: recomputed, C_i);
//   w_g,t   i is resident at frontier t of a gap it is not kept through, after its last recomputation
//           before its next use (so w_g is non-decreasing in t: i stays from that recomputation on);
//   y_p,t   input p of such an i is still resident at frontier t, past its last use (non-increasing in t
//           unless p itself is computed again: r_p, cost C_p once, as it happens after p's last use and
//           so is none of the recomputations that p's own gaps count).
// i's last recomputation in a gap it is not kept through happens after frontier t unless w_g,t = 1,
// and needs each input p resident then (or p computed again, r_p), so y_p,t >= 1 - keep_g - w_g,t - r_p.
// Each tensor is counted at most once per frontier: gaps of one tensor do not overlap, and y_p,t only
// lies past all of p's uses.
ResidencyModel BuildModel(const StageGraph& g, const std::vector<Gap>& gaps, const std::vector<bool>& binding,
                          const std::vector<double>& forced, double budget, int64_t max_link_rows) {
  ResidencyModel m;
  m.stride = LinkStride(g, gaps, max_link_rows);
  const double unit = ChooseMemoryUnit(g).bytes;  // the budget is not rounded down: still a relaxation
  auto size = [&](int32_t i) { return static_cast<double>(g.memory[Z(i)]) / unit; };
  milp::Model& model = m.model;
  milp::Expr objective;
  std::vector<milp::Expr> rows(Z(g.n));
  std::vector<std::optional<milp::Var>> recompute(Z(g.n));
  std::vector<std::map<int32_t, milp::Var>> held(Z(g.n));  // y_p,t
  for (const Gap& gap : gaps) {
    const int32_t i = gap.tensor;
    const milp::Var keep = model.AddBinary();
    objective.AddConstant(g.cost[Z(i)]), objective.Add(keep, -g.cost[Z(i)]);
    for (int32_t t = gap.first; t <= gap.last; ++t)
      if (binding[Z(t)]) rows[Z(t)].Add(keep, size(i));
    // w and y live at the binding stages of every stride-th stage and the gap's last; a row without
    // them elsewhere counts less than what is resident, so the model stays a relaxation.
    auto sampled = [&](int32_t t) { return t % m.stride == 0 || t == gap.last; };
    std::map<int32_t, milp::Var> after;  // w_g,t
    std::optional<milp::Var> previous;
    int32_t from_any = gap.last + 1;
    ForEachLinkedInput(g, gap, [&](int32_t, int32_t from) { from_any = std::min(from_any, from); });
    for (int32_t t = from_any; t <= gap.last; ++t) {
      if (!binding[Z(t)] || !sampled(t)) continue;
      const milp::Var w = model.AddBinary();
      model.AddLessEqual(milp::Expr().Add(w).Add(keep), 1.0);
      if (previous) model.AddLessEqual(milp::Expr().Add(*previous).Add(w, -1.0), 0.0);
      rows[Z(t)].Add(w, size(i));
      after.emplace(t, w);
      previous = w;
    }
    ForEachLinkedInput(g, gap, [&](int32_t p, int32_t from) {
      if (!recompute[Z(p)]) {
        recompute[Z(p)] = model.AddBinary();
        objective.Add(*recompute[Z(p)], g.cost[Z(p)]);
      }
      std::set<std::pair<int32_t, int32_t>> linked;
      int32_t held_at = -1;  // the last stage of y_p in (LastUse(p), t]: p resident at t implies resident there
      for (int32_t t = LastUse(g, p) + 1; t <= gap.last; ++t) {
        if (binding[Z(t)] && sampled(t)) held_at = t;
        if (t < from || held_at < 0 || !sampled(t)) continue;
        const auto w = after.lower_bound(t);  // i resident at frontier t implies resident at the next w stage
        if (w == after.end()) continue;       // i may be back before t with no w stage left: no row
        if (!linked.insert({held_at, w->first}).second) continue;
        auto [y, fresh] = held[Z(p)].try_emplace(held_at, milp::Var{});
        if (fresh) y->second = model.AddBinary();
        model.AddGreaterEqual(milp::Expr().Add(y->second).Add(keep).Add(w->second).Add(*recompute[Z(p)]), 1.0);
      }
    });
  }
  for (int32_t p = 0; p < g.n; ++p) {  // y_p,t non-increasing over its binding stages, and in the rows
    std::optional<milp::Var> previous;
    for (const auto& [t, y] : held[Z(p)]) {
      if (previous) model.AddLessEqual(milp::Expr().Add(y).Add(*previous, -1.0), 0.0);
      rows[Z(t)].Add(y, size(p));
      previous = y;
    }
  }
  for (int32_t t = 0; t < g.n; ++t)
    if (binding[Z(t)]) model.AddLessEqual(rows[Z(t)], (budget - forced[Z(t)]) / unit);
  model.SetObjective(objective, milp::Sense::kMinimize);
  return m;
}

}  // namespace

ResidencyBound SolveResidencyBound(const RematProblem& problem, const StageGraph& g, double seconds, int threads,
                                   int64_t max_link_rows) {
  const auto start = std::chrono::steady_clock::now();
  ResidencyBound result;
  result.bound = problem.baseline_cost;
  // forced[t]: bytes resident right after the frontier compute of stage t in every schedule.
  std::vector<double> forced;
  for (int64_t bytes : FrontierComputeBytes(problem)) forced.push_back(static_cast<double>(bytes));
  const auto budget = static_cast<double>(problem.budget);
  for (int32_t t = 0; t < g.n; ++t) {
    if (forced[Z(t)] > budget) {
      result.infeasible = true;
      result.note = fmt::format("stage {} needs {} bytes at its own compute", t, static_cast<int64_t>(forced[Z(t)]));
      return result;
    }
  }
  const std::vector<Gap> gaps = Gaps(g);
  result.gaps = static_cast<int32_t>(gaps.size());
  // Only the stages where forced bytes, every gap and every held input could exceed the budget bind.
  std::vector<double> most(forced);
  std::vector<int32_t> held_to(Z(g.n), -1);  // the last stage an input may be held to for a recomputation
  for (const Gap& gap : gaps) {
    for (int32_t t = gap.first; t <= gap.last; ++t) most[Z(t)] += static_cast<double>(g.memory[Z(gap.tensor)]);
    ForEachLinkedInput(g, gap, [&](int32_t p, int32_t) { held_to[Z(p)] = std::max(held_to[Z(p)], gap.last); });
  }
  for (int32_t p = 0; p < g.n; ++p)
    for (int32_t t = LastUse(g, p) + 1; t <= held_to[Z(p)]; ++t) most[Z(t)] += static_cast<double>(g.memory[Z(p)]);
  std::vector<bool> binding(Z(g.n));
  for (int32_t t = 0; t < g.n; ++t) binding[Z(t)] = most[Z(t)] > budget;
  if (std::none_of(binding.begin(), binding.end(), [](bool b) { return b; })) {  // every gap fits: keeping all costs nothing more
    result.proven_optimal = true;
    result.note = "residency bound: every tensor can stay resident";
    return result;
  }
  const ResidencyModel m = BuildModel(g, gaps, binding, forced, budget, max_link_rows);
  const milp::Model& model = m.model;
  milp::SolveOptions so;
  so.time_limit_seconds = std::max(0.0, seconds);
  so.threads = threads;
  Result<milp::SolveResult> r = milp::Solve(model, so);
  if (!r) {
    result.note = r.error().message;
    return result;
  }
  if (r->termination == milp::Termination::kInfeasible) {  // cannot be: keeping nothing fits (checked)
    result.note = "the reduced model reports infeasible";
    return result;
  }
  // CBC's bound, also when it calls the incumbent optimal (within its relative gap).
  double least = std::isfinite(r->best_bound) ? r->best_bound : -milp::kInf;
  if (!std::isfinite(least)) {  // out of time before the root: the LP relaxation is a bound too
    milp::SolveOptions lp = so;
    lp.relax_integrality = true;
    // What is left of `seconds`, a second at least: a bound is what is asked for (it used to be
    // `seconds` again, so a limit of 42 s spent 84).
    lp.time_limit_seconds = std::max(1.0, seconds - SecondsSince(start));
    Result<milp::SolveResult> relaxed = milp::Solve(model, lp);
    least = relaxed && relaxed->has_solution() ? relaxed->objective : 0.0;
  }
  result.proven_optimal = r->termination == milp::Termination::kOptimal;
  result.bound = problem.baseline_cost + std::max(0.0, least);
  result.note = fmt::format("residency bound: {} gaps, {} variables, {} rows{}{}", gaps.size(), model.num_vars(),
                            model.num_constraints(), m.stride > 1 ? fmt::format(", inputs linked every {} stages", m.stride) : "",
                            result.proven_optimal ? "" : " (time limit: CBC's bound)");
  return result;
}

}  // namespace kiwi::solve::remat
