#include "kiwi/solve/remat/checkmate_ilp.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "kiwi/solve/milp/load_estimate.h"
#include "kiwi/solve/milp/solve.h"
#include "kiwi/solve/remat/lp_rounding.h"
#include "kiwi/solve/remat/optimal_r.h"
#include "kiwi/util/available_memory.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::remat {
namespace {

using Index = CheckmateIndex;
size_t Z(int32_t i) { return static_cast<size_t>(i); }

// Adds coeff * (slot) to e: a variable, a constant 1, or nothing.
void AddSlot(milp::Expr& e, int32_t slot, double coeff) {
  if (slot >= 0) e.Add(milp::Var{slot}, coeff);
  else if (slot == Index::kOne) e.AddConstant(coeff);
}

double SlotValue(int32_t slot, const std::vector<double>& values) {
  if (slot >= 0) return values[Z(slot)];
  return slot == Index::kOne ? 1.0 : 0.0;
}

// Rows with no variable are constants: true ones are dropped, false ones kept so the model is infeasible.
void AddRow(milp::Model& m, const milp::Expr& e, double lower, double upper) {
  if (e.terms().empty() && e.constant() >= lower && e.constant() <= upper) return;
  m.AddConstraint(e, lower, upper);
}

double BudgetUnits(const Index& index, int64_t budget) {
  const double units = static_cast<double>(budget) / index.memory_unit;
  // Integral sizes: an integral row bound is exact. Otherwise leave room for rounding errors.
  return index.integral_units ? std::floor(units) : units * (1.0 - 1e-9);
}

// Whether R[t][i] and S[t][i] (i < t) are binaries in a variable stage t: i is live there and not
// persistent (then R is 0 and S is 1). R[t][t] is 1, and so is neither.
bool StageBinary(const StageGraph& g, int32_t t, int32_t i) {
  return i < t && !g.persistent[Z(i)] && g.Live(t, i);
}

// Stages before `first` are checkpoint-all's, constants; from `first` on, Checkmate's variables.
void CreateStageVariables(const StageGraph& g, milp::Model& m, Index& index, int32_t first) {
  index.r.resize(Z(g.n));
  index.s.resize(Z(g.n));
  const StageSolution all = CheckpointAllStages(g);
  for (int32_t t = 0; t < first; ++t) {
    for (int32_t i = 0; i <= t; ++i) index.r[Z(t)].push_back(i == t ? Index::kOne : Index::kZero);
    for (int32_t i = 0; i < t; ++i) index.s[Z(t)].push_back(all.Stored(t, i) ? Index::kOne : Index::kZero);
  }
  for (int32_t t = first; t < g.n; ++t) {
    for (int32_t i = 0; i <= t; ++i)
      index.r[Z(t)].push_back(i == t ? Index::kOne : StageBinary(g, t, i) ? m.AddBinary().index : Index::kZero);
    for (int32_t i = 0; i < t; ++i) {
      const int32_t slot = StageBinary(g, t, i) ? m.AddBinary().index : g.persistent[Z(i)] ? Index::kOne : Index::kZero;
      index.s[Z(t)].push_back(slot);
    }
  }
}

}  // namespace

// CreateStageVariables' binaries, counted without creating them: an R and an S per StageBinary.
int64_t CountStageBinaries(const StageGraph& g, int32_t first) {
  int64_t count = 0;
  for (int32_t t = std::clamp(first, 0, std::max(0, g.n - 1)); t < g.n; ++t)  // BuildCheckmateModel's clamp
    for (int32_t i = 0; i < t; ++i) count += StageBinary(g, t, i) ? 2 : 0;
  return count;
}

std::optional<std::string> WhyNotBuildCheckmate(const StageGraph& g, int32_t first_stage, double seconds_left) {
  // Nonzeros per R/S binary of the built models: GPT 13.5 (2-24 layers), the remat benchmarks 14-29.
  constexpr int64_t kFewestNonzerosPerBinary = 13;
  const int64_t binaries = CountStageBinaries(g, first_stage);
  std::optional<std::string> why =
      milp::WhyNotLoad(binaries * kFewestNonzerosPerBinary, seconds_left, AvailableMemoryBytes());
  if (!why) return why;
  return fmt::format("its {} R/S binaries (at least {} nonzeros) {}", binaries, binaries * kFewestNonzerosPerBinary, *why);
}

