// The full stage-based joint formulation (full_milp.h): the sharding part comes from BuildJointModel
// (one execution per node, no memory rows), the stage part follows solve/remat/checkmate_ilp.cpp's
// rows with every byte count replaced by the chosen layout's (linearized products).
#include "kiwi/solve/joint/full_milp.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "kiwi/solve/joint/baselines.h"
#include "kiwi/solve/joint/milp_builder.h"
#include "kiwi/solve/joint/model_spec.h"
#include "kiwi/solve/milp/load_estimate.h"
#include "kiwi/solve/milp/solve.h"
#include "kiwi/solve/remat/checkmate_ilp.h"
#include "kiwi/solve/remat/solvers.h"
#include "kiwi/util/available_memory.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::joint {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }
using Index = remat::CheckmateIndex;
using Clock = std::chrono::steady_clock;

struct FullModel {
  JointModel base;                  // strategies and resharding pairs; objective = one execution of each node
  remat::StageGraph g;              // positions
  std::vector<ir::NodeId> node_at;  // position -> node
  Index x;                          // R, S, FREE and U slots (checkmate_ilp.h's layout)
  std::vector<int32_t> mem;         // per position: s^T mem (memory units), or -1 when constant
  std::vector<double> mem_value;    // per position: the constant size (units) when mem is -1
  std::vector<std::vector<int32_t>> strategy;  // per position: its one-hot strategy binaries
  std::vector<std::vector<size_t>> consumed;   // per position: indices of base.pairs it consumes
  // z_j = slot * group_j for a one-hot group (a node's strategy binaries or a pair's variables):
  // sum_j z_j = slot, z_j <= group_j - exact at integer points, and the tightest such product in an LP.
  struct Split {
    int32_t slot;
    std::vector<int32_t> group, z;
  };
  std::vector<Split> splits;
  double budget_units = 0.0;
};

void AddSlot(milp::Expr& e, int32_t slot, double coeff) {
  if (slot >= 0) e.Add(milp::Var{slot}, coeff);
  else if (slot == Index::kOne) e.AddConstant(coeff);
}

void AddRow(milp::Model& m, const milp::Expr& e, double lower, double upper) {
  if (e.terms().empty() && e.constant() >= lower && e.constant() <= upper) return;
  m.AddConstraint(e, lower, upper);
}

// Per position: its strategy binaries and the resharding pairs it consumes.
void IndexGroups(const JointProblem& p, FullModel& f) {
  std::vector<int32_t> position(Z(p.graph->size()));
  for (int32_t t = 0; t < f.g.n; ++t) position[Z(f.node_at[Z(t)])] = t;
  f.strategy.assign(Z(f.g.n), {});
  f.consumed.assign(Z(f.g.n), {});
  for (int32_t t = 0; t < f.g.n; ++t)
    for (const auto& modes : f.base.x[Z(f.node_at[Z(t)])]) f.strategy[Z(t)].push_back(modes[0]);
  for (size_t k = 0; k < f.base.pairs.size(); ++k) f.consumed[Z(position[Z(f.base.pairs[k].v)])].push_back(k);
}

// The split variables of `slot` over `group` (see FullModel::Split).
const std::vector<int32_t>& AddSplit(FullModel& f, int32_t slot, const std::vector<int32_t>& group) {
  milp::Model& m = f.base.model;
  FullModel::Split split{slot, group, {}};
  milp::Expr total = milp::Expr().Add(milp::Var{slot}, -1.0);
  for (int32_t g : group) {
    const milp::Var z = m.AddContinuous(0.0, 1.0);
    split.z.push_back(z.index);
    total.Add(z);
    m.AddLessEqual(milp::Expr().Add(z).Add(milp::Var{g}, -1.0), 0.0);
  }
  m.AddEqual(total, 0.0);
  f.splits.push_back(std::move(split));
  return f.splits.back().z;
}

