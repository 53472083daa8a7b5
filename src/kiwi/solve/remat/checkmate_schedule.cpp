#include "kiwi/solve/remat/checkmate_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace kiwi::solve::remat {
namespace {

size_t Z(int32_t i) { return static_cast<size_t>(i); }

// Whether i is read by a computation of stage t after position k (children of i in (k, t]).
bool ReadLaterInStage(const StageGraph& g, const StageSolution& sol, int32_t t, int32_t i, int32_t k) {
  for (int32_t j : g.children[Z(i)]) {
    if (j > t) break;
    if (j > k && sol.Computed(t, j)) return true;
  }
  return false;
}

Status CheckStage(const StageGraph& g, const StageSolution& sol, int32_t t) {
  if (!sol.Computed(t, t)) return Internal(fmt::format("stage {}: R[{}][{}] must be 1", t, t, t));
  for (int32_t k = 0; k <= t; ++k) {
    if (sol.Computed(t, k) && sol.Stored(t, k))
      return Internal(fmt::format("stage {}: position {} is both stored and recomputed", t, k));
    if (sol.Computed(t, k))
      for (int32_t i : g.parents[Z(k)])
        if (!sol.Computed(t, i) && !sol.Stored(t, i))
          return Internal(fmt::format("stage {}: position {} computed without its input {}", t, k, i));
    if (sol.Stored(t + 1, k) && !sol.Stored(t, k) && !sol.Computed(t, k))
      return Internal(fmt::format("stage {}: position {} stored for stage {} but not resident", t, k, t + 1));
    if (g.persistent[Z(k)] && k < t && (sol.Computed(t, k) || !sol.Stored(t, k)))
      return Internal(fmt::format("stage {}: persistent position {} must stay stored, never recomputed", t, k));
  }
  return Status::Ok();
}

}  // namespace

MemoryUnit ChooseMemoryUnit(const StageGraph& g) {
  constexpr double kMaxCoefficient = 1e7;
  int64_t unit = 0;
  int64_t largest = 1;
  for (int64_t m : g.memory) unit = std::gcd(unit, m), largest = std::max(largest, m);
  if (unit <= 0) unit = 1;
  const bool integral = static_cast<double>(largest) / static_cast<double>(unit) <= kMaxCoefficient;
  return {integral ? static_cast<double>(unit) : static_cast<double>(largest) / kMaxCoefficient, integral};
}

StageGraph MakeStageGraph(const RematProblem& problem) {
  StageGraph g;
  g.n = problem.size();
  g.parents.resize(Z(g.n));
  g.children.resize(Z(g.n));
  for (int32_t p = 0; p < g.n; ++p) {
    const ir::NodeId v = problem.order[Z(p)];
    for (ir::NodeId in : problem.graph->node(v).inputs) g.parents[Z(p)].push_back(problem.position[Z(in)]);
    std::vector<int32_t>& ps = g.parents[Z(p)];
    std::sort(ps.begin(), ps.end());
    ps.erase(std::unique(ps.begin(), ps.end()), ps.end());
    for (int32_t i : ps) g.children[Z(i)].push_back(p);  // p ascending: children stay sorted
    g.memory.push_back(problem.memory[Z(v)]);
    g.cost.push_back(problem.cost[Z(v)]);
    g.persistent.push_back(problem.persistent[Z(v)]);
  }
  g.reach.assign(Z(g.n), -1);
  for (int32_t i = g.n - 1; i >= 0; --i)
    for (int32_t j : g.children[Z(i)]) g.reach[Z(i)] = std::max({g.reach[Z(i)], j, g.reach[Z(j)]});
  return g;
}

StageSolution EmptyStages(int32_t n) {
  StageSolution sol;
  sol.R.resize(Z(n));
  sol.S.resize(Z(n));
  for (int32_t t = 0; t < n; ++t) {
    sol.R[Z(t)].assign(Z(t) + 1, 0);
    sol.S[Z(t)].assign(Z(t), 0);
  }
  return sol;
}

Status CheckStageSolution(const StageGraph& g, const StageSolution& sol) {
  if (sol.R.size() != Z(g.n) || sol.S.size() != Z(g.n)) return Internal("stage solution: wrong number of stages");
  for (int32_t t = 0; t < g.n; ++t) {
    if (sol.R[Z(t)].size() != Z(t) + 1 || sol.S[Z(t)].size() != Z(t))
      return Internal(fmt::format("stage {}: R or S has the wrong length", t));
    KIWI_RETURN_IF_ERROR(CheckStage(g, sol, t));
  }
  return Status::Ok();
}

