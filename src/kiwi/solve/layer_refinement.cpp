// RefineLayerPlan: KIWI's joint sharding + recomputation on one layer of each strategy of a layer plan.
#include "kiwi/solve/layer_refinement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "kiwi/ir/layer_subgraph.h"
#include "kiwi/solve/joint/baselines.h"
#include "kiwi/solve/registry.h"
#include "kiwi/solve/remat/baselines.h"
#include "kiwi/solve/remat/keep_set_schedule.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve {
namespace {

// The spec's model at `batch` samples (the graph one replica runs per micro-batch).
models::ModelSpec AtBatch(models::ModelSpec spec, int64_t batch) {
  std::visit([&](auto& c) { c.batch = batch; }, spec.config);
  return spec;
}

// One joint solver through the registry's driver (its plan replayed by the simulator).
Result<joint::JointResult> SolveJointWith(const std::string& method, const joint::JointProblem& problem,
                                          std::vector<const joint::JointResult*> portfolio, double seconds,
                                          const LayerRefinementOptions& o) {
  const Solver* solver = FindSolver(Family::kJoint, method);
  if (solver == nullptr) return Error{ErrorCode::kInternal, fmt::format("no joint solver named {}", method)};
  SolveRequest request{.target = JointTarget{problem, std::move(portfolio)},
                       .time_limit_seconds = seconds,
                       .threads = o.threads,
                       .progress = o.progress};
  Result<SolveOutcome> solved = RunSolver(*solver, request);
  if (!solved) return solved.error();
  return std::get<joint::JointResult>(std::move(solved->result));
}

// The layer's forward tensors the strategy keeps for its backward pass (per node id; the rest are
// recomputed before it, Chen et al.'s checkpointing): all but a recompute set's ops, none of a
// checkpointed layer's, all but the attention core under selective recomputation. An empty result with
// `missing` set: the set names an op the graph does not have.
std::vector<bool> StrategyKeep(const ir::Graph& graph, const remat::KeepSetScheduler& ks, const plan::LayerStrategy& s,
                               std::string& missing) {
  std::vector<bool> keep(static_cast<size_t>(graph.size()), true);
  if (s.checkpoint) {
    for (const ir::Node& n : graph.nodes()) keep[static_cast<size_t>(n.id)] = n.is_backward();
  } else if (s.RecomputesSet()) {
    for (const std::string& name : s.recompute) {  // "mlp.act" is node "layer3.mlp.act" (cost/recompute_set.h)
      const std::string suffix = "." + name;
      auto it = std::find_if(graph.nodes().begin(), graph.nodes().end(), [&](const ir::Node& n) {
        return !n.is_backward() && n.name.size() > suffix.size() && n.name.ends_with(suffix);
      });
      if (it == graph.nodes().end()) {
        missing = name;
        return {};
      }
      keep[static_cast<size_t>(it->id)] = false;
    }
  } else if (s.SelectiveRecompute()) {
    keep = remat::MegatronSelectiveKeep(ks);
  }
  return keep;
}

// The strategy's own recomputation as an operator schedule, with the best sharding of the group.
Result<joint::JointResult> AsPlanned(const joint::JointProblem& problem, const plan::LayerStrategy& strategy,
                                     double seconds, const LayerRefinementOptions& o, std::string& missing) {
  Result<remat::RematProblem> rp = remat::MakeRematProblem(*problem.graph, *problem.cost_model, 0);
  if (!rp) return rp.error();
  remat::KeepSetScheduler ks(*rp);
  const std::vector<bool> keep = StrategyKeep(*problem.graph, ks, strategy, missing);
  if (!missing.empty()) return joint::JointResult{};
  const bool all = std::all_of(keep.begin(), keep.end(), [](bool k) { return k; });
  const std::vector<plan::Step> schedule = all ? plan::CheckpointAllSchedule(*problem.graph) : ks.Schedule(ks.FromKeep(keep));
  joint::JointSolveOptions options;
  options.time_limit_seconds = seconds;
  options.threads = o.threads;
  options.progress = o.progress;
  return joint::SolveFixedSchedule(problem, schedule, "as planned", options);
}

// The strategy as planned, then KIWI within its peak, on `graph` (one layer) over one replica's devices.
Status Refine(const ir::Graph& graph, const cost::Cluster& cluster, const cost::CostModel& cost_model, double seconds,
              const LayerRefinementOptions& o, LayerRefinement& r) {
  Result<ir::DeviceMesh> mesh = cluster.MakeMesh(r.mesh_shape);
  if (!mesh) return mesh.error();
  Result<joint::JointProblem> roomy = joint::MakeJointProblem(graph, cost_model, *mesh, cluster.device.memory_bytes, {});
  if (!roomy) return roomy.error();
  std::string missing;
  Result<joint::JointResult> baseline = AsPlanned(*roomy, r.strategy, seconds / 2, o, missing);
  if (!baseline) return baseline.error();
  if (!missing.empty()) {
    r.skipped = fmt::format("its recompute set names '{}', which the layer's operator graph does not have", missing);
    return Status::Ok();
  }
  r.baseline = *std::move(baseline);
  if (!r.baseline.feasible) {
    r.skipped = fmt::format("no operator plan of one layer as planned fits the device's {} bytes",
                            cluster.device.memory_bytes);
    return Status::Ok();
  }
  Result<joint::JointProblem> tight =
      joint::MakeJointProblem(graph, cost_model, *mesh, r.baseline.sim.peak_memory_bytes, {});
  if (!tight) return tight.error();
  Result<joint::JointResult> refined = SolveJointWith("kiwi", *tight, {&r.baseline}, seconds / 2, o);
  if (!refined) return refined.error();
  r.refined = *std::move(refined);
  if (!r.refined.feasible)  // the baseline is in KIWI's portfolio: it always fits
    return Error{ErrorCode::kInternal, fmt::format("kiwi found no plan within the peak of its own warm start ({})",
                                                   r.refined.note)};
  return Status::Ok();
}

}  // namespace

