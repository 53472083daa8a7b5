// Budget sweeps for the KIWI experiments (sweep.h).
#include "kiwi/solve/joint/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "kiwi/models/presets.h"
#include "kiwi/solve/joint/kiwi.h"

namespace kiwi::solve::joint {
namespace {

constexpr std::array<JointMethod, 3> kBaselines = {JointMethod::kAlpa, JointMethod::kCkptDots,
                                                   JointMethod::kMegatronSelective};

bool Has(const SweepConfig& c, JointMethod m) { return std::find(c.methods.begin(), c.methods.end(), m) != c.methods.end(); }

void Say(const SweepConfig& c, const std::string& line) {
  if (c.progress) c.progress(line);
}

// What every point shares: the graph, the cost model, the mesh, each method's unconstrained optimum.
struct Context {
  const SweepConfig& config;
  const ir::Graph& graph;
  cost::CostModel cost_model;
  ir::DeviceMesh mesh;
  std::map<JointMethod, JointResult> unconstrained;
};

Result<Context> MakeContext(const SweepConfig& c, const ir::Graph& graph) {
  Result<cost::Cluster> cluster = cost::ClusterPreset(c.cluster);
  if (!cluster) return cluster.error();
  if (!(c.bandwidth_scale > 0.0)) return BadInput(fmt::format("bandwidth scale: must be positive, got {}", c.bandwidth_scale));
  cluster->intra_node.bandwidth *= c.bandwidth_scale;
  cluster->inter_node.bandwidth *= c.bandwidth_scale;
  Result<ir::DeviceMesh> mesh = cluster->MakeMesh(c.mesh);
  if (!mesh) return mesh.error();
  return Context{c, graph, cost::CostModel(cluster->device), *std::move(mesh), {}};
}

JointSolveOptions Options(const SweepConfig& c) {
  JointSolveOptions o;
  o.time_limit_seconds = c.time_limit_seconds;
  o.relative_gap = c.relative_gap;
  o.threads = c.threads;
  return o;
}

double MeanShards(const JointResult& r, const ir::Graph& g, const ir::DeviceMesh& mesh) {
  double total = 0.0;
  int counted = 0;
  for (const auto& [v, s] : r.plan.shardings) {
    if (g.node(v).flops <= 0.0) continue;
    total += mesh.GroupSize(s.output.UsedAxes() | s.reduce_axes);
    ++counted;
  }
  return counted > 0 ? total / counted : 1.0;
}

SweepEntry Entry(const JointResult& r, const Context& ctx, double reference) {
  SweepEntry e;
  e.feasible = r.feasible;
  e.note = r.note;
  e.solve_seconds = r.solve_seconds;
  if (!r.feasible) return e;
  e.seconds = r.seconds();
  e.normalized = reference > 0.0 ? e.seconds / reference : 0.0;
  e.peak = r.sim.peak_memory_bytes;
  e.recompute_seconds = r.sim.time.recompute;
  e.communication_seconds = r.sim.time.communication + r.sim.time.resharding;
  e.recomputations = r.sim.recomputations;
  e.optimal = r.optimal;
  e.mean_shards = MeanShards(r, ctx.graph, ctx.mesh);
  e.from_portfolio = r.method == "kiwi" && !r.reduced_family;
  return e;
}

// Every method of the config at `budget`: the baselines first, then KIWI with them as its portfolio;
// each starts from its own decisions at the previous (smaller) budget, if any.
Result<std::map<JointMethod, JointResult>> SolveAll(const Context& ctx, int64_t budget,
                                                    const std::map<JointMethod, JointResult>* previous = nullptr) {
  auto hints = [&](JointMethod m, JointSolveOptions& o) {
    if (previous == nullptr) return;
    auto it = previous->find(m);
    if (it != previous->end() && it->second.feasible) o.hints.push_back(it->second.solution);
  };
  Result<JointProblem> p = MakeJointProblem(ctx.graph, ctx.cost_model, ctx.mesh, budget, {});
  if (!p) return p.error();
  std::map<JointMethod, JointResult> out;
  for (JointMethod m : ctx.config.methods) {
    if (m == JointMethod::kKiwi || m == JointMethod::kKiwiFull) continue;
    JointSolveOptions o = Options(ctx.config);
    auto it = ctx.unconstrained.find(m);
    if (it != ctx.unconstrained.end()) o.unconstrained = &it->second;
    hints(m, o);
    Say(ctx.config, fmt::format("{} at {:.3f} GB", JointMethodName(m), budget / 1e9));
    Result<JointResult> r = SolveJoint(*p, m, o);
    if (!r) return r.error();
    out.emplace(m, *std::move(r));
  }
  for (JointMethod m : {JointMethod::kKiwi, JointMethod::kKiwiFull}) {
    if (!Has(ctx.config, m)) continue;
    JointSolveOptions o = Options(ctx.config);
    for (const auto& [other, r] : out) o.portfolio.push_back(&r);
    auto alpa = ctx.unconstrained.find(JointMethod::kAlpa);
    if (alpa != ctx.unconstrained.end()) o.unconstrained = &alpa->second;
    hints(m, o);
    Say(ctx.config, fmt::format("{} at {:.3f} GB", JointMethodName(m), budget / 1e9));
    Result<JointResult> r = SolveJoint(*p, m, o);
    if (!r) return r.error();
    out.emplace(m, *std::move(r));
  }
  return out;
}

}  // namespace

std::string SweepMethodLabel(JointMethod m) {
  switch (m) {
    case JointMethod::kKiwi: return "KIWI";
    case JointMethod::kKiwiFull: return "KIWI (full)";
    case JointMethod::kAlpa: return "Alpa";
    case JointMethod::kCkptDots: return "ckpt-dots + Alpa";
    case JointMethod::kMegatronSelective: return "Megatron sel. + Alpa";
  }
  return "?";
}

Result<ir::Graph> SweepGraph(const SweepConfig& c) {
  models::ModelSpec spec;
  if (c.model == "mlp") {
    models::MlpConfig m;
    m.widths = c.mlp_widths;
    if (m.widths.empty()) m.widths.assign(static_cast<size_t>(c.layers) + 1, c.hidden);
    m.batch = c.batch;
    m.activation = c.activation;
    spec = {"mlp", m, {}};
    spec.training.optimizer = ir::Optimizer::kSgd;
    return models::BuildTrainingGraph(spec);
  }
  models::ModelOverrides o;
  o.layers = c.layers, o.hidden = c.hidden, o.heads = c.heads, o.seq = c.seq, o.batch = c.batch;
  o.dtype = ir::DType::kF32;  // KIWI §4.1: single precision
  Result<models::ModelSpec> loaded = models::LoadModel(c.model, o);
  if (!loaded) return loaded.error();
  if (auto* t = std::get_if<models::TransformerConfig>(&loaded->config)) t->embeddings = c.embeddings;
  return models::BuildTrainingGraph(*loaded);
}

Result<SweepPoint> RunBudgetPoint(const SweepConfig& config, const ir::Graph& graph, int64_t budget,
                                  double alpa_unlimited_seconds) {
  Result<Context> ctx = MakeContext(config, graph);
  if (!ctx) return ctx.error();
  Result<std::map<JointMethod, JointResult>> all = SolveAll(*ctx, budget);
  if (!all) return all.error();
  SweepPoint point{budget, {}};
  for (const auto& [m, r] : *all) point.entries.emplace(m, Entry(r, *ctx, alpa_unlimited_seconds));
  return point;
}

Result<Sweep> RunBudgetSweep(const SweepConfig& config) {
  Result<ir::Graph> graph = SweepGraph(config);
  if (!graph) return graph.error();
  Result<Context> ctx = MakeContext(config, *graph);
  if (!ctx) return ctx.error();
  Sweep sweep{config, graph->size(), 0.0, 0, {}, 0, {}};
  for (JointMethod m : kBaselines) {  // unconstrained optima, reused at every budget
    if (!Has(config, m) && m != JointMethod::kAlpa) continue;
    Result<JointProblem> p = MakeJointProblem(*graph, ctx->cost_model, ctx->mesh, int64_t{1} << 62, {});
    if (!p) return p.error();
    Result<JointResult> r = SolveJoint(*p, m, Options(config));
    if (!r) return r.error();
    ctx->unconstrained.emplace(m, *std::move(r));
  }
  const JointResult& alpa = ctx->unconstrained.at(JointMethod::kAlpa);
  sweep.alpa_unlimited_seconds = alpa.seconds();
  sweep.alpa_unlimited_peak = alpa.sim.peak_memory_bytes;
  Say(config, fmt::format("{} ops; Alpa without a limit: {:.6g} s at {:.3f} GB", sweep.ops, alpa.seconds(), alpa.sim.peak_memory_bytes / 1e9));
  Result<std::map<JointMethod, JointResult>> floor = SolveAll(*ctx, 0);  // each method's least budget
  if (!floor) return floor.error();
  Result<JointProblem> any = MakeJointProblem(*graph, ctx->cost_model, ctx->mesh, 0, {});
  if (!any) return any.error();
  Result<int64_t> reduced = SmallestReducedPeak(*any, Options(config));
  if (!reduced) return reduced.error();
  sweep.reduced_least = *reduced;
  std::set<int64_t> budgets;
  int64_t low = sweep.alpa_unlimited_peak;
  for (const auto& [m, r] : *floor) {
    sweep.smallest_budget[m] = r.smallest_known_budget;
    if (r.smallest_known_budget > 0) low = std::min(low, r.smallest_known_budget), budgets.insert(r.smallest_known_budget);
  }
  const int n = std::max(2, config.budget_points);
  for (int i = 0; i < n; ++i) budgets.insert(low + (sweep.alpa_unlimited_peak - low) * i / (n - 1));
  std::map<JointMethod, JointResult> previous;
  for (int64_t budget : budgets) {
    Result<std::map<JointMethod, JointResult>> all = SolveAll(*ctx, budget, &previous);
    if (!all) return all.error();
    previous = *all;
    SweepPoint point{budget, {}};
    for (const auto& [m, r] : *all) point.entries.emplace(m, Entry(r, *ctx, sweep.alpa_unlimited_seconds));
    Say(config, fmt::format("budget {:.3f} GB done", budget / 1e9));
    sweep.points.push_back(std::move(point));
  }
  return sweep;
}

std::map<JointMethod, double> LargestSpeedups(const Sweep& sweep, bool own_plans_only) {
  std::map<JointMethod, double> best;
  for (const SweepPoint& p : sweep.points) {
    auto kiwi = p.entries.find(JointMethod::kKiwi);
    if (kiwi == p.entries.end() || !kiwi->second.feasible || (own_plans_only && kiwi->second.from_portfolio)) continue;
    for (const auto& [m, e] : p.entries)
      if (m != JointMethod::kKiwi && e.feasible) best[m] = std::max(best[m], e.seconds / kiwi->second.seconds);
  }
  return best;
}

std::string SweepTable(const Sweep& s) {
  std::string out = "| budget (GB) |";
  for (JointMethod m : s.config.methods) out += " " + SweepMethodLabel(m) + " |";
  out += "\n|---|";
  for (size_t i = 0; i < s.config.methods.size(); ++i) out += "---|";
  out += "\n";
  for (const SweepPoint& p : s.points) {
    out += fmt::format("| {:.3f} |", p.budget / 1e9);
    for (JointMethod m : s.config.methods) {
      auto e = p.entries.find(m);
      out += e == p.entries.end() || !e->second.feasible
                 ? " - |"
                 : fmt::format(" {}{:.3f} |", e->second.from_portfolio ? "*" : "", e->second.normalized);
    }
    out += "\n";
  }
  out += "| least budget (GB) |";
  for (JointMethod m : s.config.methods) {
    auto it = s.smallest_budget.find(m);
    out += it == s.smallest_budget.end() ? " ? |" : fmt::format(" {:.3f} |", it->second / 1e9);
  }
  out += fmt::format("\n\nKIWI's reduced family alone meets {:.3f} GB at least. Largest speedup of KIWI:", s.reduced_least / 1e9);
  for (const auto& [m, x] : LargestSpeedups(s)) out += fmt::format(" {:.3f}x over {};", x, SweepMethodLabel(m));
  out += " (its own plans only:";
  for (const auto& [m, x] : LargestSpeedups(s, true)) out += fmt::format(" {:.3f}x over {};", x, SweepMethodLabel(m));
  return out + ")\n";
}

}  // namespace kiwi::solve::joint
