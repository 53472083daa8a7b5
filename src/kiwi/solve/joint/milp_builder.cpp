// Formulate (milp_builder.h): decisions, objective (node and resharding costs), memory variables,
// budget rows; plus the MIP-start assignment and the reading of a solution.
#include "kiwi/solve/joint/milp_builder.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <utility>

namespace kiwi::solve::joint {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }
// Coefficients on binaries stay below these (CBC 2.10 aborts on an assertion in checkSolution when
// memory rows carried sizes of up to 10^7 units on a 4-layer transformer).
constexpr double kMaxMemoryCoefficient = 1e4;
constexpr double kMaxCostCoefficient = 1e6;

// Memory in the gcd of all sizes when that keeps coefficients below kMaxMemoryCoefficient (integral
// rows), else in largest / kMaxMemoryCoefficient; time in cost units scaled likewise.
void ChooseUnits(const JointProblem& p, const JointModelSpec& spec, JointModel& m) {
  int64_t unit = 0, largest = 1, costliest = 1;
  for (ir::NodeId v = 0; v < p.graph->size(); ++v)
    for (int32_t k : p.allowed[Z(v)]) {
      const int64_t bytes = p.Memory(v, k);
      unit = std::gcd(unit, bytes), largest = std::max(largest, bytes);
      const int64_t c = p.lowered.problem.nodes[Z(v)].cost[Z(k)];
      if (c < ir::kForbiddenCost) costliest = std::max(costliest, c * (spec.executions[Z(v)] + 1));
    }
  if (unit <= 0) unit = 1;
  const double exact = static_cast<double>(largest) / static_cast<double>(unit);
  m.memory_unit = exact <= kMaxMemoryCoefficient ? static_cast<double>(unit) : static_cast<double>(largest) / kMaxMemoryCoefficient;
  m.objective_unit = std::max(1.0, static_cast<double>(costliest) / kMaxCostCoefficient);
}

milp::Expr Recomputed(const JointModel& m, ir::NodeId v) {
  milp::Expr e;
  for (const std::array<int32_t, 2>& modes : m.x[Z(v)])
    if (modes[1] >= 0) e.Add(milp::Var{modes[1]});
  return e;
}

void AddDecisions(const JointProblem& p, const JointModelSpec& spec, JointModel& m, milp::Expr& objective) {
  m.x.resize(Z(p.graph->size()));
  for (ir::NodeId v = 0; v < p.graph->size(); ++v) {
    const ir::ShardingNode& node = p.lowered.problem.nodes[Z(v)];
    milp::Expr one;
    for (int32_t k : p.allowed[Z(v)]) {
      std::array<int32_t, 2>& modes = m.x[Z(v)].emplace_back(std::array<int32_t, 2>{-1, -1});
      for (int32_t mode = 0; mode < (spec.recomputable[Z(v)] ? 2 : 1); ++mode) {
        const milp::Var var = m.model.AddBinary();
        modes[Z(mode)] = var.index;
        one.Add(var);
        const int64_t c = node.cost[Z(k)];
        if (c >= ir::kForbiddenCost) m.model.SetBounds(var, 0.0, 0.0);
        else if (c > 0) objective.Add(var, static_cast<double>(c) * (spec.executions[Z(v)] + mode) / m.objective_unit);
      }
    }
    m.model.AddEqual(one, 1.0);
  }
}

// The summed resharding matrix of all edges u -> v, over allowed strategies: [a * |allowed v| + b].
std::map<std::pair<ir::NodeId, ir::NodeId>, std::vector<int64_t>> MergedEdges(const JointProblem& p) {
  std::map<std::pair<ir::NodeId, ir::NodeId>, std::vector<int64_t>> merged;
  for (const ir::ShardingEdge& e : p.lowered.problem.edges) {
    const std::vector<int32_t>& au = p.allowed[Z(e.u)];
    const std::vector<int32_t>& av = p.allowed[Z(e.v)];
    std::vector<int64_t>& matrix = merged[{e.u, e.v}];
    matrix.resize(au.size() * av.size(), 0);
    const auto kv = Z(p.lowered.problem.nodes[Z(e.v)].strategies());
    for (size_t a = 0; a < au.size(); ++a)
      for (size_t b = 0; b < av.size(); ++b)
        matrix[a * av.size() + b] = ir::AddCost(matrix[a * av.size() + b], e.cost[Z(au[a]) * kv + Z(av[b])]);
  }
  return merged;
}