// s^T mem per position: a variable, or a constant when all allowed layouts have the same size.
void AddMemory(const JointProblem& p, FullModel& f) {
  for (int32_t t = 0; t < f.g.n; ++t) {
    const ir::NodeId v = f.node_at[Z(t)];
    double lo = std::numeric_limits<double>::max(), hi = 0.0;
    milp::Expr e;
    for (size_t a = 0; a < p.allowed[Z(v)].size(); ++a) {
      const double units = static_cast<double>(p.Memory(v, p.allowed[Z(v)][a])) / f.base.memory_unit;
      lo = std::min(lo, units), hi = std::max(hi, units);
      e.Add(milp::Var{f.base.x[Z(v)][a][0]}, -units);
    }
    f.mem_value.push_back(lo);
    if (lo == hi) {
      f.mem.push_back(-1);
      continue;
    }
    const milp::Var m = f.base.model.AddContinuous(0.0, milp::kInf);
    e.Add(m);
    f.base.model.AddEqual(e, 0.0);
    f.mem.push_back(m.index);
  }
}

// Adds -(held bytes) or +(freed bytes) of position i times the stage binary `slot` to a U row
// (U = held - freed), exactly: sum_a mem_a z_a with z the split of `slot` over i's strategies.
void AddBytes(const JointProblem& p, FullModel& f, milp::Expr& e, int32_t slot, int32_t i, bool held) {
  const double sign = held ? -1.0 : 1.0;
  if (slot == Index::kZero) return;
  if (f.mem[Z(i)] < 0) return AddSlot(e, slot, sign * f.mem_value[Z(i)]);
  if (slot == Index::kOne) return void(e.Add(milp::Var{f.mem[Z(i)]}, sign));
  const ir::NodeId v = f.node_at[Z(i)];
  const std::vector<int32_t> z = AddSplit(f, slot, f.strategy[Z(i)]);
  for (size_t a = 0; a < z.size(); ++a)
    e.Add(milp::Var{z[a]}, sign * static_cast<double>(p.Memory(v, p.allowed[Z(v)][a])) / f.base.memory_unit);
}

void CreateStageVariables(FullModel& f) {
  const remat::StageGraph& g = f.g;
  milp::Model& m = f.base.model;
  f.x.r.resize(Z(g.n));
  f.x.s.resize(Z(g.n));
  for (int32_t t = 0; t < g.n; ++t) {
    for (int32_t i = 0; i <= t; ++i) {
      const bool zero = g.persistent[Z(i)] || !g.Live(t, i);
      f.x.r[Z(t)].push_back(i == t ? Index::kOne : zero ? Index::kZero : m.AddBinary().index);
    }
    for (int32_t i = 0; i < t; ++i)
      f.x.s[Z(t)].push_back(g.persistent[Z(i)] ? Index::kOne : !g.Live(t, i) ? Index::kZero : m.AddBinary().index);
  }
}

bool Reads(const remat::StageGraph& g, int32_t t, int32_t i) {
  return std::binary_search(g.children[Z(i)].begin(), g.children[Z(i)].end(), t);
}

// lhs <= R[t][i] + S[t][i].
void NeedsResident(FullModel& f, milp::Expr lhs, int32_t t, int32_t i) {
  AddSlot(lhs, f.x.R(t, i), -1.0), AddSlot(lhs, f.x.S(t, i), -1.0);
  AddRow(f.base.model, lhs, -milp::kInf, 0.0);
}

// Checkmate eqs. (1b)/(1c) for a tensor stage t cannot free (t reads it, or it is always kept).
void KeptTensorRows(FullModel& f, int32_t t, int32_t i) {
  for (int32_t k : f.g.children[Z(i)]) {
    if (k > t) break;
    if (f.x.R(t, k) == Index::kZero) continue;
    milp::Expr e;
    AddSlot(e, f.x.R(t, k), 1.0);
    NeedsResident(f, e, t, i);
  }
  if (t + 1 < f.g.n && f.x.S(t + 1, i) >= 0) {
    milp::Expr e;
    AddSlot(e, f.x.S(t + 1, i), 1.0);
    NeedsResident(f, e, t, i);
  }
}

