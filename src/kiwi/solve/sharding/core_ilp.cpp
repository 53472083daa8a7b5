#include "kiwi/solve/sharding/core_ilp.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kiwi/solve/milp/solve.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::sharding {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

bool Forbidden(int64_t c) { return c >= ir::kForbiddenCost; }

bool FitsLimit(const ReducedProblem& p, const std::vector<int32_t>& x) {
  const std::vector<int64_t> usage = ReducedUsage(p, x);
  return std::all_of(usage.begin(), usage.end(), [&](int64_t u) { return u <= p.usage_limit; });
}

// Depth-first search in node order; `bound[i]` = least node cost of nodes i.. (edges are >= 0).
struct Enumerator {
  const ReducedProblem& p;
  std::vector<int64_t> bound;
  std::vector<int32_t> x;
  ExactResult best;

  void Search(size_t i, int64_t cost) {
    if (!best.x.empty() && ir::AddCost(cost, bound[i]) >= best.cost) return;
    if (i == p.nodes.size()) {
      if (FitsLimit(p, x)) best.x = x, best.cost = cost;
      return;
    }
    const ReducedNode& node = p.nodes[i];
    for (int32_t s = 0; s < node.strategies(); ++s) {
      int64_t c = ir::AddCost(cost, node.cost[Z(s)]);
      for (const Incidence& in : node.incident)
        if (Z(in.neighbor) < i) c = ir::AddCost(c, p.Matrix(in)[Z(x[Z(in.neighbor)]) * node.cost.size() + Z(s)]);
      if (Forbidden(c)) continue;
      x[i] = s;
      Search(i + 1, c);
    }
  }
};

struct ReducedIlp {
  milp::Model model;
  std::vector<std::vector<milp::Var>> choice;       // per node, per strategy
  std::vector<std::vector<milp::Var>> pair;         // per edge, per entry (index -1: forbidden)
};

void AddChoicesAndEdges(const ReducedProblem& p, ReducedIlp& ilp) {
  milp::Expr objective;
  ilp.choice.resize(p.nodes.size());
  for (size_t r = 0; r < p.nodes.size(); ++r) {
    milp::Expr one;
    for (const int64_t c : p.nodes[r].cost) {
      const milp::Var x = ilp.model.AddBinary();
      if (Forbidden(c)) ilp.model.SetBounds(x, 0.0, 0.0); else objective.Add(x, static_cast<double>(c));
      one.Add(x);
      ilp.choice[r].push_back(x);
    }
    ilp.model.AddEqual(one, 1.0);
  }
  for (const ReducedEdge& e : p.edges) {
    const auto& xu = ilp.choice[Z(e.u)];
    const auto& xv = ilp.choice[Z(e.v)];
    std::vector<milp::Expr> row(xu.size()), column(xv.size());
    std::vector<milp::Var>& vars = ilp.pair.emplace_back(e.cost.size());
    for (size_t a = 0; a < xu.size(); ++a)
      for (size_t b = 0; b < xv.size(); ++b) {
        const int64_t c = e.cost[a * xv.size() + b];
        if (Forbidden(c)) continue;
        const milp::Var y = ilp.model.AddContinuous(0.0, 1.0);
        if (c != 0) objective.Add(y, static_cast<double>(c));
        row[a].Add(y);
        column[b].Add(y);
        vars[a * xv.size() + b] = y;
      }
    for (size_t a = 0; a < xu.size(); ++a) ilp.model.AddEqual(row[a].Add(xu[a], -1.0), 0.0);
    for (size_t b = 0; b < xv.size(); ++b) ilp.model.AddEqual(column[b].Add(xv[b], -1.0), 0.0);
  }
  ilp.model.SetObjective(objective, milp::Sense::kMinimize);
}

// usage at segment k <= limit: base[k] + sum over the terms covering k of usage[s] * x[r][s].
void AddUsageRow(const ReducedProblem& p, ReducedIlp& ilp, int32_t k) {
  milp::Expr usage;
  for (size_t r = 0; r < p.nodes.size(); ++r)
    for (const UsageTerm& t : p.nodes[r].terms) {
      if (t.first > k || k >= t.last) continue;
      for (size_t s = 0; s < t.usage.size(); ++s)
        if (t.usage[s] != 0) usage.Add(ilp.choice[r][s], static_cast<double>(t.usage[s]));
    }
  ilp.model.AddLessEqual(usage, static_cast<double>(p.usage_limit - p.base_usage[Z(k)]));
}

std::vector<double> Assignment(const ReducedProblem& p, const ReducedIlp& ilp, const std::vector<int32_t>& x) {
  std::vector<double> values(Z(ilp.model.num_vars()), 0.0);
  for (size_t r = 0; r < x.size(); ++r) values[Z(ilp.choice[r][Z(x[r])].index)] = 1.0;
  for (size_t e = 0; e < p.edges.size(); ++e) {
    const size_t nv = p.nodes[Z(p.edges[e].v)].cost.size();
    const int32_t y = ilp.pair[e][Z(x[Z(p.edges[e].u)]) * nv + Z(x[Z(p.edges[e].v)])].index;
    if (y >= 0) values[Z(y)] = 1.0;
  }
  return values;
}