// Groups equal vectors: class per index and the number of classes.
std::pair<std::vector<int32_t>, int32_t> Classes(const std::vector<std::vector<int64_t>>& vectors) {
  std::map<std::vector<int64_t>, int32_t> ids;
  std::vector<int32_t> of;
  for (const std::vector<int64_t>& v : vectors) of.push_back(ids.emplace(v, static_cast<int32_t>(ids.size())).first->second);
  return {of, static_cast<int32_t>(ids.size())};
}

// Pair variables with marginals s_u (over producer classes) and x[v][.][m] (over consumer classes).
void AddPairVariables(JointModel& m, JointModel::Pair& pair, int32_t producer_classes, const std::vector<int64_t>& class_cost,
                      int32_t executions, milp::Expr& objective) {
  const int32_t nc = pair.consumer_classes;
  std::vector<milp::Expr> by_f(Z(producer_classes)), by_gm(Z(nc * pair.modes));
  for (int32_t f = 0; f < producer_classes; ++f)
    for (int32_t g = 0; g < nc; ++g)
      for (int32_t mode = 0; mode < pair.modes; ++mode) {
        const int64_t c = class_cost[Z(f * nc + g)];
        const milp::Var e = m.model.AddContinuous(0.0, c >= ir::kForbiddenCost ? 0.0 : 1.0);
        if (c > 0 && c < ir::kForbiddenCost) objective.Add(e, static_cast<double>(c) * (executions + mode) / m.objective_unit);
        by_f[Z(f)].Add(e);
        by_gm[Z(g * pair.modes + mode)].Add(e);
        pair.vars.push_back(e.index);
      }
  for (size_t a = 0; a < pair.producer_class.size(); ++a)
    for (int32_t var : m.x[Z(pair.u)][a])
      if (var >= 0) by_f[Z(pair.producer_class[a])].Add(milp::Var{var}, -1.0);
  for (size_t b = 0; b < pair.consumer_class.size(); ++b)
    for (int32_t mode = 0; mode < pair.modes; ++mode)
      by_gm[Z(pair.consumer_class[b] * pair.modes + mode)].Add(milp::Var{m.x[Z(pair.v)][b][Z(mode)]}, -1.0);
  for (const milp::Expr& e : by_f) m.model.AddEqual(e, 0.0);
  for (const milp::Expr& e : by_gm) m.model.AddEqual(e, 0.0);
  m.pairs.push_back(std::move(pair));
}