// FREE[t][i][k] for the readers k < t of i (checkmate_ilp.cpp's AddFreedTensorRows with exact frees).
void FreedTensorRows(FullModel& f, int32_t t, int32_t i, const std::vector<int32_t>& points) {
  milp::Model& m = f.base.model;
  std::vector<int32_t> vars;
  milp::Expr freed;
  for (int32_t k : points) {
    milp::Expr reader = freed;
    AddSlot(reader, f.x.R(t, k), 1.0);
    NeedsResident(f, reader, t, i);
    vars.push_back(m.AddBinary().index);
    f.x.frees.push_back({t, i, k, vars.back()});
    freed.Add(milp::Var{vars.back()});
    milp::Expr upper = milp::Expr().Add(milp::Var{vars.back()});
    AddSlot(upper, f.x.R(t, k), -1.0);
    AddRow(m, upper, -milp::kInf, 0.0);
  }
  AddSlot(freed, f.x.S(t + 1, i), 1.0);
  NeedsResident(f, freed, t, i);
  for (size_t a = 0; a < points.size(); ++a) {
    milp::Expr lower = milp::Expr().Add(milp::Var{vars[a]});
    AddSlot(lower, f.x.R(t, points[a]), -1.0), AddSlot(lower, f.x.S(t + 1, i), 1.0);
    for (size_t b = a + 1; b < points.size(); ++b) AddSlot(lower, f.x.R(t, points[b]), 1.0);
    AddRow(m, lower, 0.0, milp::kInf);
  }
}

// No double computation, and no waste: R[t][i] <= S[t+1][i] + sum of its readers computed in stage t.
void ComputeRows(FullModel& f, int32_t t, int32_t i) {
  if (f.x.R(t, i) < 0) return;
  if (f.x.S(t, i) >= 0) {
    milp::Expr e;
    AddSlot(e, f.x.R(t, i), 1.0), AddSlot(e, f.x.S(t, i), 1.0);
    AddRow(f.base.model, e, -milp::kInf, 1.0);
  }
  if (Reads(f.g, t, i)) return;
  milp::Expr e;
  AddSlot(e, f.x.R(t, i), 1.0), AddSlot(e, f.x.S(t + 1, i), -1.0);
  for (int32_t j : f.g.children[Z(i)])
    if (j < t) AddSlot(e, f.x.R(t, j), -1.0);
  AddRow(f.base.model, e, -milp::kInf, 0.0);
}

// U[t][k] after each computable k (eq. 17-19), within the budget.
void MemoryRows(const JointProblem& p, FullModel& f, int32_t t, size_t first_free) {
  std::vector<Index::Free> frees(f.x.frees.begin() + static_cast<std::ptrdiff_t>(first_free), f.x.frees.end());
  std::stable_sort(frees.begin(), frees.end(), [](const Index::Free& a, const Index::Free& b) { return a.k < b.k; });
  f.x.u.resize(Z(f.g.n));
  f.x.u[Z(t)].assign(Z(t) + 1, -1);
  int32_t prev = -1;
  size_t next = 0;
  for (int32_t k = 0; k <= t; ++k) {
    if (f.x.R(t, k) == Index::kZero) continue;
    const milp::Var u = f.base.model.AddContinuous(0.0, f.budget_units);
    f.x.u[Z(t)][Z(k)] = u.index;
    milp::Expr e = milp::Expr().Add(u);
    AddBytes(p, f, e, f.x.R(t, k), k, /*held=*/true);
    if (prev < 0) {
      for (int32_t i = 0; i < t; ++i) AddBytes(p, f, e, f.x.S(t, i), i, /*held=*/true);
    } else {
      e.Add(milp::Var{f.x.u[Z(t)][Z(prev)]}, -1.0);
      for (; next < frees.size() && frees[next].k < k; ++next) AddBytes(p, f, e, frees[next].var, frees[next].i, /*held=*/false);
    }
    f.x.u_rows.push_back(f.base.model.num_constraints());
    AddRow(f.base.model, e, 0.0, 0.0);
    prev = k;
  }
}

std::vector<int32_t> FreePoints(const FullModel& f, int32_t t, int32_t i) {
  std::vector<int32_t> points;
  if (f.g.persistent[Z(i)] || f.x.S(t + 1, i) == Index::kOne || Reads(f.g, t, i)) return points;
  for (int32_t j : f.g.children[Z(i)])
    if (j < t && f.x.R(t, j) != Index::kZero) points.push_back(j);
  return points;
}