namespace {

// Where i may be freed in stage t: i itself or a reader of i, computed before t. Empty when t reads i
// or i is never freed. With `no_waste`, i itself is no free point (a computed i is read later or kept).
std::vector<int32_t> FreePoints(const StageGraph& g, const Index& x, int32_t t, int32_t i, bool no_waste) {
  std::vector<int32_t> points;
  if (g.persistent[Z(i)] || x.S(t + 1, i) == Index::kOne) return points;
  if (std::binary_search(g.children[Z(i)].begin(), g.children[Z(i)].end(), t)) return points;
  if (!no_waste && x.R(t, i) != Index::kZero) points.push_back(i);
  for (int32_t j : g.children[Z(i)])
    if (j < t && x.R(t, j) != Index::kZero) points.push_back(j);
  return points;
}

// lhs <= R[t][i] + S[t][i]: `lhs` needs i resident in stage t.
void AddNeedsResident(milp::Model& m, const Index& x, milp::Expr lhs, int32_t t, int32_t i) {
  AddSlot(lhs, x.R(t, i), -1.0), AddSlot(lhs, x.S(t, i), -1.0);
  AddRow(m, lhs, -milp::kInf, 0.0);
}

// A tensor i that stage t cannot free: Checkmate eq. (1b) R[t][k] <= R[t][i] + S[t][i] for its readers
// k <= t and eq. (1c) S[t+1][i] <= S[t][i] + R[t][i].
void AddKeptTensorRows(const StageGraph& g, milp::Model& m, const Index& x, int32_t t, int32_t i) {
  for (int32_t k : g.children[Z(i)]) {
    if (k > t) break;
    if (x.R(t, k) == Index::kZero) continue;
    milp::Expr e;
    AddSlot(e, x.R(t, k), 1.0);
    AddNeedsResident(m, x, e, t, i);
  }
  if (t + 1 < g.n && x.S(t + 1, i) >= 0) {
    milp::Expr e;
    AddSlot(e, x.S(t + 1, i), 1.0);
    AddNeedsResident(m, x, e, t, i);
  }
}

// A tensor i that stage t may free after point k (i or a reader): FREE[t][i][k] = R[t][k] (1 - S[t+1][i])
// prod_{readers j > k} (1 - R[t][j]) (Checkmate eq. 4), linearized with rows bounded by i's residency
// (tighter than the paper's big-M on the hazard sum, and they imply eqs. 1b-1c for i):
//   FREE[t][i][k] <= R[t][k];  sum_{k < j} FREE[t][i][k] + R[t][j] <= R[t][i] + S[t][i] per reader j;
//   sum_k FREE[t][i][k] + S[t+1][i] <= R[t][i] + S[t][i];
// `exact_free` adds FREE >= R[t][k] - S[t+1][i] - sum_{readers j > k} R[t][j] (U exact, not a bound).
void AddFreedTensorRows(milp::Model& m, Index& x, int32_t t, int32_t i, const std::vector<int32_t>& points,
                        bool exact_free) {
  std::vector<int32_t> vars;
  milp::Expr freed;  // sum of FREE[t][i][k] for the points so far
  for (int32_t k : points) {
    if (k != i) {
      milp::Expr reader = freed;
      AddSlot(reader, x.R(t, k), 1.0);
      AddNeedsResident(m, x, reader, t, i);
    }
    vars.push_back(m.AddBinary().index);
    x.frees.push_back({t, i, k, vars.back()});
    freed.Add(milp::Var{vars.back()}, 1.0);
    milp::Expr upper;
    upper.Add(milp::Var{vars.back()}, 1.0), AddSlot(upper, x.R(t, k), -1.0);
    AddRow(m, upper, -milp::kInf, 0.0);
  }
  AddSlot(freed, x.S(t + 1, i), 1.0);
  AddNeedsResident(m, x, freed, t, i);
  if (!exact_free) return;
  for (size_t a = 0; a < points.size(); ++a) {
    milp::Expr lower;
    lower.Add(milp::Var{vars[a]}, 1.0), AddSlot(lower, x.R(t, points[a]), -1.0), AddSlot(lower, x.S(t + 1, i), 1.0);
    for (size_t b = a + 1; b < points.size(); ++b) AddSlot(lower, x.R(t, points[b]), 1.0);
    AddRow(m, lower, 0.0, milp::kInf);
  }
}

// Checkmate eq. (2): U[t][k0] = sum_i M_i S[t][i] + M_k0 R[t][k0]; U[t][k] = U[t][k'] - sum M_i FREE[t][i][k']
// + M_k R[t][k] for consecutive computable k' < k; U <= budget. `frees` holds stage t's, sorted by k.
void AddMemoryRows(const StageGraph& g, milp::Model& m, Index& x, int32_t t, std::span<const Index::Free> frees) {
  x.u[Z(t)].assign(Z(t) + 1, -1);
  auto mem = [&](int32_t i) { return static_cast<double>(g.memory[Z(i)]) / x.memory_unit; };
  int32_t prev = -1;
  size_t f = 0;
  for (int32_t k = 0; k <= t; ++k) {
    if (x.R(t, k) == Index::kZero) continue;
    const int32_t u = m.AddContinuous(0.0, x.budget_units).index;
    x.u[Z(t)][Z(k)] = u;
    milp::Expr e;
    e.Add(milp::Var{u}, 1.0);
    AddSlot(e, x.R(t, k), -mem(k));
    if (prev < 0) {
      for (int32_t i = 0; i < t; ++i) AddSlot(e, x.S(t, i), -mem(i));
    } else {
      e.Add(milp::Var{x.u[Z(t)][Z(prev)]}, -1.0);
      for (; f < frees.size() && frees[f].k < k; ++f) e.Add(milp::Var{frees[f].var}, mem(frees[f].i));
    }
    x.u_rows.push_back(m.num_constraints());
    m.AddConstraint(e, 0.0, 0.0);
    prev = k;
  }
}

// Per tensor i < t: the simulator's no-double-compute rule R[t][i] + S[t][i] <= 1 and, with `no_waste`,
// the dominance R[t][i] <= S[t+1][i] + sum_{readers j in (i, t]} R[t][j] (computing i only pays if the
// stage reads it later or keeps it; dropping waste never costs or holds more, and makes FREE[t][i][i] 0).
void AddComputeRows(const StageGraph& g, milp::Model& m, const Index& x, int32_t t, int32_t i, bool no_waste) {
  if (x.R(t, i) < 0) return;
  if (x.S(t, i) >= 0) {
    milp::Expr e;
    AddSlot(e, x.R(t, i), 1.0), AddSlot(e, x.S(t, i), 1.0);
    AddRow(m, e, -milp::kInf, 1.0);
  }
  if (!no_waste || std::binary_search(g.children[Z(i)].begin(), g.children[Z(i)].end(), t)) return;
  milp::Expr e;
  AddSlot(e, x.R(t, i), 1.0), AddSlot(e, x.S(t + 1, i), -1.0);
  for (int32_t j : g.children[Z(i)])
    if (j < t) AddSlot(e, x.R(t, j), -1.0);
  AddRow(m, e, -milp::kInf, 0.0);
}

void AddStageRows(const StageGraph& g, milp::Model& m, Index& x, int32_t t, const CheckmateModelOptions& options) {
  const size_t first = x.frees.size();
  for (int32_t i = 0; i < t; ++i) {
    AddComputeRows(g, m, x, t, i, options.no_waste);
    const std::vector<int32_t> points = FreePoints(g, x, t, i, options.no_waste);
    if (points.empty()) AddKeptTensorRows(g, m, x, t, i);
    else AddFreedTensorRows(m, x, t, i, points, options.exact_free);
  }
  std::stable_sort(x.frees.begin() + static_cast<std::ptrdiff_t>(first), x.frees.end(),
                   [](const Index::Free& a, const Index::Free& b) { return a.k < b.k; });
  AddMemoryRows(g, m, x, t, std::span<const Index::Free>(x.frees).subspan(first));
}

}  // namespace

