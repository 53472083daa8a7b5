#include "kiwi/solve/hybrid/layer_costs.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiwi::solve::hybrid {
namespace {

int Log2(int n) {
  int k = 0;
  while ((1 << (k + 1)) <= n) ++k;
  return k;
}

// The simulator's terms of one placed layer: memory as its stage counts it (cost::LayerMemory), times
// as cost::AddLayerCost, cost::OptimizerSeconds and cost::ParameterGatherSeconds give them.
StrategyCost PriceLayer(const cost::PlacedLayer& layer, const cost::LayerModel& model, const cost::CostModel& cost_model) {
  StrategyCost c;
  c.memory = cost::LayerMemory(layer, model);
  cost::StageCost t;
  cost::AddLayerCost(layer, cost_model, t);
  c.microbatch_seconds = t.MicrobatchSeconds();
  c.sync_seconds = t.gradient_sync;
  c.optimizer_seconds = cost::OptimizerSeconds(layer, model, cost_model) + cost::ParameterGatherSeconds(layer, cost_model);
  return c;
}

}  // namespace

LayerTypes GroupLayerTypes(const cost::LayerModel& model) {
  LayerTypes t;
  for (const cost::LayerProfile& p : model.layers) {
    int type = -1;
    for (int k = 0; k < t.num_types() && type < 0; ++k)
      if (cost::SameButName(t.profiles[static_cast<size_t>(k)], p)) type = k;
    if (type < 0) {
      type = t.num_types();
      t.profiles.push_back(p);
    }
    t.type_of.push_back(type);
  }
  return t;
}

LayerTypes RoundTypes(const LayerTypes& model_types, int virtual_stages) {
  const int round = static_cast<int>(model_types.type_of.size()) / virtual_stages;
  LayerTypes t;
  std::map<std::vector<int>, int> index;
  for (int i = 0; i < round; ++i) {
    std::vector<int> copies;
    for (int k = 0; k < virtual_stages; ++k) copies.push_back(model_types.type_of[static_cast<size_t>(i + k * round)]);
    auto [it, added] = index.emplace(copies, t.num_types());
    if (added) t.profiles.push_back(model_types.profiles[static_cast<size_t>(copies.front())]);
    t.type_of.push_back(it->second);
  }
  return t;
}

Result<const cost::StageMesh*> MeshCache::Get(const cost::Cluster& cluster, int pp, const plan::LayerStrategy& s) {
  auto it = meshes_.find({pp, s.dp, s.ep, s.cp});
  if (it != meshes_.end()) return &it->second;
  Result<cost::StageMesh> mesh = cost::MakeLayerMesh(cluster, pp, s);
  if (!mesh) return mesh.error();
  return &meshes_.emplace(std::make_tuple(pp, s.dp, s.ep, s.cp), std::move(*mesh)).first->second;
}

Result<CostTables> CostTables::Build(const CostInputs& in, int pp, int64_t microbatch, const StrategySpaceOptions& space,
                                     MeshCache& meshes, int micro_batches) {
  const int devices = in.cluster->NumDevices();
  if (pp < 1 || devices % pp != 0)
    return BadInput(fmt::format("hybrid search: pp degree {} does not divide the {} devices", pp, devices));
  if (microbatch < 1) return BadInput(fmt::format("hybrid search: micro-batch of {} samples", microbatch));
  CostTables t;
  t.pp_ = pp;
  t.microbatch_ = microbatch;
  t.micro_batches_ = micro_batches;
  t.types_ = in.types;
  t.num_dp_ = Log2(devices / pp) + 1;
  for (const plan::LayerStrategy& s : LayerStrategies(devices / pp, space)) {
    if (microbatch % s.Replicas() != 0) continue;
    if (!WorthContextParallel(s, microbatch)) continue;
    t.strategies_.push_back(s);
    t.num_cp_ = std::max(t.num_cp_, Log2(s.cp) + 1);
  }
  for (const plan::LayerStrategy& s : t.strategies_)
    t.layout_index_.push_back(2 * (Log2(s.dp) * t.num_cp_ + Log2(s.cp)) + (s.SequenceParallel() ? 1 : 0));
  KIWI_RETURN_IF_ERROR(t.Fill(in, meshes));
  return t;
}