// Eq. 1's recomputations: each R[t][i] (i < t) pays i's cost again, split over its strategies and
// over the resharding pairs it consumes (objective coefficients of one execution, from the base).
// False when it outlasts `deadline` (checked once per stage).
bool RecomputationCosts(FullModel& f, milp::Expr& objective, Clock::time_point deadline) {
  const std::vector<double> one = f.base.model.objective();
  auto pay = [&](int32_t slot, const std::vector<int32_t>& group) {
    if (std::all_of(group.begin(), group.end(), [&](int32_t g) { return one[Z(g)] == 0.0; })) return;
    const std::vector<int32_t> z = AddSplit(f, slot, group);
    for (size_t j = 0; j < z.size(); ++j)
      if (one[Z(group[j])] != 0.0) objective.Add(milp::Var{z[j]}, one[Z(group[j])]);
  };
  for (int32_t t = 0; t < f.g.n; ++t) {
    if (Clock::now() > deadline) return false;
    for (int32_t i = 0; i < t; ++i) {
      const int32_t slot = f.x.R(t, i);
      if (slot < 0) continue;
      pay(slot, f.strategy[Z(i)]);
      for (size_t k : f.consumed[Z(i)]) pay(slot, f.base.pairs[k].vars);
    }
  }
  return true;
}

// The sharding part with no memory rows, every edge's cost owned by its consumer.
JointModel ShardingPart(const JointProblem& p) {
  JointModelSpec spec;
  spec.executions.assign(Z(p.graph->size()), 1);
  spec.recomputable.assign(Z(p.graph->size()), 0);
  spec.extensions.assign(Z(p.graph->size()), {});
  return BuildJointModel(p, spec, {.budget = std::numeric_limits<int64_t>::max(), .min_peak = false,
                                   .fold_producer_side = false});
}

// The full model, or nullopt when building it outlasts `deadline` (checked once per stage, in each
// of the two passes over the stages).
std::optional<FullModel> BuildFull(const JointProblem& p, const remat::RematProblem& rp, Clock::time_point deadline) {
  FullModel f;
  f.base = ShardingPart(p);
  f.g = remat::MakeStageGraph(rp);
  f.node_at = rp.order;
  IndexGroups(p, f);
  AddMemory(p, f);
  f.budget_units = BudgetUnits(f.base, p.budget);
  CreateStageVariables(f);
  for (int32_t t = 0; t < f.g.n; ++t) {
    if (Clock::now() > deadline) return std::nullopt;
    const size_t first = f.x.frees.size();
    for (int32_t i = 0; i < t; ++i) {
      ComputeRows(f, t, i);
      const std::vector<int32_t> points = FreePoints(f, t, i);
      if (points.empty()) KeptTensorRows(f, t, i);
      else FreedTensorRows(f, t, i, points);
    }
    MemoryRows(p, f, t, first);
  }
  milp::Expr objective;
  const std::vector<double>& one_each = f.base.model.objective();
  for (size_t j = 0; j < one_each.size(); ++j)
    if (one_each[j] != 0.0) objective.Add(milp::Var{static_cast<int32_t>(j)}, one_each[j]);
  if (!RecomputationCosts(f, objective, deadline)) return std::nullopt;
  f.base.model.SetObjective(objective, milp::Sense::kMinimize);
  return f;
}

double SlotValue(int32_t slot, const std::vector<double>& v) {
  return slot >= 0 ? v[Z(slot)] : slot == Index::kOne ? 1.0 : 0.0;
}

