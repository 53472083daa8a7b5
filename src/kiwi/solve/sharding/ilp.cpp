// Formulate, solve, extract (DESIGN.md): BuildIlp writes the model, SolveShardingIlp hands it to CBC
// and reads the one-hot choice back; ir::Evaluate then judges it.
#include "kiwi/solve/sharding/ilp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kiwi/solve/milp/solve.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::sharding {
namespace {

bool Forbidden(int64_t cost) { return cost >= ir::kForbiddenCost; }

struct IlpModel {
  milp::Model model;
  std::vector<std::vector<milp::Var>> choice;  // per node, per strategy
  // Per merged edge: (u, v, summed matrix, pair variables row-major).
  struct Pair {
    int32_t u, v;
    std::vector<int64_t> cost;
    std::vector<milp::Var> vars;
  };
  std::vector<Pair> pairs;
};

// Parallel edges (either direction) summed into one matrix per unordered node pair, oriented u < v.
std::vector<IlpModel::Pair> MergeEdges(const ir::ShardingProblem& problem) {
  std::map<std::pair<int32_t, int32_t>, size_t> index;
  std::vector<IlpModel::Pair> pairs;
  for (const ir::ShardingEdge& e : problem.edges) {
    const bool flip = e.u > e.v;
    const int32_t u = flip ? e.v : e.u, v = flip ? e.u : e.v;
    const size_t su = problem.nodes[static_cast<size_t>(u)].cost.size();
    const size_t sv = problem.nodes[static_cast<size_t>(v)].cost.size();
    auto [it, inserted] = index.emplace(std::make_pair(u, v), pairs.size());
    if (inserted) pairs.push_back({u, v, std::vector<int64_t>(su * sv, 0), {}});
    std::vector<int64_t>& m = pairs[it->second].cost;
    for (size_t a = 0; a < su; ++a)
      for (size_t b = 0; b < sv; ++b)
        m[a * sv + b] = ir::AddCost(m[a * sv + b], flip ? e.cost[b * su + a] : e.cost[a * sv + b]);
  }
  return pairs;
}

void AddChoices(const ir::ShardingProblem& problem, IlpModel& ilp, milp::Expr& objective) {
  for (size_t i = 0; i < problem.nodes.size(); ++i) {
    const ir::ShardingNode& node = problem.nodes[i];
    milp::Expr one;
    std::vector<milp::Var>& vars = ilp.choice.emplace_back();
    for (size_t s = 0; s < node.cost.size(); ++s) {
      const milp::Var x = ilp.model.AddBinary(fmt::format("s{}_{}", i, s));
      if (Forbidden(node.cost[s])) ilp.model.SetBounds(x, 0, 0);
      else objective.Add(x, static_cast<double>(node.cost[s]));
      one.Add(x);
      vars.push_back(x);
    }
    ilp.model.AddEqual(one, 1.0, fmt::format("one_strategy{}", i));
  }
}

// e_uv(a, b) in [0, 1] with sum_b e(a, b) = s_u(a) and sum_a e(a, b) = s_v(b): then e is the product
// of the one-hot vectors, and its cost is linear (Alpa's edge linearization).
void AddEdges(IlpModel& ilp, milp::Expr& objective) {
  for (IlpModel::Pair& pair : ilp.pairs) {
    const auto& xu = ilp.choice[static_cast<size_t>(pair.u)];
    const auto& xv = ilp.choice[static_cast<size_t>(pair.v)];
    std::vector<milp::Expr> row(xu.size()), column(xv.size());
    for (size_t a = 0; a < xu.size(); ++a)
      for (size_t b = 0; b < xv.size(); ++b) {
        const int64_t c = pair.cost[a * xv.size() + b];
        const milp::Var e = ilp.model.AddContinuous(0.0, Forbidden(c) ? 0.0 : 1.0);
        if (!Forbidden(c) && c != 0) objective.Add(e, static_cast<double>(c));
        row[a].Add(e);
        column[b].Add(e);
        pair.vars.push_back(e);
      }
    for (size_t a = 0; a < xu.size(); ++a) ilp.model.AddEqual(row[a].Add(xu[a], -1.0), 0.0);
    for (size_t b = 0; b < xv.size(); ++b) ilp.model.AddEqual(column[b].Add(xv[b], -1.0), 0.0);
  }
}

// One row per interval start whose live set is not contained in the next one's: the summed usage is
// a step function that only rises at starts, and a live set inside another is implied by it.
void AddUsageLimit(const ir::ShardingProblem& problem, IlpModel& ilp) {
  if (problem.usage_limit == ir::kNoUsageLimit) return;
  std::vector<int64_t> starts;
  for (const ir::ShardingNode& node : problem.nodes)
    if (node.live()) starts.push_back(node.start);
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  std::vector<std::vector<int32_t>> live(starts.size());
  for (size_t i = 0; i < problem.nodes.size(); ++i) {
    const ir::ShardingNode& node = problem.nodes[i];
    if (!node.live()) continue;
    auto first = std::lower_bound(starts.begin(), starts.end(), node.start);
    for (auto t = first; t != starts.end() && *t < node.end; ++t)
      live[static_cast<size_t>(t - starts.begin())].push_back(static_cast<int32_t>(i));
  }
  for (size_t k = 0; k < starts.size(); ++k) {
    // live[k] is inside live[k+1] when nothing ends in between (every node of k is still live).
    if (k + 1 < starts.size() && std::all_of(live[k].begin(), live[k].end(), [&](int32_t i) {
          return problem.nodes[static_cast<size_t>(i)].end > starts[k + 1];
        }))
      continue;
    milp::Expr usage;
    double most = 0.0;
    for (int32_t i : live[k]) {
      const ir::ShardingNode& node = problem.nodes[static_cast<size_t>(i)];
      for (size_t s = 0; s < node.usage.size(); ++s)
        if (node.usage[s] != 0) usage.Add(ilp.choice[static_cast<size_t>(i)][s], static_cast<double>(node.usage[s]));
      most += static_cast<double>(*std::max_element(node.usage.begin(), node.usage.end()));
    }
    if (most > static_cast<double>(problem.usage_limit))  // otherwise it can never bind
      ilp.model.AddLessEqual(usage, static_cast<double>(problem.usage_limit), fmt::format("usage_t{}", starts[k]));
  }
}

IlpModel BuildIlp(const ir::ShardingProblem& problem) {
  IlpModel ilp;
  ilp.pairs = MergeEdges(problem);
  milp::Expr objective;
  AddChoices(problem, ilp, objective);
  AddEdges(ilp, objective);
  AddUsageLimit(problem, ilp);
  ilp.model.SetObjective(objective, milp::Sense::kMinimize);
  return ilp;
}

// The full assignment of a solution (choices and pair products) as a warm start.
std::vector<double> Assignment(const IlpModel& ilp, const ir::Solution& solution) {
  std::vector<double> values(static_cast<size_t>(ilp.model.num_vars()), 0.0);
  for (size_t i = 0; i < solution.size(); ++i)
    values[static_cast<size_t>(ilp.choice[i][static_cast<size_t>(solution[i])].index)] = 1.0;
  for (const IlpModel::Pair& pair : ilp.pairs) {
    const size_t sv = ilp.choice[static_cast<size_t>(pair.v)].size();
    const auto a = static_cast<size_t>(solution[static_cast<size_t>(pair.u)]);
    const auto b = static_cast<size_t>(solution[static_cast<size_t>(pair.v)]);
    values[static_cast<size_t>(pair.vars[a * sv + b].index)] = 1.0;
  }
  return values;
}

ir::Solution Extract(const IlpModel& ilp, const std::vector<double>& values) {
  ir::Solution solution(ilp.choice.size(), 0);
  for (size_t i = 0; i < ilp.choice.size(); ++i) {
    double best = -1.0;
    for (size_t s = 0; s < ilp.choice[i].size(); ++s) {
      const double x = values[static_cast<size_t>(ilp.choice[i][s].index)];
      if (x > best) best = x, solution[i] = static_cast<int32_t>(s);
    }
  }
  return solution;
}

}  // namespace