CheckmateModel BuildCheckmateModel(const RematProblem& problem, const StageGraph& g,
                                   const CheckmateModelOptions& options) {
  CheckmateModel cm;
  Index& x = cm.index;
  const MemoryUnit unit = ChooseMemoryUnit(g);
  x.memory_unit = unit.bytes;
  x.integral_units = unit.integral;
  x.budget_units = BudgetUnits(x, problem.budget);
  x.first_stage = std::clamp(options.first_stage, 0, std::max(0, g.n - 1));
  CreateStageVariables(g, cm.model, x, x.first_stage);
  x.u.resize(Z(g.n));
  for (int32_t t = x.first_stage; t < g.n; ++t) AddStageRows(g, cm.model, x, t, options);
  milp::Expr objective;  // Checkmate eq. (1a): sum_t sum_i C_i R[t][i]
  for (int32_t t = 0; t < g.n; ++t)
    for (int32_t i = 0; i <= t; ++i)
      if (g.cost[Z(i)] != 0.0) AddSlot(objective, x.R(t, i), g.cost[Z(i)]);
  cm.model.SetObjective(objective, milp::Sense::kMinimize);
  return cm;
}

void SetMemoryBudget(CheckmateModel& cm, int64_t budget) {
  cm.index.budget_units = BudgetUnits(cm.index, budget);
  for (const std::vector<int32_t>& stage : cm.index.u)
    for (int32_t u : stage)
      if (u >= 0) cm.model.SetBounds(milp::Var{u}, 0.0, cm.index.budget_units);
}