// A full assignment for a decision (MIP start): R, S as given, FREE as ReplayStage frees, products
// and U from their definitions.
std::vector<double> FullAssignment(const FullModel& f, const JointProblem& p, const FullSolution& s) {
  JointModelSpec none;
  none.executions.assign(Z(p.graph->size()), 1);
  none.recomputable.assign(Z(p.graph->size()), 0);
  none.extensions.assign(Z(p.graph->size()), {});
  std::vector<double> v = ModelAssignment(f.base, p, none, WithoutRecompute(s.strategy));
  for (int32_t t = 0; t < f.g.n; ++t) {
    const ir::NodeId node = f.node_at[Z(t)];
    if (f.mem[Z(t)] >= 0) v[Z(f.mem[Z(t)])] = static_cast<double>(p.Memory(node, s.strategy[Z(node)])) / f.base.memory_unit;
    for (int32_t i = 0; i <= t; ++i)
      if (f.x.R(t, i) >= 0) v[Z(f.x.R(t, i))] = s.stages.Computed(t, i) ? 1.0 : 0.0;
    for (int32_t i = 0; i < t; ++i)
      if (f.x.S(t, i) >= 0) v[Z(f.x.S(t, i))] = s.stages.Stored(t, i) ? 1.0 : 0.0;
  }
  for (const Index::Free& fr : f.x.frees) {
    bool read_later = false;
    for (int32_t j : f.g.children[Z(fr.i)]) read_later = read_later || (j > fr.k && j <= fr.t && s.stages.Computed(fr.t, j));
    v[Z(fr.var)] = s.stages.Computed(fr.t, fr.k) && !s.stages.Stored(fr.t + 1, fr.i) && !read_later ? 1.0 : 0.0;
  }
  for (const FullModel::Split& split : f.splits)
    for (size_t j = 0; j < split.z.size(); ++j) v[Z(split.z[j])] = SlotValue(split.slot, v) * v[Z(split.group[j])];
  for (int32_t r : f.x.u_rows) {  // U after the terms it chains on
    const milp::Constraint& row = f.base.model.constraints()[Z(r)];
    double rest = 0.0;
    for (size_t j = 1; j < row.terms.size(); ++j) rest += row.terms[j].second * v[Z(row.terms[j].first)];
    v[Z(row.terms.front().first)] = row.lower - rest;
  }
  return v;
}

FullSolution ReadFull(const FullModel& f, const JointProblem& p, const std::vector<double>& v) {
  FullSolution s{ReadModelSolution(f.base, p, v).strategy, remat::EmptyStages(f.g.n)};
  for (int32_t t = 0; t < f.g.n; ++t) {
    for (int32_t i = 0; i <= t; ++i) s.stages.R[Z(t)][Z(i)] = SlotValue(f.x.R(t, i), v) > 0.5 ? 1 : 0;
    for (int32_t i = 0; i < t; ++i) s.stages.S[Z(t)][Z(i)] = SlotValue(f.x.S(t, i), v) > 0.5 ? 1 : 0;
  }
  return s;
}

// The schedule of a decision and its exact time and peak (the fixed-schedule spec's accounting).
struct Judged {
  std::vector<plan::Step> schedule;
  SpecEvaluation evaluation;
  bool ok = false;
};
Judged Judge(const JointProblem& p, const remat::RematProblem& rp, const FullModel& f, const FullSolution& s) {
  Judged j;
  if (!remat::CheckStageSolution(f.g, s.stages)) return j;
  j.schedule = remat::StageSchedule(rp, f.g, s.stages);
  Result<JointModelSpec> spec = FixedScheduleSpec(p, j.schedule);
  if (!spec) return j;
  j.evaluation = EvaluateSpec(p, *spec, WithoutRecompute(s.strategy));
  j.ok = j.evaluation.peak <= p.budget && j.evaluation.cost < ir::kForbiddenCost;
  return j;
}

// The cheapest portfolio plan in stage form that fits and satisfies the model (MIP start).
std::optional<FullSolution> WarmStart(const JointProblem& p, const remat::RematProblem& rp, const FullModel& f,
                                      const JointSolveOptions& o, std::vector<FullSolution> candidates) {
  for (const JointResult* r : o.portfolio) {
    if (r == nullptr || r->solution.strategy.size() != Z(p.graph->size())) continue;
    std::optional<remat::StageSolution> stages = remat::StoredSetsOfSchedule(rp, r->plan.schedule);
    if (stages) candidates.push_back({r->solution.strategy, *std::move(stages)});
  }
  std::optional<FullSolution> best;
  int64_t best_cost = 0;
  for (FullSolution& s : candidates) {
    bool allowed = true;
    for (size_t v = 0; v < s.strategy.size(); ++v)
      allowed = allowed && std::binary_search(p.allowed[v].begin(), p.allowed[v].end(), s.strategy[v]);
    if (!allowed) continue;
    const Judged j = Judge(p, rp, f, s);
    if (!j.ok || (best && j.evaluation.cost >= best_cost)) continue;
    if (f.base.model.MaxViolation(FullAssignment(f, p, s)) > 1e-6) {
      if (o.progress) o.progress("kiwi-full: a candidate breaks the stage rows; not a warm start");
      continue;
    }
    best = std::move(s), best_cost = j.evaluation.cost;
  }
  return best;
}

