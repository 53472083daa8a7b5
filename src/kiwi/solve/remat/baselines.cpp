#include "kiwi/solve/remat/baselines.h"
#include "kiwi/util/elapsed.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <string_view>

namespace kiwi::solve::remat {
namespace {

std::vector<bool> DropAll(const KeepSetScheduler& ks, const std::vector<ir::NodeId>& acts) {
  std::vector<bool> keep(static_cast<size_t>(ks.problem().graph->size()), true);
  for (ir::NodeId v : acts) keep[static_cast<size_t>(v)] = false;
  return keep;
}

// Undirected adjacency of the articulation-point graph: activations with inputs, plus source and sink.
struct ApGraph {
  std::vector<ir::NodeId> nodes;          // vertex -> node id (the last two vertices are virtual)
  std::vector<std::vector<int32_t>> adj;
};

void Connect(ApGraph& g, int32_t a, int32_t b) {
  g.adj[static_cast<size_t>(a)].push_back(b);
  g.adj[static_cast<size_t>(b)].push_back(a);
}

ApGraph BuildApGraph(const KeepSetScheduler& ks) {
  const RematProblem& p = ks.problem();
  std::vector<int32_t> vertex(static_cast<size_t>(p.graph->size()), -1);
  ApGraph g;
  for (ir::NodeId v : ForwardActivations(ks))
    if (!p.graph->node(v).inputs.empty()) {
      vertex[static_cast<size_t>(v)] = static_cast<int32_t>(g.nodes.size());
      g.nodes.push_back(v);
    }
  const auto source = static_cast<int32_t>(g.nodes.size());
  const int32_t sink = source + 1;
  g.adj.resize(g.nodes.size() + 2);
  for (size_t a = 0; a < g.nodes.size(); ++a) {
    bool has_input = false, has_consumer = false;
    for (ir::NodeId x : p.graph->node(g.nodes[a]).inputs) {
      const int32_t b = vertex[static_cast<size_t>(x)];
      if (b < 0) continue;
      has_input = true;
      Connect(g, static_cast<int32_t>(a), b);
    }
    for (ir::NodeId c : p.consumers[static_cast<size_t>(g.nodes[a])])
      has_consumer |= vertex[static_cast<size_t>(c)] >= 0;
    if (!has_input) Connect(g, static_cast<int32_t>(a), source);
    if (!has_consumer) Connect(g, static_cast<int32_t>(a), sink);
  }
  return g;
}

// Tarjan's articulation points, iterative, from the virtual source (the last but one vertex).
std::vector<uint8_t> TarjanArticulation(const ApGraph& g) {
  const size_t n = g.adj.size();
  std::vector<int32_t> disc(n, -1), low(n, 0), parent(n, -1), children(n, 0);
  std::vector<size_t> next(n, 0);
  std::vector<uint8_t> is_ap(n, 0);
  const auto root = static_cast<int32_t>(n - 2);
  int32_t timer = 0;
  std::vector<int32_t> stack = {root};
  disc[static_cast<size_t>(root)] = low[static_cast<size_t>(root)] = timer++;
  while (!stack.empty()) {
    const auto v = static_cast<size_t>(stack.back());
    if (next[v] < g.adj[v].size()) {
      const int32_t w = g.adj[v][next[v]++];
      const auto wi = static_cast<size_t>(w);
      if (disc[wi] < 0) {
        parent[wi] = static_cast<int32_t>(v);
        disc[wi] = low[wi] = timer++;
        ++children[v];
        stack.push_back(w);
      } else if (w != parent[v]) {
        low[v] = std::min(low[v], disc[wi]);
      }
      continue;
    }
    stack.pop_back();
    const int32_t p = parent[v];
    if (p < 0) continue;
    const auto pi = static_cast<size_t>(p);
    low[pi] = std::min(low[pi], low[v]);
    if (p != root && low[v] >= disc[pi]) is_ap[pi] = 1;
  }
  if (children[static_cast<size_t>(root)] > 1) is_ap[static_cast<size_t>(root)] = 1;
  return is_ap;
}

// Boundaries for `segments` segments of `acts`: the candidates nearest to each i * |acts| / segments.
std::vector<ir::NodeId> SegmentBoundaries(const std::vector<ir::NodeId>& acts, const std::vector<size_t>& candidates,
                                          size_t segments) {
  std::vector<ir::NodeId> chosen;
  if (candidates.empty()) return chosen;
  for (size_t i = 1; i < segments; ++i) {
    const size_t target = i * acts.size() / segments - 1;  // last node of segment i
    auto it = std::lower_bound(candidates.begin(), candidates.end(), target);
    if (it == candidates.end() || (it != candidates.begin() && target - *(it - 1) < *it - target)) --it;
    const ir::NodeId v = acts[*it];
    if (chosen.empty() || chosen.back() != v) chosen.push_back(v);
  }
  return chosen;
}

std::vector<size_t> IndicesIn(const std::vector<ir::NodeId>& acts, const std::vector<ir::NodeId>& subset) {
  std::vector<size_t> index;
  size_t k = 0;
  for (size_t i = 0; i < acts.size() && k < subset.size(); ++i)
    if (acts[i] == subset[k]) index.push_back(i), ++k;
  return index;
}

std::vector<std::string_view> NameTokens(std::string_view name) {
  std::vector<std::string_view> tokens;
  size_t start = 0;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i < name.size() && name[i] != '_' && name[i] != '.' && name[i] != '/') continue;
    std::string_view t = name.substr(start, i - start);
    while (!t.empty() && t.back() >= '0' && t.back() <= '9') t.remove_suffix(1);
    if (!t.empty()) tokens.push_back(t);
    start = i + 1;
  }
  return tokens;
}