std::vector<int32_t> Extract(const ReducedIlp& ilp, const std::vector<double>& values) {
  std::vector<int32_t> x(ilp.choice.size(), 0);
  for (size_t r = 0; r < x.size(); ++r)
    for (size_t s = 0; s < ilp.choice[r].size(); ++s)
      if (values[Z(ilp.choice[r][s].index)] > values[Z(ilp.choice[r][Z(x[r])].index)]) x[r] = static_cast<int32_t>(s);
  return x;
}

// Segments where the usage of x exceeds `fraction` of the limit, fullest first, at most `count`;
// only segments where some term starts or the base rises (the usage rises nowhere else).
std::vector<int32_t> FullSegments(const ReducedProblem& p, const std::vector<int32_t>& x, double fraction, size_t count,
                                  const std::vector<uint8_t>& rises) {
  const std::vector<int64_t> usage = ReducedUsage(p, x);
  std::vector<int32_t> full;
  for (size_t k = 0; k < usage.size(); ++k)
    if (rises[k] && static_cast<double>(usage[k]) > fraction * static_cast<double>(p.usage_limit))
      full.push_back(static_cast<int32_t>(k));
  std::stable_sort(full.begin(), full.end(), [&](int32_t a, int32_t b) { return usage[Z(a)] > usage[Z(b)]; });
  if (full.size() > count) full.resize(count);
  return full;
}

std::vector<uint8_t> RisingSegments(const ReducedProblem& p) {
  std::vector<uint8_t> rises(p.base_usage.size(), 0);
  for (size_t k = 0; k < rises.size(); ++k) rises[k] = k == 0 || p.base_usage[k] > p.base_usage[k - 1];
  for (const ReducedNode& node : p.nodes)
    for (const UsageTerm& t : node.terms) rises[Z(t.first)] = 1;
  return rises;
}

}  // namespace

int64_t ModelSizeForIlp(const ReducedProblem& p) {
  int64_t size = 0;
  for (const ReducedNode& node : p.nodes) size += node.strategies();
  for (const ReducedEdge& e : p.edges)
    size += std::count_if(e.cost.begin(), e.cost.end(), [](int64_t c) { return !Forbidden(c); });
  return size;
}

std::optional<ExactResult> EnumerateReduced(const ReducedProblem& problem, int64_t max_assignments) {
  double count = 1.0;
  for (const ReducedNode& node : problem.nodes) count *= node.strategies();
  if (count > static_cast<double>(max_assignments)) return std::nullopt;
  Enumerator e{problem, std::vector<int64_t>(problem.nodes.size() + 1, 0), std::vector<int32_t>(problem.nodes.size(), 0), {}};
  for (size_t i = problem.nodes.size(); i-- > 0;)
    e.bound[i] = ir::AddCost(e.bound[i + 1], *std::min_element(problem.nodes[i].cost.begin(), problem.nodes[i].cost.end()));
  e.Search(0, problem.constant_cost);
  e.best.optimal = true;
  e.best.lower_bound = e.best.x.empty() ? 0.0 : static_cast<double>(e.best.cost);
  return e.best;
}

std::optional<ExactResult> SolveReducedIlp(const ReducedProblem& problem, const std::vector<int32_t>& warm,
                                           const ReducedIlpOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (ModelSizeForIlp(problem) > options.max_variables) return std::nullopt;
  ReducedIlp ilp;
  AddChoicesAndEdges(problem, ilp);
  const std::vector<uint8_t> rises = RisingSegments(problem);
  if (!warm.empty())
    for (int32_t k : FullSegments(problem, warm, 0.97, 200, rises)) AddUsageRow(problem, ilp, k);
  ExactResult result;
  std::vector<int32_t> last;  // CBC's last answer, over the limit at the rows added after it
  for (int round = 0; round != options.max_rounds; ++round) {
    milp::SolveOptions o;
    o.time_limit_seconds = options.time_limit_seconds - SecondsSince(start);
    if (o.time_limit_seconds <= 0.05) break;
    o.relative_gap = options.relative_gap;
    o.threads = options.threads;
    o.relax_integrality = options.relax;
    if (!warm.empty()) o.warm_start = Assignment(problem, ilp, warm);
    Result<milp::SolveResult> solved = milp::Solve(ilp.model, o);
    if (!solved) return std::nullopt;
    result.lower_bound = solved->best_bound + static_cast<double>(problem.constant_cost);
    if (solved->termination == milp::Termination::kInfeasible) {
      result.optimal = true;
      return result;
    }
    if (!solved->has_solution() || options.relax) break;
    std::vector<int32_t> x = Extract(ilp, solved->values);
    const std::vector<int32_t> over = FullSegments(problem, x, 1.0, 50, rises);
    if (over.empty()) {
      result.x = std::move(x);
      result.cost = ReducedCost(problem, result.x);
      result.optimal = solved->termination == milp::Termination::kOptimal;
      return result;
    }
    for (int32_t k : over) AddUsageRow(problem, ilp, k);
    last = std::move(x);
  }
  result.overflowing = std::move(last);  // only here: no answer fitted before the time or the rounds ran out
  return result;
}

}  // namespace kiwi::solve::sharding