Status CostTables::Fill(const CostInputs& in, MeshCache& meshes) {
  const int types = in.types->num_types();
  costs_.resize(static_cast<size_t>(types * num_strategies()));
  embedding_.resize(strategies_.size());
  head_.resize(strategies_.size());
  const int layouts = num_layouts();
  point_to_point_.assign(static_cast<size_t>(types * layouts), 0.0);
  slice_gather_.assign(static_cast<size_t>(types * layouts * layouts), 0.0);
  std::vector<cost::PlacedLayer> by_layout(static_cast<size_t>(layouts));  // one placed layer per layout
  std::vector<bool> have_layout(static_cast<size_t>(layouts), false);
  for (int j = 0; j < num_strategies(); ++j) {
    const plan::LayerStrategy& s = strategies_[static_cast<size_t>(j)];
    Result<const cost::StageMesh*> mesh = meshes.Get(*in.cluster, pp_, s);
    if (!mesh) return mesh.error();
    const int64_t per_replica = microbatch_ / s.Replicas();  // cost::PlacedLayer::microbatch
    for (int k = 0; k < types; ++k)
      costs_[static_cast<size_t>(k * num_strategies() + j)] =
          PriceLayer({in.types->profiles[static_cast<size_t>(k)], s, **mesh, per_replica, 0, micro_batches_},
                     *in.model, *in.cost_model);
    plan::LayerStrategy other_strategy = s;  // as the simulator places them (layer_simulator.cpp PlaceOther)
    other_strategy.checkpoint = false;
    // With stages, a tied embedding's copy on the last one and its gradient all-reduce at both ends.
    const int64_t tied = cost::TiedCopyBytes(*in.model, pp_);
    embedding_[static_cast<size_t>(j)] =
        PriceLayer({in.model->embedding, other_strategy, **mesh, per_replica, tied, micro_batches_}, *in.model, *in.cost_model);
    head_[static_cast<size_t>(j)] = PriceLayer(
        {cost::PipelinedHead(*in.model, pp_), other_strategy, **mesh, per_replica, tied, micro_batches_}, *in.model,
        *in.cost_model);
    by_layout[static_cast<size_t>(LayoutIndex(j))] = {in.types->profiles.front(), s, **mesh, per_replica, 0, micro_batches_};
    have_layout[static_cast<size_t>(LayoutIndex(j))] = true;
  }
  for (int k = 0; k < types; ++k) {
    for (int a = 0; a < layouts; ++a) {
      if (!have_layout[static_cast<size_t>(a)]) continue;
      cost::PlacedLayer prev = by_layout[static_cast<size_t>(a)];
      prev.profile = in.types->profiles[static_cast<size_t>(k)];
      point_to_point_[static_cast<size_t>(k * layouts + a)] = cost::PointToPointSeconds(prev, *in.cost_model);
      for (int b = 0; b < layouts; ++b) {  // Slice-Gather gathers forward (DP shrinks) or backward (DP grows)
        if (b == a || !have_layout[static_cast<size_t>(b)]) continue;
        Result<double> seconds = cost::SliceGatherSeconds(prev, by_layout[static_cast<size_t>(b)], *in.cluster, *in.cost_model);
        if (!seconds) return seconds.error();
        slice_gather_[static_cast<size_t>((k * layouts + a) * layouts + b)] = *seconds;
      }
    }
  }
  return Status::Ok();
}

bool CostTables::Places(int layer, int strategy) const {
  const int ep = strategies_[static_cast<size_t>(strategy)].ep;
  if (ep == 1) return true;
  const int64_t experts = types_->profiles[static_cast<size_t>(types_->type_of[static_cast<size_t>(layer)])].experts;
  return experts > 0 && experts % ep == 0;
}

namespace {

// Whether the DP's memory of an interleaved stage, (in-flight chunk-micro-batches) x (the sum of its
// round layers' largest copies), is the schedule's: only when every chunk of the stage keeps the same
// activations, i.e. the copies of each round layer are alike and the embeddings and the head keep none.
// Otherwise it is an upper bound (a chunk-micro-batch never holds more than the largest chunk).
bool InterleavedMemoryExact(const CostTables& base, int round, int virtual_stages) {
  const std::vector<int>& type_of = base.types().type_of;
  for (int i = 0; i < round; ++i)
    for (int k = 1; k < virtual_stages; ++k)
      if (type_of[static_cast<size_t>(i + k * round)] != type_of[static_cast<size_t>(i)]) return false;
  for (int j = 0; j < base.num_strategies(); ++j)
    if (base.Embedding(j).memory.activations != 0 || base.Head(j).memory.activations != 0) return false;
  return true;
}

}  // namespace