// Checkmate on the smallest layouts: the training graph with each tensor at its smallest sharded size
// and each op at that layout's cost, solved by the remat solvers (solve/remat/solvers.h) within the
// budget. Its schedule with the smallest layouts is a decision of the full family (a MIP start where
// no portfolio plan fits).
std::optional<FullSolution> CheckmateOnSmallestLayouts(const JointProblem& p, const remat::RematProblem& rp,
                                                       const JointSolveOptions& o, double seconds) {
  const ir::Solution smallest = SmallestStrategies(p);
  ir::Graph g = *p.graph;
  for (ir::NodeId v = 0; v < g.size(); ++v) {
    ir::Node& n = g.mutable_node(v);
    n.output = {ir::DType::kU8, {std::max<int64_t>(1, p.Memory(v, smallest[Z(v)]))}};
    if (n.is_persistent() || n.kind == ir::OpKind::kInput) continue;
    n.kind = ir::OpKind::kOpaque;
    n.op.clear();
    n.measured_cost = p.Seconds(p.lowered.problem.nodes[Z(v)].cost[Z(smallest[Z(v)])]);
  }
  const cost::CostModel measured{cost::DeviceSpec{}};
  Result<remat::RematProblem> sized = remat::MakeRematProblem(g, measured, p.budget);
  if (!sized) return std::nullopt;
  remat::RematOptions ro;
  ro.time_limit_seconds = seconds;
  ro.threads = o.threads;
  ro.relative_gap = o.relative_gap;
  Result<remat::RematResult> r = remat::SolveRemat(*sized, measured, remat::SolverKind::kAuto, ro);
  if (o.progress && r)
    o.progress(fmt::format("kiwi-full: Checkmate on the smallest layouts: {} (peak {} bytes, smallest known {})",
                           r->feasible ? "feasible" : "infeasible", r->peak_memory, r->smallest_known_budget));
  if (!r || !r->feasible) return std::nullopt;
  std::optional<remat::StageSolution> stages = remat::StoredSetsOfSchedule(rp, r->schedule);
  if (!stages) return std::nullopt;
  return FullSolution{smallest, *std::move(stages)};
}

// The fastest feasible portfolio plan as kiwi-full's answer when its MILP is not solved, else `partial`;
// the note says why, and so does a progress line.
JointResult PortfolioAnswer(const JointSolveOptions& o, JointResult partial, const std::string& why,
                            Clock::time_point start) {
  partial.solve_seconds = SecondsSince(start);
  const JointResult* best = nullptr;
  for (const JointResult* r : o.portfolio)
    if (r != nullptr && r->feasible && (best == nullptr || r->seconds() < best->seconds())) best = r;
  partial.note = "the full MILP was not solved: " + why;
  if (o.progress) o.progress("kiwi-full: " + partial.note + (best ? "; the plan of " + best->method : ""));
  partial.timed_out = true;  // every reason is the time (or memory) left, not the budget
  if (best == nullptr) return partial;
  JointResult out = *best;
  out.method = partial.method;
  out.optimal = false;
  out.lower_bound_seconds.reset();
  out.smallest_known_budget = partial.smallest_known_budget;
  out.solve_seconds = partial.solve_seconds;
  out.note = fmt::format("{}; the plan of {}", partial.note, best->method);
  return out;
}

}  // namespace