bool IsKind(const ir::Node& n, ir::OpKind kind) { return n.kind == kind; }

// Megatron's attention core around one softmax: the QK^T batch_matmul (and a score-bias add) feeding
// it, and the dropout (mask and product) applied to its output.
void MarkAttentionCore(const RematProblem& p, ir::NodeId softmax, std::vector<bool>& core) {
  const ir::Graph& g = *p.graph;
  core[static_cast<size_t>(softmax)] = true;
  for (ir::NodeId x : g.node(softmax).inputs) {
    const ir::Node& in = g.node(x);
    if (IsKind(in, ir::OpKind::kBatchMatmul)) core[static_cast<size_t>(x)] = true;
    if (!IsKind(in, ir::OpKind::kElementwise)) continue;
    core[static_cast<size_t>(x)] = true;  // scores + bias
    for (ir::NodeId y : in.inputs)
      if (IsKind(g.node(y), ir::OpKind::kBatchMatmul)) core[static_cast<size_t>(y)] = true;
  }
  for (ir::NodeId c : p.consumers[static_cast<size_t>(softmax)]) {
    const ir::Node& mul = g.node(c);
    if (!IsKind(mul, ir::OpKind::kElementwise) || mul.op != "mul") continue;
    for (ir::NodeId m : mul.inputs)
      if (IsKind(g.node(m), ir::OpKind::kRandom)) core[static_cast<size_t>(m)] = core[static_cast<size_t>(c)] = true;
  }
}

Result<RematResult> Finish(const RematProblem& problem, const cost::CostModel& cost_model,
                           std::vector<plan::Step> steps, RematResult partial) {
  Result<RematResult> r = FinishResult(problem, cost_model, std::move(steps), std::move(partial));
  if (!r) return r;
  if (!r->feasible) {
    r->schedule.clear();
    r->note += fmt::format("{}peak {} B exceeds the budget {} B", r->note.empty() ? "" : "; ", r->peak_memory,
                           problem.budget);
  }
  return r;
}