Result<std::vector<LayerRefinement>> RefineLayerPlan(const models::ModelSpec& spec, const plan::LayerPlan& plan,
                                                     const cost::Cluster& cluster, const cost::CostModel& cost_model,
                                                     const LayerRefinementOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (!(options.time_limit_seconds >= 0.0))
    return BadInput(fmt::format("the refinement's time limit must be >= 0 seconds, got {}", options.time_limit_seconds));
  if (plan.layers.empty()) return BadInput("the plan has no layers to refine");
  if (plan.micro_batches < 1 || plan.global_batch % plan.micro_batches != 0)
    return BadInput(fmt::format("the plan's batch {} does not split into {} micro-batches", plan.global_batch,
                                plan.micro_batches));
  std::vector<LayerRefinement> out;
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const plan::LayerStrategy& s = plan.layers[i];
    auto same = std::find_if(out.begin(), out.end(), [&](const LayerRefinement& r) { return r.strategy == s; });
    if (same != out.end()) {
      ++same->layers;
      continue;
    }
    LayerRefinement r;
    r.first_layer = static_cast<int>(i);
    r.layers = 1;
    r.strategy = s;
    out.push_back(std::move(r));
  }
  const int64_t per_micro_batch = plan.global_batch / plan.micro_batches;
  std::map<int64_t, ir::Graph> graphs;  // by micro-batch: the model's training graph at it
  for (size_t k = 0; k < out.size(); ++k) {
    LayerRefinement& r = out[k];
    if (r.strategy.ep > 1) {
      r.skipped = "expert parallelism is outside KIWI's operator space";
      continue;
    }
    // The devices that run one replica's micro-batch: its CP group (outer axis) of TP groups.
    if (r.strategy.cp > 1) r.mesh_shape.push_back(r.strategy.cp);
    if (r.strategy.tp > 1 || r.mesh_shape.empty()) r.mesh_shape.push_back(r.strategy.tp);
    if (r.strategy.Replicas() < 1 || per_micro_batch % r.strategy.Replicas() != 0)
      return BadInput(fmt::format("layer {}: a micro-batch of {} samples does not split over {} data-parallel replicas",
                                  r.first_layer, per_micro_batch, r.strategy.Replicas()));
    r.micro_batch = per_micro_batch / r.strategy.Replicas();
    const double left = options.time_limit_seconds - SecondsSince(start);
    if (left <= 0.0) {
      r.skipped = "the time limit was spent";
      continue;
    }
    auto built = graphs.find(r.micro_batch);
    if (built == graphs.end()) {
      Result<ir::Graph> g = models::BuildTrainingGraph(AtBatch(spec, r.micro_batch));
      if (!g) return g.error();
      int32_t layers = 0;
      for (const ir::Node& n : g->nodes()) layers = std::max(layers, n.layer + 1);
      if (static_cast<size_t>(layers) != plan.layers.size())
        return BadInput(fmt::format("the plan has {} layers, the model {}", plan.layers.size(), layers));
      built = graphs.emplace(r.micro_batch, *std::move(g)).first;
    }
    Result<ir::Graph> layer = ir::LayerSubgraph(built->second, r.first_layer);
    if (!layer) return layer.error();
    r.graph = *std::move(layer);
    if (options.progress)
      options.progress(fmt::format("refining layer {} ({}, {} ops) on a {} mesh", r.first_layer,
                                   plan::StrategyName(r.strategy), r.graph.size(), fmt::join(r.mesh_shape, "x")));
    // An even share of what is left for each strategy still to refine.
    const double share = left / static_cast<double>(out.size() - k);
    Status refined = Refine(r.graph, cluster, cost_model, share, options, r);
    // Input the layer model prices but operator sharding cannot (a profile's op time beyond what the
    // MILPs take): the plan stands, this layer is not refined, and the row says why.
    if (!refined && refined.error().code == ErrorCode::kBadInput) {
      r.skipped = "its operator-level problem cannot be built: " + refined.error().message;
      continue;
    }
    KIWI_RETURN_IF_ERROR(refined);
  }
  return out;
}

}  // namespace kiwi::solve
