#pragma once
// Brute-force optimal rematerialization for graphs of at most 8 nodes, written apart from the MILP (no
// R/S/FREE/U, no StageGraph): it enumerates schedules as compute/free steps in the simulator's
// semantics (a compute needs its inputs resident and itself not resident; the peak is read right after
// each compute; persistent tensors are never freed) and frees every tensor as early as possible.
//  - BruteForceStages: frontier-advancing stage schedules (Checkmate's space): stage t recomputes any
//    subset of the earlier nodes in order, computes order[t] for the first time, and keeps any subset
//    of what is resident for the next stage. Dynamic program over (stage, kept set), enumerating
//    (recompute set, keep set) per stage. The MILP's optimum must equal it.
//  - BruteForceAnySchedule: every schedule whose first computations follow problem.order (recomputations
//    in any order, any number of times). Dijkstra over (resident set, next first computation). A lower
//    bound on the stage-form optimum.
// Also: random DAGs for tests (seeded).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <queue>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kiwi/ir/graph.h"
#include "kiwi/plan/plan.h"
#include "kiwi/solve/remat/problem.h"

namespace kiwi::solve::remat::testing {

struct BruteForceResult {
  bool feasible = false;
  double cost = 0.0;
  std::vector<plan::Step> schedule;  // by node id; replays in the simulator with the same cost
};

namespace detail {

using Mask = uint32_t;

// The problem by position: input masks, sizes, costs.
struct Positions {
  int n = 0;
  std::vector<Mask> inputs;
  std::vector<int64_t> memory;
  std::vector<double> cost;
  Mask persistent = 0;
  std::vector<ir::NodeId> node;