// Better = fits the budget, then cheaper, then smaller peak; without a fit, smaller peak.
bool Better(const KeepSetEvaluation& a, const KeepSetEvaluation& b, int64_t budget) {
  const bool fa = a.peak <= budget, fb = b.peak <= budget;
  if (fa != fb) return fa;
  if (fa && a.cost != b.cost) return a.cost < b.cost;
  return a.peak < b.peak;
}

}  // namespace

std::vector<ir::NodeId> ForwardActivations(const KeepSetScheduler& ks) {
  const RematProblem& p = ks.problem();
  std::vector<ir::NodeId> acts;
  for (int32_t t = 0; t < ks.forward_boundary(); ++t)
    if (ks.Cuttable(p.order[static_cast<size_t>(t)])) acts.push_back(p.order[static_cast<size_t>(t)]);
  return acts;
}

std::vector<ir::NodeId> ForwardArticulationPoints(const KeepSetScheduler& ks) {
  const ApGraph g = BuildApGraph(ks);
  if (g.nodes.empty()) return {};
  const std::vector<uint8_t> is_ap = TarjanArticulation(g);
  std::vector<ir::NodeId> points;
  for (size_t a = 0; a < g.nodes.size(); ++a)
    if (is_ap[a]) points.push_back(g.nodes[a]);
  const std::vector<int32_t>& position = ks.problem().position;
  std::sort(points.begin(), points.end(), [&](ir::NodeId x, ir::NodeId y) {
    return position[static_cast<size_t>(x)] < position[static_cast<size_t>(y)];
  });
  return points;
}

std::vector<bool> SqrtNKeep(const KeepSetScheduler& ks, bool articulation_points_only) {
  const std::vector<ir::NodeId> acts = ForwardActivations(ks);
  std::vector<bool> keep = DropAll(ks, acts);
  std::vector<size_t> candidates;
  if (articulation_points_only) {
    candidates = IndicesIn(acts, ForwardArticulationPoints(ks));
  } else {
    for (size_t i = 0; i < acts.size(); ++i) candidates.push_back(i);
  }
  // Chen et al. §4.1: sqrt(n) segments of sqrt(n) nodes minimize (segments + segment length).
  const auto segments = static_cast<size_t>(std::max(1.0, std::round(std::sqrt(static_cast<double>(acts.size())))));
  for (ir::NodeId v : SegmentBoundaries(acts, candidates, segments)) keep[static_cast<size_t>(v)] = true;
  return keep;
}

std::vector<bool> ChenGreedyKeep(const KeepSetScheduler& ks, int64_t segment_bytes, bool articulation_points_only) {
  const std::vector<ir::NodeId> acts = ForwardActivations(ks);
  std::vector<bool> keep = DropAll(ks, acts);
  std::vector<bool> candidate(keep.size(), !articulation_points_only);
  if (articulation_points_only)
    for (ir::NodeId v : ForwardArticulationPoints(ks)) candidate[static_cast<size_t>(v)] = true;
  int64_t running = 0;
  for (ir::NodeId v : acts) {
    running += ks.problem().memory[static_cast<size_t>(v)];
    if (candidate[static_cast<size_t>(v)] && running > segment_bytes) {
      keep[static_cast<size_t>(v)] = true;
      running = 0;
    }
  }
  return keep;
}