StageSolution ReadStageSolution(const CheckmateModel& cm, const std::vector<double>& values) {
  const std::vector<std::vector<double>> stored = ReadStoredValues(cm, values);
  const Index& x = cm.index;
  const auto n = static_cast<int32_t>(x.r.size());
  StageSolution sol = EmptyStages(n);
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t i = 0; i <= t; ++i) sol.R[Z(t)][Z(i)] = SlotValue(x.R(t, i), values) > 0.5 ? 1 : 0;
    for (int32_t i = 0; i < t; ++i) sol.S[Z(t)][Z(i)] = stored[Z(t)][Z(i)] > 0.5 ? 1 : 0;
  }
  return sol;
}

std::vector<std::vector<double>> ReadStoredValues(const CheckmateModel& cm, const std::vector<double>& values) {
  const Index& x = cm.index;
  std::vector<std::vector<double>> s(x.s.size());
  for (size_t t = 0; t < x.s.size(); ++t)
    for (int32_t slot : x.s[t]) s[t].push_back(SlotValue(slot, values));
  // Before the first variable stage: checkpoint-all, keeping what that stage starts with.
  const int32_t first = x.first_stage;
  for (int32_t t = 0; t < first; ++t)
    for (int32_t i = 0; i < t; ++i) s[Z(t)][Z(i)] = std::max(s[Z(t)][Z(i)], s[Z(first)][Z(i)]);
  return s;
}

std::vector<double> StageSolutionValues(const CheckmateModel& cm, const StageGraph& g, const StageSolution& sol) {
  const Index& x = cm.index;
  std::vector<double> v(Z(cm.model.num_vars()), 0.0);
  for (int32_t t = 0; t < g.n; ++t) {
    for (int32_t i = 0; i <= t; ++i)
      if (x.R(t, i) >= 0) v[Z(x.R(t, i))] = sol.Computed(t, i) ? 1.0 : 0.0;
    for (int32_t i = 0; i < t; ++i)
      if (x.S(t, i) >= 0) v[Z(x.S(t, i))] = sol.Stored(t, i) ? 1.0 : 0.0;
  }
  for (const Index::Free& f : x.frees) {
    bool read_later = false;
    for (int32_t j : g.children[Z(f.i)]) read_later = read_later || (j > f.k && j <= f.t && sol.Computed(f.t, j));
    v[Z(f.var)] = sol.Computed(f.t, f.k) && !sol.Stored(f.t + 1, f.i) && !read_later ? 1.0 : 0.0;
  }
  // U follows its defining rows (U first, then terms already set), evaluated in the order they chain.
  for (int32_t r : x.u_rows) {
    const milp::Constraint& row = cm.model.constraints()[Z(r)];
    const int32_t u = row.terms.front().first;
    double rest = 0.0;
    for (size_t j = 1; j < row.terms.size(); ++j) rest += row.terms[j].second * v[Z(row.terms[j].first)];
    v[Z(u)] = row.lower - rest;
  }
  return v;
}

double MaxResidentBytes(const CheckmateModel& cm, const std::vector<double>& values) {
  double peak = 0.0;
  for (const std::vector<int32_t>& stage : cm.index.u)
    for (int32_t u : stage)
      if (u >= 0) peak = std::max(peak, values[Z(u)]);
  return peak * cm.index.memory_unit;
}