  explicit Positions(const RematProblem& p) : n(p.size()), node(p.order) {
    for (int k = 0; k < n; ++k) {
      const ir::NodeId v = p.order[static_cast<size_t>(k)];
      Mask in = 0;
      for (ir::NodeId u : p.graph->node(v).inputs) in |= Mask{1} << p.position[static_cast<size_t>(u)];
      inputs.push_back(in);
      memory.push_back(p.memory[static_cast<size_t>(v)]);
      cost.push_back(p.cost[static_cast<size_t>(v)]);
      if (p.persistent[static_cast<size_t>(v)]) persistent |= Mask{1} << k;
    }
  }
  int64_t Bytes(Mask m) const {
    int64_t b = 0;
    for (int k = 0; k < n; ++k)
      if (m >> k & 1) b += memory[static_cast<size_t>(k)];
    return b;
  }
};

// One stage: stored set `s`, recomputations `r` (positions < t), first computation t, kept set `keep`.
// Returns false if a compute lacks an input or exceeds the budget; else appends the steps.
inline bool RunStage(const Positions& p, int t, Mask s, Mask r, Mask keep, int64_t budget,
                     std::vector<std::pair<bool, int>>& steps) {
  const Mask computed = r | Mask{1} << t;
  Mask resident = s;
  auto free_unneeded = [&](int after) {  // frees what no later compute of the stage reads and keep lacks
    Mask later_reads = 0;
    for (int c = after + 1; c <= t; ++c)
      if (computed >> c & 1) later_reads |= p.inputs[static_cast<size_t>(c)];
    for (int i = 0; i <= t; ++i) {
      const Mask bit = Mask{1} << i;
      if ((resident & bit) && !(keep & bit) && !(p.persistent & bit) && !(later_reads & bit)) {
        resident &= ~bit;
        steps.emplace_back(false, i);
      }
    }
  };
  free_unneeded(-1);
  for (int c = 0; c <= t; ++c) {
    if (!(computed >> c & 1)) continue;
    if ((p.inputs[static_cast<size_t>(c)] & resident) != p.inputs[static_cast<size_t>(c)]) return false;
    resident |= Mask{1} << c;
    if (p.Bytes(resident) > budget) return false;
    steps.emplace_back(true, c);
    free_unneeded(c);
  }
  return true;
}

inline std::vector<plan::Step> ToSteps(const Positions& p, const std::vector<std::pair<bool, int>>& steps) {
  std::vector<plan::Step> out;
  for (const auto& [compute, k] : steps)
    out.push_back({compute ? plan::StepKind::kCompute : plan::StepKind::kFree, p.node[static_cast<size_t>(k)]});
  return out;
}

}  // namespace detail

inline BruteForceResult BruteForceStages(const RematProblem& problem) {
  const detail::Positions p(problem);
  struct State {
    double cost = 0.0;
    detail::Mask prev = 0;
    std::vector<std::pair<bool, int>> steps;  // of the stage that led here
  };
  std::vector<std::map<detail::Mask, State>> stages(static_cast<size_t>(p.n) + 1);
  stages[0][0] = State{};
  for (int t = 0; t < p.n; ++t) {
    for (const auto& [s, state] : stages[static_cast<size_t>(t)]) {
      const detail::Mask below = (detail::Mask{1} << t) - 1;
      const detail::Mask candidates = below & ~s & ~p.persistent;
      for (detail::Mask r = candidates;; r = (r - 1) & candidates) {  // every subset of candidates
        const detail::Mask keepable = s | r | detail::Mask{1} << t;
        for (detail::Mask keep = keepable;; keep = (keep - 1) & keepable) {
          std::vector<std::pair<bool, int>> steps;
          if ((keep & p.persistent) == (keepable & p.persistent) &&
              detail::RunStage(p, t, s, r, keep, problem.budget, steps)) {
            double cost = state.cost;
            for (int c = 0; c <= t; ++c)
              if ((r | detail::Mask{1} << t) >> c & 1) cost += p.cost[static_cast<size_t>(c)];
            auto [it, fresh] = stages[static_cast<size_t>(t) + 1].try_emplace(keep);
            if (fresh || cost < it->second.cost) it->second = State{cost, s, std::move(steps)};
          }
          if (keep == 0) break;
        }
        if (r == 0) break;
      }
    }
  }
  BruteForceResult best;
  const std::map<detail::Mask, State>& last = stages[static_cast<size_t>(p.n)];
  detail::Mask at = 0;
  for (const auto& [keep, state] : last)
    if (!best.feasible || state.cost < best.cost) best.feasible = true, best.cost = state.cost, at = keep;
  if (!best.feasible) return best;
  std::vector<std::vector<std::pair<bool, int>>> per_stage;
  for (int t = p.n; t > 0; --t) {
    const State& st = stages[static_cast<size_t>(t)].at(at);
    per_stage.push_back(st.steps);
    at = st.prev;
  }
  for (auto it = per_stage.rbegin(); it != per_stage.rend(); ++it)
    for (const plan::Step& s : detail::ToSteps(p, *it)) best.schedule.push_back(s);
  return best;
}

inline BruteForceResult BruteForceAnySchedule(const RematProblem& problem) {
  const detail::Positions p(problem);
  using Key = std::pair<detail::Mask, int>;  // (resident set, next first computation)
  struct Prev {
    Key from;
    bool compute = true;
    int position = 0;
  };
  std::map<Key, double> dist;
  std::map<Key, Prev> prev;
  using Item = std::tuple<double, detail::Mask, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
  dist[{0, 0}] = 0.0;
  queue.emplace(0.0, 0, 0);
  auto relax = [&](const Key& from, const Key& to, double cost, bool compute, int position) {
    auto it = dist.find(to);
    if (it != dist.end() && it->second <= cost) return;
    dist[to] = cost;
    prev[to] = Prev{from, compute, position};
    queue.emplace(cost, to.first, to.second);
  };
  while (!queue.empty()) {
    const auto [d, mask, f] = queue.top();
    queue.pop();
    const Key key{mask, f};
    if (d > dist[key]) continue;
    if (f == p.n) {  // the first goal popped is optimal
      BruteForceResult best{true, d, {}};
      std::vector<plan::Step> rev;
      for (Key at = key; at != Key{0, 0}; at = prev[at].from)
        rev.push_back({prev[at].compute ? plan::StepKind::kCompute : plan::StepKind::kFree,
                       p.node[static_cast<size_t>(prev[at].position)]});
      best.schedule.assign(rev.rbegin(), rev.rend());
      return best;
    }
    for (int k = 0; k <= f && k < p.n; ++k) {
      const detail::Mask bit = detail::Mask{1} << k;
      if (mask & bit) {
        if (!(p.persistent & bit)) relax(key, {mask & ~bit, f}, d, false, k);
        continue;
      }
      if (k < f && (p.persistent & bit)) continue;  // persistent: computed once
      if ((p.inputs[static_cast<size_t>(k)] & mask) != p.inputs[static_cast<size_t>(k)]) continue;
      if (p.Bytes(mask | bit) > problem.budget) continue;
      relax(key, {mask | bit, k == f ? f + 1 : f}, d + p.cost[static_cast<size_t>(k)], true, k);
    }
  }
  return {};
}

// A random DAG of n <= 8 nodes with integer costs and sizes. Node ids are a random permutation of the
// positions (so the graph has an explicit order). kind: 0 = any DAG, 1 = training-like (a forward chain
// and a backward chain reading the mirrored forward nodes). With `parameter`, position 0 is a
// persistent parameter read by one or two later nodes; with `input`, position 0 is a zero-cost input.
struct RandomGraphSpec {
  uint64_t seed = 1;
  int n = 6;
  int kind = 0;
  bool parameter = false;
  bool input = false;
};

inline ir::Graph RandomRematGraph(const RandomGraphSpec& spec) {
  std::mt19937_64 rng(spec.seed);
  auto uniform = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
  const int n = spec.n;
  std::vector<std::vector<int>> inputs(static_cast<size_t>(n));  // by position
  const int first = spec.parameter || spec.input ? 1 : 0;
  const int forward = first + (n - first + 1) / 2;
  for (int j = first + 1; j < n; ++j) {
    std::vector<int>& in = inputs[static_cast<size_t>(j)];
    if (spec.kind == 1) {
      in.push_back(j - 1);
      const int mirror = 2 * forward - 1 - j;
      if (j >= forward && mirror >= first && mirror != j - 1) in.push_back(mirror);
    } else {
      if (uniform(0, 9) < 8) in.push_back(j - 1);
      for (int i = first; i < j - 1; ++i)
        if (uniform(0, 9) < 3) in.push_back(i);
    }
  }
  if (first == 1)
    for (int j = 1; j < n; ++j)
      if (j == 1 || uniform(0, 9) < 2) inputs[static_cast<size_t>(j)].push_back(0);
  std::vector<ir::NodeId> id_of(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) id_of[static_cast<size_t>(k)] = k;
  std::shuffle(id_of.begin(), id_of.end(), rng);
  std::vector<ir::Node> nodes(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    ir::Node& node = nodes[static_cast<size_t>(id_of[static_cast<size_t>(k)])];
    node.name = "p" + std::to_string(k);
    node.kind = k == 0 && spec.parameter ? ir::OpKind::kParameter : k == 0 && spec.input ? ir::OpKind::kInput : ir::OpKind::kOpaque;
    node.output = {ir::DType::kU8, {uniform(1, 8)}};
    node.measured_cost = uniform(1, 9);
    for (int i : inputs[static_cast<size_t>(k)]) node.inputs.push_back(id_of[static_cast<size_t>(i)]);
  }
  ir::Graph g("random" + std::to_string(spec.seed));
  for (ir::Node& node : nodes) g.Add(std::move(node));
  std::vector<ir::NodeId> order(id_of.begin(), id_of.end());
  g.set_order(std::move(order));
  return g;
}

}  // namespace kiwi::solve::remat::testing