Result<JointResult> SolveKiwiFull(const JointProblem& p, const JointSolveOptions& o) {
  const Clock::time_point start = Clock::now();
  Result<remat::RematProblem> rp = remat::MakeRematProblem(*p.graph, *p.cost_model, p.budget);
  if (!rp) return rp.error();
  JointResult partial;
  partial.method = "kiwi-full";
  partial.smallest_known_budget = PortfolioSmallestKnownBudget(o);
  // The full model holds Checkmate's stage rows (and a split per layout): when those alone would not
  // load in the time or memory left, it is not built (8 GPT layers: 9.2M variables, 6 s to build
  // against a 5 s limit).
  if (std::optional<std::string> why =
          remat::WhyNotBuildCheckmate(remat::MakeStageGraph(*rp), 0, o.time_limit_seconds - SecondsSince(start))) {
    return PortfolioAnswer(o, std::move(partial), *why, start);
  }
  // CBC loads a model about 5x slower than it is built (8 layers: 34M nonzeros built in about 2 s, 11 s
  // to load), so one whose building takes 40% of the time left can never be solved: stop there.
  const double left = o.time_limit_seconds - SecondsSince(start);
  const std::optional<FullModel> built = BuildFull(p, *rp, DeadlineAfter(Clock::now(), 0.4 * left));
  if (!built) {
    return PortfolioAnswer(o, std::move(partial), "building it outlasted the time limit", start);
  }
  const FullModel& f = *built;
  if (o.progress)
    o.progress(fmt::format("kiwi-full: {} variables, {} constraints", f.base.model.num_vars(), f.base.model.num_constraints()));
  // Built but too large to load in the time left: the warm start and its judging (1.6 s at 9.2M
  // variables) would only overrun the limit further.
  const int64_t nonzeros = f.base.model.num_nonzeros();
  if (std::optional<std::string> why =
          milp::WhyNotLoad(nonzeros, o.time_limit_seconds - SecondsSince(start), AvailableMemoryBytes())) {
    return PortfolioAnswer(o, std::move(partial), fmt::format("its {} nonzeros {}", nonzeros, *why), start);
  }
  milp::SolveOptions so;
  so.time_limit_seconds = std::max(0.0, o.time_limit_seconds - SecondsSince(start));
  so.relative_gap = o.relative_gap;
  so.threads = o.threads;
  std::vector<FullSolution> own;  // Checkmate on the smallest layouts, when no portfolio plan fits
  if (!std::any_of(o.portfolio.begin(), o.portfolio.end(), [&](const JointResult* r) { return r && r->feasible; }))
    if (std::optional<FullSolution> c = CheckmateOnSmallestLayouts(p, *rp, o, 0.25 * o.time_limit_seconds)) own.push_back(*c);
  const std::optional<FullSolution> warm = WarmStart(p, *rp, f, o, std::move(own));
  if (warm) so.warm_start = FullAssignment(f, p, *warm);
  Result<milp::SolveResult> r = milp::Solve(f.base.model, so);
  if (!r) return r.error();
  std::optional<FullSolution> best;
  Judged judged;
  if (r->has_solution()) {
    FullSolution s = ReadFull(f, p, r->values);
    judged = Judge(p, *rp, f, s);
    if (judged.ok) best = std::move(s);
  }
  if (warm) {
    const Judged w = Judge(p, *rp, f, *warm);
    if (!best || w.evaluation.cost < judged.evaluation.cost) best = *warm, judged = w;
  }
  partial.solve_seconds = SecondsSince(start);
  if (!best) {
    partial.timed_out = r->termination != milp::Termination::kInfeasible;
    partial.note = partial.timed_out ? "no solution within the time limit" : "proven infeasible";
    return partial;
  }
  partial.solution = WithoutRecompute(best->strategy);
  partial.claimed_cost = judged.evaluation.cost;
  partial.claimed_peak = judged.evaluation.peak;
  partial.optimal = r->termination == milp::Termination::kOptimal;
  if (r->has_solution() && std::isfinite(r->best_bound))
    partial.lower_bound_seconds = std::min(p.Seconds(judged.evaluation.cost), p.Seconds(static_cast<int64_t>(r->best_bound * f.base.objective_unit)));
  partial.note = r->termination == milp::Termination::kOptimal ? "optimal"
                 : r->has_solution() && std::isfinite(r->relative_gap())
                     ? fmt::format("gap {:.3g}%", 100.0 * r->relative_gap())
                     : "CBC found no plan and no bound in the time limit; its warm start";
  Result<plan::OperatorPlan> plan = sharding::ToOperatorPlan(p.lowered, best->strategy, p.mesh);
  if (!plan) return plan.error();
  plan->schedule = std::move(judged.schedule);
  return FinishJoint(p, *std::move(plan), std::move(partial));
}

}  // namespace kiwi::solve::joint