Result<ShardingResult> SolveShardingIlp(const ir::ShardingProblem& problem, const ShardingSolveOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const IlpModel ilp = BuildIlp(problem);
  milp::SolveOptions solve_options;
  solve_options.time_limit_seconds = options.time_limit_seconds;
  solve_options.relative_gap = options.relative_gap;
  solve_options.threads = options.threads;
  if (options.warm_start && ir::Evaluate(problem, *options.warm_start).feasible)
    solve_options.warm_start = Assignment(ilp, *options.warm_start);
  if (options.on_incumbent)
    solve_options.on_incumbent = [&](const milp::Incumbent& inc) {
      options.on_incumbent(static_cast<int64_t>(std::llround(inc.objective)), inc.seconds);
    };
  Result<milp::SolveResult> solved = milp::Solve(ilp.model, solve_options);
  if (!solved) return solved.error();
  if (solved->termination == milp::Termination::kInfeasible)
    return Infeasible(fmt::format("no strategy choice keeps usage within the limit {}", problem.usage_limit));
  if (!solved->has_solution())
    return Error{ErrorCode::kTimeLimit, fmt::format("ilp: no feasible solution within {} s", options.time_limit_seconds)};
  ShardingResult result;
  result.solver = "ilp";
  result.solution = Extract(ilp, solved->values);
  result.evaluation = ir::Evaluate(problem, result.solution);
  if (!result.evaluation.feasible)
    return Internal("ilp: CBC's solution fails the evaluator: " + result.evaluation.violation);
  // Costs are integers, so the optimum is at least the bound rounded up (a small tolerance for CBC's).
  result.lower_bound = static_cast<int64_t>(std::ceil(solved->best_bound - 1e-6 * std::max(1.0, solved->best_bound)));
  result.lower_bound = std::min(*result.lower_bound, result.evaluation.cost);
  result.optimal = solved->termination == milp::Termination::kOptimal;
  result.solve_seconds = SecondsSince(start);
  result.note = fmt::format("{} variables, {} constraints", ilp.model.num_vars(), ilp.model.num_constraints());
  return result;
}

}  // namespace kiwi::solve::sharding