namespace {

using Clock = std::chrono::steady_clock;


void Say(const RematOptions& options, const std::string& line) {
  if (options.progress) options.progress(line);
}

constexpr const char* kRoundingSource = "LP rounding";

// The MIP start: the given schedule in stage form (its stored sets, OptimalR's recomputations), else
// (or when it does not fit) checkpoint-all when it fits, else the best LP rounding (Checkmate §5), given
// half of the time (CBC solves the same root LP again: a rounding that cannot finish in half cannot
// help). `rounding` keeps the LP's bound and infeasibility proof.
std::optional<StageSolution> WarmStartStages(const RematProblem& problem, const StageGraph& g,
                                             const std::vector<plan::Step>* warm_start, const RematOptions& options,
                                             LpRounding& rounding, std::string& source) {
  if (warm_start != nullptr) {
    source = "the given schedule";
    if (std::optional<StageSolution> read = StoredSetsOfSchedule(problem, *warm_start)) {
      StageSolution sol = OptimalR(g, std::move(read->S));  // never costs more than the schedule's own R
      if (StagePeakMemory(g, sol) <= problem.budget) return sol;
    }
    Say(options, "ilp: the given warm start is not a stage schedule within the budget");
  }
  if (problem.checkpoint_all_peak <= problem.budget) {
    source = "checkpoint-all";
    return CheckpointAllStages(g);
  }
  source = kRoundingSource;
  RematOptions half = options;
  half.time_limit_seconds = options.time_limit_seconds / 2.0;
  rounding = RoundLpRelaxation(problem, g, half);
  return std::move(rounding.best);  // OptimalR's, within the budget
}

// A solver's (R, S) made a stage solution the simulator accepts: an R that does not pass the stage
// checks or peaks over budget (CBC's tolerances) is rebuilt from S by OptimalR, which never costs or
// holds more. Returns whether it fits the budget: a model that starts after stage 0 may keep too
// much before its first variable stage (CheckmateModelOptions::first_stage).
bool RepairStages(const RematProblem& problem, const StageGraph& g, StageSolution& sol, bool& rebuilt) {
  if (CheckStageSolution(g, sol).ok() && StagePeakMemory(g, sol) <= problem.budget) return true;
  sol = OptimalR(g, std::move(sol.S));
  rebuilt = true;
  return StagePeakMemory(g, sol) <= problem.budget;
}

milp::SolveOptions IlpSolveOptions(const RematOptions& options, double seconds_left) {
  milp::SolveOptions so;
  so.time_limit_seconds = std::max(0.0, seconds_left);
  so.relative_gap = options.relative_gap;
  so.threads = options.threads;
  so.cbc.lean_search_when_root_is_slow = true;
  so.cbc.integer_preprocessing = false;  // see milp::CbcParameters: slower on every Checkmate model measured
  so.on_incumbent = [&options](const milp::Incumbent& inc) {
    Say(options, fmt::format("ilp: incumbent {:.6g}, bound {:.6g} at {:.2f} s", inc.objective, inc.best_bound, inc.seconds));
  };
  return so;
}

std::string Termination(const milp::SolveResult& r, double bound) {
  switch (r.termination) {
    case milp::Termination::kOptimal: return "optimal among frontier-advancing stage schedules";
    case milp::Termination::kFeasible:
      return fmt::format("time limit, gap {:.3g}%", 100.0 * (r.objective - bound) / std::max(r.objective, 1e-9));
    case milp::Termination::kInfeasible: return "proven infeasible: no frontier-advancing schedule fits the budget";
    case milp::Termination::kNoSolution: return "time limit without a feasible solution";
    case milp::Termination::kUnbounded: return "unbounded";
  }
  return "unknown";
}

// CBC with the MIP start; a claim of infeasibility that the (feasible) start contradicts is overruled.
Result<milp::SolveResult> RunCbc(const CheckmateModel& cm, const milp::SolveOptions& so, const RematOptions& options) {
  Result<milp::SolveResult> r = milp::Solve(cm.model, so);
  if (!r) return r;
  if (r->termination == milp::Termination::kUnbounded) return Internal("ilp: CBC reports the model unbounded");
  if (r->termination == milp::Termination::kInfeasible && so.warm_start) {
    Say(options, "ilp: CBC reports the model infeasible, but the warm start satisfies it: keeping the warm start");
    r->termination = milp::Termination::kFeasible;
    r->values = *so.warm_start;
    r->objective = cm.model.Evaluate(r->values);
    r->best_bound = -milp::kInf;
  }
  return r;
}

// All proven: `known` (the LP's, every node once, an earlier model's), CBC's bound (weak or -inf when
// time ran out in its root).
double ProvenBound(const milp::SolveResult& r, double known) {
  double bound = known;
  if (r.has_solution() && std::isfinite(r.best_bound)) bound = std::max(bound, r.best_bound);
  return r.has_solution() ? std::min(bound, r.objective) : bound;
}

}  // namespace