CostTables CostTables::Interleaved(const CostTables& base, int virtual_stages, const LayerTypes& round_types) {
  CostTables t = base;
  t.types_ = &round_types;
  t.base_ = &base;
  const int round = static_cast<int>(round_types.type_of.size());
  const int types = round_types.num_types(), strategies = t.num_strategies(), layouts = t.num_layouts();
  t.costs_.assign(static_cast<size_t>(types * strategies), StrategyCost{});
  t.slice_gather_.assign(static_cast<size_t>(types * layouts * layouts), 0.0);
  t.point_to_point_.assign(static_cast<size_t>(types * layouts), 0.0);
  t.memory_exact_ = InterleavedMemoryExact(base, round, virtual_stages);
  std::vector<bool> done(static_cast<size_t>(types), false);
  for (int i = 0; i < round; ++i) {
    const int r = round_types.type_of[static_cast<size_t>(i)];
    if (done[static_cast<size_t>(r)]) continue;
    done[static_cast<size_t>(r)] = true;
    for (int k = 0; k < virtual_stages; ++k) {
      const int type = base.types().type_of[static_cast<size_t>(i + k * round)];
      for (int j = 0; j < strategies; ++j) {
        StrategyCost& c = t.costs_[static_cast<size_t>(r * strategies + j)];
        const StrategyCost& x = base.Cost(type, j);
        const int64_t activations = std::max(c.memory.activations, x.memory.activations);
        c.memory += x.memory;
        c.memory.activations = activations;
        c.microbatch_seconds += x.microbatch_seconds;
        c.sync_seconds += x.sync_seconds;
        c.optimizer_seconds += x.optimizer_seconds;
      }
      for (int a = 0; a < layouts; ++a) {
        t.point_to_point_[static_cast<size_t>(r * layouts + a)] += base.PointToPoint(type, a);
        for (int b = 0; b < layouts; ++b)
          t.slice_gather_[static_cast<size_t>((r * layouts + a) * layouts + b)] += base.SliceGather(type, a, b);
      }
    }
  }
  return t;
}

const StrategyCost& CostTables::Cost(int type, int strategy) const {
  return costs_[static_cast<size_t>(type * num_strategies() + strategy)];
}

StrategyCost CostTables::LayerCost(int layer, int strategy) const {
  StrategyCost c;  // in model order: the embeddings, the layer, the head (StageMemory adds in order)
  auto add = [&c](const StrategyCost& o) {
    c.memory += o.memory;
    c.microbatch_seconds += o.microbatch_seconds;
    c.sync_seconds += o.sync_seconds;
    c.optimizer_seconds += o.optimizer_seconds;
  };
  if (layer == 0) add(Embedding(strategy));
  add(Cost(types_->type_of[static_cast<size_t>(layer)], strategy));
  if (layer + 1 == static_cast<int>(types_->type_of.size())) add(Head(strategy));
  return c;
}

StageTerms CostTables::StageTermsOf(const cost::StageMemory& memory, int in_flight) const {
  const bool interleaved = base_ != nullptr;
  return {memory.AdditiveBytes(in_flight), interleaved ? 0 : memory.activations,
          interleaved ? memory.layer_headroom : memory.Headroom()};
}

double CostTables::SliceGather(int prev_type, int prev_layout, int next_layout) const {
  return slice_gather_[static_cast<size_t>((prev_type * num_layouts() + prev_layout) * num_layouts() + next_layout)];
}

double CostTables::PointToPoint(int type, int layout) const {
  return point_to_point_[static_cast<size_t>(type * num_layouts() + layout)];
}

int InFlight(const PipelineConfig& config, int stage) {
  return cost::MicrobatchesInFlight(config.schedule, config.pp, config.micro_batches, stage, config.virtual_stages);
}

namespace {

// What one round's tables leave to the estimate of interleaved stage s (round layers first..last): the
// v - 1 wraps from the last round layer on the last stage to the first on the first (sent forward by
// the last stage, the gradient back by the first, resharded into it), and the stage's memory as the
// simulator counts it, over its v chunks of model layers (cost::InterleavedStagePeakBytes).
int64_t AddInterleaving(const CostTables& tables, const PipelineConfig& config, int s, int first, int last,
                        const std::vector<int>& strategies, double& seconds) {
  const CostTables& base = tables.base();
  const int round = static_cast<int>(strategies.size()), v = config.virtual_stages;
  const int end_layout = tables.LayoutIndex(strategies.back());
  for (int k = 0; k + 1 < v; ++k) {
    const int sender_type = base.types().type_of[static_cast<size_t>(round - 1 + k * round)];
    if (s + 1 == config.pp || s == 0) seconds += base.PointToPoint(sender_type, end_layout);
    if (s == 0) seconds += base.SliceGather(sender_type, end_layout, tables.LayoutIndex(strategies.front()));
  }
  std::vector<cost::StageMemory> chunks(static_cast<size_t>(v));
  for (int k = 0; k < v; ++k)
    for (int i = first; i <= last; ++i)
      chunks[static_cast<size_t>(k)] += base.LayerCost(i + k * round, strategies[static_cast<size_t>(i)]).memory;
  return cost::InterleavedStagePeakBytes(chunks, config.pp, config.micro_batches, s);
}

}  // namespace