GreedyChoice SearchChenGreedy(KeepSetScheduler& ks, bool articulation_points_only) {
  const RematProblem& p = ks.problem();
  int64_t smallest = 0, total = 0;
  for (ir::NodeId v : ForwardActivations(ks)) {
    const int64_t m = p.memory[static_cast<size_t>(v)];
    smallest = smallest == 0 ? m : std::min(smallest, m);
    total += m;
  }
  // A geometric grid of thresholds from the smallest activation to all of them (Chen et al. search B).
  constexpr int kThresholds = 96;
  GreedyChoice best;
  const double lo = static_cast<double>(std::max<int64_t>(smallest, 1)) / 2, hi = static_cast<double>(total) + 1;
  std::vector<bool> previous;
  for (int j = 0; j < kThresholds; ++j) {
    const auto bytes = static_cast<int64_t>(lo * std::pow(hi / lo, j / static_cast<double>(kThresholds - 1)));
    std::vector<bool> keep = ChenGreedyKeep(ks, bytes, articulation_points_only);
    if (keep == previous) continue;
    const KeepSetEvaluation e = ks.Evaluate(ks.FromKeep(keep), p.budget);
    if (best.keep.empty() || Better(e, best.eval, p.budget)) best = {keep, bytes, e};
    previous = std::move(keep);
  }
  if (best.keep.empty()) best.keep = std::vector<bool>(static_cast<size_t>(p.graph->size()), true);
  return best;
}

bool OpaqueNameIsDot(const std::string& name) {
  static constexpr std::array<std::string_view, 9> kDots = {"conv", "dense", "matmul", "fc", "linear",
                                                            "gemm", "predictions", "dw", "pw"};
  static constexpr std::array<std::string_view, 13> kOthers = {"bn",   "relu", "pad",     "pool",    "add",
                                                               "out",  "act",  "norm",    "flatten", "softmax",
                                                               "dropout", "concat", "reshape"};
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  bool dot = false;
  for (std::string_view t : NameTokens(lower)) {
    if (std::find(kDots.begin(), kDots.end(), t) != kDots.end()) dot = true;
    else if (dot && std::find(kOthers.begin(), kOthers.end(), t) != kOthers.end()) return false;
  }
  return dot;
}

std::vector<bool> CheckpointDotsKeep(const KeepSetScheduler& ks) {
  const std::vector<ir::NodeId> acts = ForwardActivations(ks);
  std::vector<bool> keep = DropAll(ks, acts);
  for (ir::NodeId v : acts) {
    const ir::Node& n = ks.problem().graph->node(v);
    const bool dot = n.kind == ir::OpKind::kMatmul || n.kind == ir::OpKind::kBatchMatmul ||
                     n.kind == ir::OpKind::kConv || (n.kind == ir::OpKind::kOpaque && OpaqueNameIsDot(n.name));
    keep[static_cast<size_t>(v)] = dot;
  }
  return keep;
}

std::vector<bool> MegatronSelectiveKeep(const KeepSetScheduler& ks) {
  const RematProblem& p = ks.problem();
  std::vector<bool> core(static_cast<size_t>(p.graph->size()), false);
  for (ir::NodeId v : ForwardActivations(ks)) {
    const ir::Node& n = p.graph->node(v);
    if (n.kind == ir::OpKind::kSoftmax && n.scope.find("attn") != std::string::npos) MarkAttentionCore(p, v, core);
  }
  std::vector<bool> keep(core.size(), true);
  for (ir::NodeId v : ForwardActivations(ks)) keep[static_cast<size_t>(v)] = !core[static_cast<size_t>(v)];
  return keep;
}

Result<RematResult> FinishKeepSet(KeepSetScheduler& ks, const cost::CostModel& cost_model, const KeepPolicy& policy,
                                  RematResult partial) {
  return Finish(ks.problem(), cost_model, ks.Schedule(policy), std::move(partial));
}

Result<RematResult> SolveCheckpointAll(const RematProblem& problem, const cost::CostModel& cost_model) {
  const auto start = std::chrono::steady_clock::now();
  RematResult partial;
  partial.solver = "checkpoint-all";
  partial.solve_seconds = SecondsSince(start);
  return Finish(problem, cost_model, plan::CheckpointAllSchedule(*problem.graph), std::move(partial));
}