// KIWI eq. 2's resharding term, per merged edge: linear when one side has a single class.
void AddEdge(const JointProblem& p, const JointModelSpec& spec, JointModel& m, ir::NodeId u, ir::NodeId v,
             const std::vector<int64_t>& matrix, bool fold_producer_side, milp::Expr& objective) {
  const size_t nu = p.allowed[Z(u)].size(), nv = p.allowed[Z(v)].size();
  std::vector<std::vector<int64_t>> rows(nu), columns(nv);
  for (size_t a = 0; a < nu; ++a)
    for (size_t b = 0; b < nv; ++b) rows[a].push_back(matrix[a * nv + b]), columns[b].push_back(matrix[a * nv + b]);
  if (std::all_of(matrix.begin(), matrix.end(), [](int64_t c) { return c == 0; })) return;
  const int32_t executions = spec.executions[Z(v)];
  const int32_t modes = spec.recomputable[Z(v)] ? 2 : 1;
  auto [fc, nf] = Classes(rows);
  auto [gc, ng] = Classes(columns);
  if (nf == 1) {  // the cost depends on v's strategy only
    for (size_t b = 0; b < nv; ++b)
      for (int32_t mode = 0; mode < modes; ++mode)
        if (rows[0][b] > 0 && rows[0][b] < ir::kForbiddenCost)
          objective.Add(milp::Var{m.x[Z(v)][b][Z(mode)]}, static_cast<double>(rows[0][b]) * (executions + mode) / m.objective_unit);
    return;
  }
  if (ng == 1 && modes == 1 && fold_producer_side) {  // on u's strategy only (v runs a fixed number of times)
    for (size_t a = 0; a < nu; ++a)
      for (int32_t var : m.x[Z(u)][a])
        if (var >= 0 && columns[0][a] > 0 && columns[0][a] < ir::kForbiddenCost)
          objective.Add(milp::Var{var}, static_cast<double>(columns[0][a]) * executions / m.objective_unit);
    return;
  }
  std::vector<int64_t> class_cost(Z(nf * ng), 0);
  for (size_t a = 0; a < nu; ++a)
    for (size_t b = 0; b < nv; ++b) class_cost[Z(fc[a] * ng + gc[b])] = matrix[a * nv + b];
  JointModel::Pair pair{u, v, fc, gc, ng, modes, {}};
  AddPairVariables(m, pair, nf, class_cost, executions, objective);
}

}  // namespace

// Memory side (milp_builder_memory.cpp).
void AddMemoryRows(const JointProblem& p, const JointModelSpec& spec, const JointModelOptions& options, JointModel& m);

JointModel BuildJointModel(const JointProblem& p, const JointModelSpec& spec, const JointModelOptions& options) {
  JointModel m;
  ChooseUnits(p, spec, m);
  milp::Expr objective;
  AddDecisions(p, spec, m, objective);
  for (const auto& [uv, matrix] : MergedEdges(p)) AddEdge(p, spec, m, uv.first, uv.second, matrix, options.fold_producer_side, objective);
  for (const auto& [w, i] : spec.exclusive) {  // KIWI eq. 9 (linearized as eq. 31, without big-M)
    milp::Expr e = Recomputed(m, w);
    const milp::Expr input = Recomputed(m, i);
    for (const auto& term : input.terms()) e.Add(milp::Var{term.first}, term.second);
    m.model.AddLessEqual(e, 1.0);
  }
  AddMemoryRows(p, spec, options, m);
  if (options.min_peak) {
    objective = milp::Expr().Add(milp::Var{m.peak});
  }
  m.model.SetObjective(objective, milp::Sense::kMinimize);
  return m;
}

double BudgetUnits(const JointModel& m, int64_t budget) {
  const double units = static_cast<double>(budget) / m.memory_unit;
  // Integral units: the floor is exact. Otherwise a slack far below one byte absorbs rounding (byte
  // counts are integers, so it admits nothing over the budget); EvaluateSpec judges every answer.
  const bool integral = std::abs(m.memory_unit - std::round(m.memory_unit)) < 1e-9;
  return integral ? std::floor(units + 1e-9) : units + 1e-7;
}

JointSolution ReadModelSolution(const JointModel& m, const JointProblem& p, const std::vector<double>& values) {
  JointSolution s{ir::Solution(Z(p.graph->size()), 0), std::vector<uint8_t>(Z(p.graph->size()), 0)};
  for (size_t v = 0; v < m.x.size(); ++v) {
    double best = -1.0;
    for (size_t a = 0; a < m.x[v].size(); ++a)
      for (size_t mode = 0; mode < 2; ++mode) {
        const int32_t var = m.x[v][a][mode];
        if (var >= 0 && values[Z(var)] > best) {
          best = values[Z(var)];
          s.strategy[v] = p.allowed[v][a];
          s.recompute[v] = static_cast<uint8_t>(mode);
        }
      }
  }
  return s;
}

}  // namespace kiwi::solve::joint