Result<RematResult> SolveCheckmateIlp(const RematProblem& problem, const cost::CostModel& cost_model,
                                      const RematOptions& options, const std::vector<plan::Step>* warm_start) {
  const Clock::time_point start = Clock::now();
  RematResult partial;
  partial.solver = "ilp";
  const int64_t floor = MemoryLowerBound(problem);
  if (floor > problem.budget) {
    partial.note = fmt::format("budget {} is below the memory lower bound {}", problem.budget, floor);
    partial.solve_seconds = SecondsSince(start);
    return partial;
  }
  const StageGraph g = MakeStageGraph(problem);
  const int32_t first_stage = FirstOverBudgetStage(g, problem.budget);
  if (std::optional<std::string> why =
          WhyNotBuildCheckmate(g, first_stage, options.time_limit_seconds - SecondsSince(start))) {
    partial.note = "MILP not built: " + *why;
    partial.lower_bound = problem.baseline_cost;
    Say(options, "ilp: " + partial.note);
    partial.solve_seconds = SecondsSince(start);
    return partial;
  }
  CheckmateModel cm = BuildCheckmateModel(problem, g, {.first_stage = first_stage});
  Say(options, fmt::format("ilp: {} variables, {} rows (stages {} to {}), built in {:.2f} s", cm.model.num_vars(),
                           cm.model.num_constraints(), cm.index.first_stage, g.n - 1, SecondsSince(start)));
  std::string source;
  LpRounding rounding;
  std::optional<StageSolution> warm = WarmStartStages(problem, g, warm_start, options, rounding, source);
  const bool lp_too_slow = source == kRoundingSource && !rounding.lp_bound && !rounding.lp_infeasible;
  if (rounding.lp_infeasible || lp_too_slow) {  // infeasible, or CBC's root LP would not finish either
    partial.note = lp_too_slow && rounding.note.empty() ? "time limit: the LP relaxation needs more than half of it"
                                                        : rounding.note;
    if (lp_too_slow) partial.lower_bound = problem.baseline_cost;
    Say(options, "ilp: " + partial.note);
    partial.solve_seconds = SecondsSince(start);
    return partial;
  }
  auto solve = [&](const CheckmateModel& model) {
    milp::SolveOptions so = IlpSolveOptions(options, options.time_limit_seconds - SecondsSince(start));
    if (warm) so.warm_start = StageSolutionValues(model, g, *warm);
    return RunCbc(model, so, options);
  };
  if (warm) Say(options, fmt::format("ilp: warm start from {}: cost {:.6g}", source, StageCost(g, *warm)));
  Result<milp::SolveResult> r = solve(cm);
  if (!r) return r.error();
  double bound = ProvenBound(*r, std::max(problem.baseline_cost, rounding.lp_bound.value_or(problem.baseline_cost)));
  StageSolution sol;
  bool rebuilt = false;
  if (r->has_solution()) {
    sol = ReadStageSolution(cm, r->values);
    if (!RepairStages(problem, g, sol, rebuilt) && first_stage > 0) {
      // Rare: the relaxation's answer starts stage `first_stage` with a tensor that checkpoint-all had
      // freed, and keeping it does not fit. Its bound holds; the whole model gives the schedule.
      Say(options, fmt::format("ilp: its schedule keeps too much before stage {}; solving the whole model", first_stage));
      cm = BuildCheckmateModel(problem, g);
      const double relaxed = bound;
      r = solve(cm);
      if (!r) return r.error();
      bound = ProvenBound(*r, relaxed);
      rebuilt = false;
      if (r->has_solution()) {
        sol = ReadStageSolution(cm, r->values);
        RepairStages(problem, g, sol, rebuilt);
      }
    }
  }
  partial.note = r->not_loaded.empty() ? Termination(*r, bound)
                 : r->has_solution()   ? fmt::format("MILP {}; kept the warm start", r->not_loaded)
                                       : "MILP " + r->not_loaded;
  Say(options, fmt::format("ilp: {} in {:.2f} s", partial.note, SecondsSince(start)));
  if (r->termination != milp::Termination::kInfeasible) partial.lower_bound = bound;
  if (!r->has_solution()) {
    partial.solve_seconds = SecondsSince(start);
    return partial;
  }
  if (rebuilt) partial.note += " (R rebuilt from S)";
  partial.optimal = r->termination == milp::Termination::kOptimal;
  Result<RematResult> result = FinishResult(problem, cost_model, StageSchedule(problem, g, sol), std::move(partial));
  if (result) result->solve_seconds = SecondsSince(start);
  return result;
}

}  // namespace kiwi::solve::remat