Result<RematResult> SolveSqrtN(const RematProblem& problem, const cost::CostModel& cost_model) {
  const auto start = std::chrono::steady_clock::now();
  KeepSetScheduler ks(problem);
  const size_t points = ForwardArticulationPoints(ks).size();
  const bool use_points = points > 0;
  const std::vector<bool> keep = SqrtNKeep(ks, use_points);
  const auto kept = static_cast<size_t>(std::count(keep.begin(), keep.end(), false));
  RematResult partial;
  partial.solver = "sqrtn";
  partial.note = use_points ? fmt::format("boundaries at articulation points ({} of them)", points)
                            : "no articulation points: boundaries every sqrt(n) nodes";
  partial.note += fmt::format(", {} forward tensors recomputed", kept);
  partial.solve_seconds = SecondsSince(start);
  return FinishKeepSet(ks, cost_model, ks.FromKeep(keep), std::move(partial));
}

Result<RematResult> SolveChenGreedy(const RematProblem& problem, const cost::CostModel& cost_model,
                                    std::optional<bool> articulation_points_only) {
  const auto start = std::chrono::steady_clock::now();
  KeepSetScheduler ks(problem);
  const bool have_points = !ForwardArticulationPoints(ks).empty();
  GreedyChoice best;
  bool best_ap = false;
  for (bool ap : {false, true}) {
    if (articulation_points_only && *articulation_points_only != ap) continue;
    if (ap && !have_points && !articulation_points_only) continue;
    GreedyChoice c = SearchChenGreedy(ks, ap);
    if (best.keep.empty() || Better(c.eval, best.eval, problem.budget)) best = std::move(c), best_ap = ap;
  }
  RematResult partial;
  partial.solver = "greedy";
  partial.note = fmt::format("{}segment threshold {} B", best_ap ? "articulation points, " : "", best.segment_bytes);
  partial.solve_seconds = SecondsSince(start);
  return FinishKeepSet(ks, cost_model, ks.FromKeep(best.keep), std::move(partial));
}

Result<RematResult> SolveCheckpointDots(const RematProblem& problem, const cost::CostModel& cost_model) {
  const auto start = std::chrono::steady_clock::now();
  KeepSetScheduler ks(problem);
  RematResult partial;
  partial.solver = "ckpt-dots";
  const KeepPolicy cuts = ks.FromKeep(CheckpointDotsKeep(ks));
  partial.solve_seconds = SecondsSince(start);
  return FinishKeepSet(ks, cost_model, cuts, std::move(partial));
}

Result<RematResult> SolveMegatronSelective(const RematProblem& problem, const cost::CostModel& cost_model) {
  const auto start = std::chrono::steady_clock::now();
  KeepSetScheduler ks(problem);
  const std::vector<bool> keep = MegatronSelectiveKeep(ks);
  RematResult partial;
  partial.solver = "megatron-selective";
  if (std::all_of(keep.begin(), keep.end(), [](bool k) { return k; })) {
    partial.note = "no attention core: checkpoint-all";
    partial.solve_seconds = SecondsSince(start);
    return Finish(problem, cost_model, plan::CheckpointAllSchedule(*problem.graph), std::move(partial));
  }
  partial.solve_seconds = SecondsSince(start);
  return FinishKeepSet(ks, cost_model, ks.FromKeep(keep), std::move(partial));
}

Result<RematResult> SolveBaseline(const RematProblem& problem, const cost::CostModel& cost_model, SolverKind kind,
                                  const RematOptions& /*options*/) {
  switch (kind) {
    case SolverKind::kCheckpointAll: return SolveCheckpointAll(problem, cost_model);
    case SolverKind::kSqrtN: return SolveSqrtN(problem, cost_model);
    case SolverKind::kGreedy: return SolveChenGreedy(problem, cost_model);
    case SolverKind::kCkptDots: return SolveCheckpointDots(problem, cost_model);
    case SolverKind::kMegatronSelective: return SolveMegatronSelective(problem, cost_model);
    default: return Internal(fmt::format("SolveBaseline: {} is not a baseline", static_cast<int>(kind)));
  }
}

}  // namespace kiwi::solve::remat