double StageCost(const StageGraph& g, const StageSolution& sol) {
  double total = 0.0;
  for (int32_t t = 0; t < g.n; ++t)
    for (int32_t i = 0; i <= t; ++i)
      if (sol.Computed(t, i)) total += g.cost[Z(i)];
  return total;
}

std::vector<StageEvent> ReplayStage(const StageGraph& g, const StageSolution& sol, int32_t t) {
  std::vector<StageEvent> events;
  std::vector<uint8_t> resident(Z(t) + 1, 0);
  int64_t bytes = 0;
  for (int32_t i = 0; i < t; ++i)
    if (sol.Stored(t, i)) resident[Z(i)] = 1, bytes += g.memory[Z(i)];
  auto free = [&](int32_t i) {
    resident[Z(i)] = 0;
    bytes -= g.memory[Z(i)];
    events.push_back({false, i, bytes});
  };
  for (int32_t k = 0; k <= t; ++k) {
    if (!sol.Computed(t, k)) continue;
    resident[Z(k)] = 1;
    bytes += g.memory[Z(k)];
    events.push_back({true, k, bytes});
    if (k == t) break;
    // Checkmate's FREE[t][i][k]: i in parents(k) + {k}, not read later in the stage, not kept.
    for (int32_t i : g.parents[Z(k)])
      if (resident[Z(i)] && !g.persistent[Z(i)] && !sol.Stored(t + 1, i) && !ReadLaterInStage(g, sol, t, i, k)) free(i);
    if (!g.persistent[Z(k)] && !sol.Stored(t + 1, k) && !ReadLaterInStage(g, sol, t, k, k)) free(k);
  }
  for (int32_t i = 0; i <= t; ++i)  // end of stage: drop what the next stage does not keep
    if (resident[Z(i)] && !g.persistent[Z(i)] && !sol.Stored(t + 1, i)) free(i);
  return events;
}

int64_t StagePeakMemory(const StageGraph& g, const StageSolution& sol) {
  int64_t peak = 0;
  for (int32_t t = 0; t < g.n; ++t)
    for (const StageEvent& e : ReplayStage(g, sol, t))
      if (e.compute) peak = std::max(peak, e.resident_after);
  return peak;
}

std::vector<plan::Step> StageSchedule(const RematProblem& problem, const StageGraph& g, const StageSolution& sol) {
  std::vector<plan::Step> steps;
  for (int32_t t = 0; t < g.n; ++t)
    for (const StageEvent& e : ReplayStage(g, sol, t))
      steps.push_back({e.compute ? plan::StepKind::kCompute : plan::StepKind::kFree, problem.order[Z(e.position)]});
  return steps;
}

StageSolution CheckpointAllStages(const StageGraph& g) {
  StageSolution sol = EmptyStages(g.n);
  for (int32_t t = 0; t < g.n; ++t) {
    sol.R[Z(t)][Z(t)] = 1;
    for (int32_t i = 0; i < t; ++i) {
      const bool used_later = !g.children[Z(i)].empty() && g.children[Z(i)].back() >= t;
      sol.S[Z(t)][Z(i)] = g.persistent[Z(i)] || used_later ? 1 : 0;
    }
  }
  return sol;
}

int32_t FirstOverBudgetStage(const StageGraph& g, int64_t budget) {
  const StageSolution all = CheckpointAllStages(g);
  for (int32_t t = 0; t < g.n; ++t)
    for (const StageEvent& e : ReplayStage(g, all, t))
      if (e.compute && e.resident_after > budget) return t;
  return g.n;
}

std::optional<StageSolution> StoredSetsOfSchedule(const RematProblem& problem, const std::vector<plan::Step>& steps) {
  const int32_t n = problem.size();
  StageSolution sol = EmptyStages(n);
  std::vector<uint8_t> resident(Z(n), 0);
  int32_t stage = 0;          // the stage the next compute belongs to
  bool stage_started = true;  // stage 0 starts empty
  for (const plan::Step& s : steps) {
    if (s.node < 0 || Z(s.node) >= problem.position.size()) return std::nullopt;
    const int32_t p = problem.position[Z(s.node)];
    if (s.kind == plan::StepKind::kFree) {
      resident[Z(p)] = 0;
      continue;
    }
    if (p > stage || stage >= n) return std::nullopt;  // a first computation out of order, or after the last
    if (!stage_started)  // S[stage]: what is resident when its first compute comes
      for (int32_t i = 0; i < stage; ++i) sol.S[Z(stage)][Z(i)] = resident[Z(i)];
    stage_started = true;
    sol.R[Z(stage)][Z(p)] = 1;
    resident[Z(p)] = 1;
    if (p == stage) ++stage, stage_started = false;  // order[stage] computed for the first time
  }
  if (stage != n) return std::nullopt;
  return sol;
}

}  // namespace kiwi::solve::remat