int PipelineEstimate::SlowestStage() const {
  return static_cast<int>(std::max_element(stage_seconds.begin(), stage_seconds.end()) - stage_seconds.begin());
}

int PipelineEstimate::SlowestOptimizerStage() const {
  return static_cast<int>(std::max_element(optimizer_seconds.begin(), optimizer_seconds.end()) - optimizer_seconds.begin());
}

PipelineEstimate EstimatePipeline(const CostTables& tables, const PipelineConfig& config,
                                  const std::vector<int>& partition, const std::vector<int>& strategies) {
  const std::vector<int>& type_of = tables.types().type_of;
  PipelineEstimate e;
  int first = 0;
  for (int s = 0; s < static_cast<int>(partition.size()); ++s) {
    const int last = first + partition[static_cast<size_t>(s)] - 1;
    double seconds = 0.0, sync = 0.0, optimizer = 0.0;
    cost::StageMemory memory;
    auto add = [&](const StrategyCost& c) {
      seconds += c.microbatch_seconds;
      sync += c.sync_seconds;
      optimizer += c.optimizer_seconds;
      memory += c.memory;
    };
    for (int i = first; i <= last; ++i) {
      const int j = strategies[static_cast<size_t>(i)];
      add(tables.LayerCost(i, j));
      if (i > 0)
        seconds += tables.SliceGather(type_of[static_cast<size_t>(i) - 1], tables.LayoutIndex(strategies[static_cast<size_t>(i) - 1]),
                                      tables.LayoutIndex(j));
    }
    if (s + 1 < config.pp)
      seconds += tables.PointToPoint(type_of[static_cast<size_t>(last)], tables.LayoutIndex(strategies[static_cast<size_t>(last)]));
    if (s > 0)
      seconds += tables.PointToPoint(type_of[static_cast<size_t>(first) - 1],
                                     tables.LayoutIndex(strategies[static_cast<size_t>(first) - 1]));
    const int64_t peak = config.virtual_stages > 1
                             ? AddInterleaving(tables, config, s, first, last, strategies, seconds)
                             : memory.PeakBytes(InFlight(config, s));
    e.stage_seconds.push_back(seconds);
    e.sync_seconds.push_back(sync);
    e.optimizer_seconds.push_back(optimizer);
    e.stage_memory.push_back(peak);
    first = last + 1;
  }
  double stages = 0.0, syncs = 0.0;
  for (size_t s = 0; s < e.stage_seconds.size(); ++s) stages += e.stage_seconds[s], syncs += e.sync_seconds[s];
  e.iteration_seconds = cost::InterleavedIterationSeconds(
      config.micro_batches, config.virtual_stages, e.stage_seconds[static_cast<size_t>(e.SlowestStage())], stages, syncs,
      *std::max_element(e.optimizer_seconds.begin(), e.optimizer_seconds.end()));
  e.peak_memory_bytes = *std::max_element(e.stage_memory.begin(), e.stage_memory.end());
  return e;
}

plan::LayerPlan MakeLayerPlan(const CostTables& tables, const PipelineConfig& config, const std::vector<int>& partition,
                              const std::vector<int>& strategies) {
  plan::LayerPlan p;
  for (int chunk = 0; chunk < config.virtual_stages; ++chunk) {
    for (int j : strategies) p.layers.push_back(tables.strategies()[static_cast<size_t>(j)]);
    p.pp_partition.insert(p.pp_partition.end(), partition.begin(), partition.end());
  }
  p.virtual_stages = config.virtual_stages;
  p.pp_degree = config.pp;
  p.global_batch = config.global_batch;
  p.micro_batches = config.micro_batches;
  p.pipeline = config.schedule;
  return p;
}

}  // namespace kiwi::solve::hybrid
