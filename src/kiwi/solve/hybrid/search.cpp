#include "kiwi/solve/hybrid/search.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <deque>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "kiwi/solve/hybrid/layer_costs.h"
#include "kiwi/solve/hybrid/partition.h"
#include "kiwi/solve/hybrid/pipeline_solver.h"
#include "kiwi/solve/hybrid/uniform_plans.h"
#include "kiwi/solve/remat/recompute_frontier.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::hybrid {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kMaxSweepBatch = 65536;  // keeps the sweep's configurations enumerable in a blink

struct Candidate {
  PipelineConfig config;
  double upper_bound = 0.0;  // samples/s no plan of this configuration can beat
};

struct Incumbent {
  bool found = false;
  const CostTables* tables = nullptr;
  PipelineConfig config;
  Partition partition;
  std::vector<int> strategies;
  PipelineEstimate estimate;
  double throughput = 0.0;
};

class Search {
 public:
  Search(const cost::LayerModel& model, const cost::Cluster& cluster, const cost::CostModel& cost_model,
         const HybridSearchOptions& options)
      : model_(model),
        types_(GroupLayerTypes(model)),
        inputs_{&model_, &types_, &cluster, &cost_model},
        options_(options),
        space_(SpaceOf(options.method, cluster.NumDevices(), static_cast<int>(model.layers.size()))),
        mode_(options.partitions.value_or(space_.partitions)),
        num_layers_(static_cast<int>(model.layers.size())) {
    // The searching methods keep TP within a node: Megatron-LM's guideline (Narayanan et al. 2021,
    // takeaway #1: TP up to the GPUs of a server, PP across servers) and Galvatron's default
    // (max_tp_deg 8); TP's per-layer all-reduces across nodes run at a rail's speed, not NVLink's.
    // The baselines keep their definitions (the TP baseline is TP over every device).
    const bool searching = options.method == Method::kKiwi || options.method == Method::kBmw ||
                           options.method == Method::kBase || options.method == Method::kGalvatron;
    if (searching && cluster.num_nodes > 1) space_.strategies.max_tp = cluster.devices_per_node;
    // Selective recomputation of a model without an attention core would only repeat "no recomputation".
    space_.strategies.allow_selective_recompute &= model.HasAttentionCore();
    space_.strategies.experts = options.expert_parallel ? model.MaxExperts() : 0;
    if (options.tp > 0) space_.tp = options.tp;
    if (options.pp > 0) space_.pp_degrees = {options.pp};
    space_.strategies.tp_sequence_parallel = options.tp_sequence_parallel;
    space_.strategies.context_sequence = model.ContextParallelSequence();
    space_.strategies.allow_context_parallel &= options.context_parallel;
    space_.strategies.allow_offload = options.offload && options.method == Method::kKiwi && cluster.device.HasHost() &&
                                      !model.optimizer.empty();
    if (options.method == Method::kKiwi)
      space_.strategies.recompute_sets = remat::CommonRecomputeSets(types_.profiles, options.recompute_sets);
  }

  Result<HybridSearchResult> Run();

 private:
  Result<const CostTables*> Tables(int pp, int64_t microbatch, int micro_batches, int virtual_stages = 1);
  const LayerTypes* Rounds(int virtual_stages, int pp);
  std::vector<bool> Allowed(const CostTables& t) const;
  bool AnyAllowed(const CostTables& t) const;
  std::vector<int64_t> Batches() const;
  std::vector<int> MicroBatchCounts(int64_t batch, int pp) const;
  Result<std::vector<Candidate>> Enumerate();
  double UpperBound(const CostTables& t, const PipelineConfig& c) const;
  Status Evaluate(const PipelineConfig& c);
  void Solve(const CostTables& t, const PipelineConfig& c, const Partition& p, PartitionSolution* out = nullptr);
  void BiObjective(const CostTables& t, const PipelineConfig& c, const StagePeakBounds& bounds);
  void Refine(const CostTables& t, const PipelineConfig& c, const StagePeakBounds& bounds, std::set<Partition>& seen);
  std::vector<int> SmallestMemoryStrategies(const CostTables& t, const PipelineConfig& c) const;
  Status FindSmallestMemory(HybridSearchResult& r);
  Status SkipDegreesThatCannotBeLaidOut();
  bool Expired() const { return Clock::now() > deadline_; }
  // The throughput a plan must exceed: the best found, or the one given to beat (0: none).
  double ToBeat() const { return std::max(best_.found ? best_.throughput : 0.0, options_.beat_throughput); }
  // The layers the tables' partitions cover: the model's, or one round's when interleaved.
  static int Layers(const CostTables& t) { return static_cast<int>(t.types().type_of.size()); }

  const cost::LayerModel& model_;
  LayerTypes types_;
  CostInputs inputs_;
  HybridSearchOptions options_;
  MethodSpace space_;
  PartitionMode mode_;
  int num_layers_;
  MeshCache meshes_;
  // by (pp, micro-batch, more than one micro-batch (CostTables::Build), virtual stages)
  std::map<std::tuple<int, int64_t, bool, int>, CostTables> tables_;
  std::map<int, LayerTypes> round_types_;                        // by virtual stages
  Incumbent best_;
  bool all_proven_ = true;
  bool timed_out_ = false;
  Clock::time_point deadline_;
  HybridSearchResult stats_;
};

Result<const CostTables*> Search::Tables(int pp, int64_t microbatch, int micro_batches, int virtual_stages) {
  const bool several = micro_batches > 1;
  auto it = tables_.find({pp, microbatch, several, virtual_stages});
  if (it != tables_.end()) return &it->second;
  if (virtual_stages > 1) {
    Result<const CostTables*> base = Tables(pp, microbatch, micro_batches);
    if (!base) return base;
    CostTables round = CostTables::Interleaved(**base, virtual_stages, *Rounds(virtual_stages, pp));
    return &tables_.emplace(std::make_tuple(pp, microbatch, several, virtual_stages), std::move(round)).first->second;
  }
  Result<CostTables> t = CostTables::Build(inputs_, pp, microbatch, space_.strategies, meshes_, micro_batches);
  if (!t) return t.error();
  return &tables_.emplace(std::make_tuple(pp, microbatch, several, 1), std::move(*t)).first->second;
}

// The types of one round of v (layer_costs.h RoundTypes), or nullptr when the layers do not split into
// v rounds or a round has fewer layers than the pp stages each of its chunks needs one of.
const LayerTypes* Search::Rounds(int virtual_stages, int pp) {
  if (virtual_stages < 2 || pp < 2 || num_layers_ % virtual_stages != 0 || num_layers_ / virtual_stages < pp)
    return nullptr;
  auto it = round_types_.find(virtual_stages);
  if (it == round_types_.end()) it = round_types_.emplace(virtual_stages, RoundTypes(types_, virtual_stages)).first;
  return &it->second;
}

std::vector<bool> Search::Allowed(const CostTables& t) const {
  if (space_.tp == 0) return {};
  std::vector<bool> allowed;
  for (const plan::LayerStrategy& s : t.strategies()) allowed.push_back(s.tp == space_.tp);
  return allowed;
}

bool Search::AnyAllowed(const CostTables& t) const {
  const std::vector<bool> allowed = Allowed(t);
  if (allowed.empty()) return t.num_strategies() > 0;
  return std::find(allowed.begin(), allowed.end(), true) != allowed.end();
}

std::vector<int64_t> Search::Batches() const {
  if (options_.global_batch) return {*options_.global_batch};
  std::vector<int64_t> out;
  for (int64_t b = 1; b < options_.batch_step && b <= options_.max_batch; b *= 2) out.push_back(b);
  for (int64_t b = options_.batch_step; b <= options_.max_batch; b += options_.batch_step) out.push_back(b);
  return out;
}

// m: powers of two dividing B (and, with pp no power of two, B over them); without gradient accumulation, one micro-batch when not pipelining and
// P, 2P or 4P micro-batches with P stages.
std::vector<int> Search::MicroBatchCounts(int64_t batch, int pp) const {
  const bool accumulate = options_.accumulation && space_.accumulate;
  if (pp == 1 && !accumulate) return {1};
  std::set<int64_t> counts;
  for (int64_t m = 1; m <= batch && m <= (int64_t{1} << 20); m *= 2) {
    if (batch % m != 0) continue;
    counts.insert(m);
    // A pipeline degree that is no power of two (35 stages on 280 GPUs) also gets the multiples of pp
    // that leave a power-of-two micro-batch (280 samples in 280 micro-batches: Megatron-LM's 530B run).
    if ((pp & (pp - 1)) != 0 && (batch / m) % pp == 0 && batch / m <= (int64_t{1} << 20)) counts.insert(batch / m);
  }
  std::vector<int> out;
  for (int64_t m : counts)
    if (accumulate || (m >= pp && m <= 4 * pp)) out.push_back(static_cast<int>(m));
  return out;
}

// Eq. 8 >= sum_s ((m - 1) / P + 1) C_s + G_s (interleaved: ((m - 1/v) / P + 1/v) C_s; the slowest stage is at least the average), each C_s,
// G_s is at least the sum of its layers' terms, and the stages' memory adds up to at most P x budget
// (counting every stage's activations at the fewest micro-batches in flight). Lagrangian relaxation of
// that memory sum: for any price lambda >= 0, sum_l min_j (w c_j + g_j + lambda mem_j) - lambda P E is a
// lower bound on the iteration time of every plan of the configuration, whatever its partition.
double Search::UpperBound(const CostTables& t, const PipelineConfig& c) const {
  const std::vector<bool> allowed = Allowed(t);
  const double v = c.virtual_stages;  // interleaved: (m - 1/v) max_s C_s + sum_s C_s / v
  const double w = 1.0 / v + (c.micro_batches - 1.0 / v) / c.pp;
  int in_flight = InFlight(c, 0);
  for (int s = 1; s < c.pp; ++s) in_flight = std::min(in_flight, InFlight(c, s));
  // The first and last layers carry the embeddings and the head (CostTables::LayerCost): priced on
  // their own; the others by type.
  const int layers = static_cast<int>(t.types().type_of.size());
  std::vector<int> count(static_cast<size_t>(t.types().num_types()), 0);
  for (int i = 1; i + 1 < layers; ++i) ++count[static_cast<size_t>(t.types().type_of[static_cast<size_t>(i)])];
  std::vector<int> own = {0};
  if (layers > 1) own.push_back(layers - 1);
  const double capacity = static_cast<double>(c.pp) * static_cast<double>(options_.memory_budget_bytes);
  // Time and memory of the cheapest strategies at price lambda, summed over layers.
  auto relaxed = [&](double lambda, double& memory) {
    double seconds = 0.0;
    memory = 0.0;
    const int rows = t.types().num_types() + static_cast<int>(own.size());
    for (int k = 0; k < rows; ++k) {  // k < own.size(): the first / last layer, then each type
      const bool single = k < static_cast<int>(own.size());
      const int type = single ? -1 : k - static_cast<int>(own.size());
      const double n = single ? 1.0 : count[static_cast<size_t>(type)];
      if (n == 0.0) continue;
      double best = std::numeric_limits<double>::infinity(), best_seconds = 0.0, best_memory = 0.0;
      for (int j = 0; j < t.num_strategies(); ++j) {
        if (!allowed.empty() && !allowed[static_cast<size_t>(j)]) continue;
        const StrategyCost x = single ? t.LayerCost(own[static_cast<size_t>(k)], j) : t.Cost(type, j);
        const double sec = w * x.microbatch_seconds + x.sync_seconds;
        const double mem = static_cast<double>(x.memory.AdditiveBytes(in_flight));
        if (sec + lambda * mem < best) {
          best = sec + lambda * mem;
          best_seconds = sec;
          best_memory = mem;
        }
      }
      seconds += n * best_seconds;
      memory += n * best_memory;
    }
    return seconds;
  };
  double memory = 0.0;
  double bound = relaxed(0.0, memory);
  if (!(bound < std::numeric_limits<double>::infinity()) || bound <= 0.0) return 0.0;
  if (memory > capacity) {  // the memory-blind optimum does not fit: raise the price of memory
    double lo = 0.0, hi = bound / capacity;
    for (int i = 0; i < 60 && relaxed(hi, memory) > 0.0 && memory > capacity; ++i) hi *= 2.0;
    if (memory > capacity) return 0.0;  // even the smallest-memory strategies do not fit
    for (int i = 0; i < 50; ++i) {
      const double mid = 0.5 * (lo + hi);
      const double seconds = relaxed(mid, memory);
      bound = std::max(bound, seconds + mid * (memory - capacity));
      (memory > capacity ? lo : hi) = mid;
    }
    const double seconds = relaxed(hi, memory);
    bound = std::max(bound, seconds + hi * (memory - capacity));
  }
  return static_cast<double>(c.global_batch) / bound;
}

Result<std::vector<Candidate>> Search::Enumerate() {
  std::vector<Candidate> out;
  for (int pp : space_.pp_degrees)
    for (int64_t batch : Batches())
      for (int m : MicroBatchCounts(batch, pp))
        for (int v : space_.virtual_stages) {
          // Interleaving: 1F1B, micro-batches in groups of pp (plan.h), the layers in v rounds.
          if (v > 1 && (space_.schedule != plan::PipelineSchedule::k1F1B || m % pp != 0 || !Rounds(v, pp))) continue;
          Result<const CostTables*> t = Tables(pp, batch / m, m, v);
          if (!t) return t.error();
          if (!AnyAllowed(**t)) continue;
          const PipelineConfig c{pp, batch, m, space_.schedule, v};
          out.push_back({c, UpperBound(**t, c)});
        }
  std::stable_sort(out.begin(), out.end(),
                   [](const Candidate& a, const Candidate& b) { return a.upper_bound > b.upper_bound; });
  return out;
}

void Search::Solve(const CostTables& t, const PipelineConfig& c, const Partition& p, PartitionSolution* out) {
  // Branch and bound: only plans faster than the best so far are wanted.
  const double cutoff =
      ToBeat() > 0.0 ? static_cast<double>(c.global_batch) / ToBeat() : std::numeric_limits<double>::infinity();
  PartitionSolution sol =
      SolvePartition({&t, c, p, options_.memory_budget_bytes, Allowed(t), options_.max_labels, cutoff, deadline_});
  if (sol.timed_out) timed_out_ = true;
  ++stats_.partitions;
  stats_.dp_runs += sol.dp_runs;
  // Unproven: a plan not shown optimal, or a partition ruled out (cut off) by a thinned DP.
  if ((sol.feasible && !sol.proven) || sol.thinned) all_proven_ = false;
  // An upper bound on memory may rule out plans that fit: nothing about this configuration is proven.
  if (!t.MemoryExact()) all_proven_ = false;
  if (sol.feasible) {
    const double throughput = static_cast<double>(c.global_batch) / sol.estimate.iteration_seconds;
    if (!best_.found || throughput > best_.throughput) {
      best_ = {true, &t, c, p, sol.strategies, sol.estimate, throughput};
      if (options_.progress)
        options_.progress(fmt::format("{:.2f} samples/s: pp {} partition [{}]{}, batch {}, {} micro-batches", throughput,
                                      c.pp, fmt::join(p, ","),
                                      c.virtual_stages > 1 ? fmt::format(" x {} chunks", c.virtual_stages) : "",
                                      c.global_batch, c.micro_batches));
    }
  }
  if (out) *out = std::move(sol);
}

std::vector<int> Search::SmallestMemoryStrategies(const CostTables& t, const PipelineConfig& c) const {
  const std::vector<bool> allowed = Allowed(t);
  std::vector<int> out;
  for (int type : t.types().type_of) {
    int best = -1;
    int64_t smallest = std::numeric_limits<int64_t>::max();
    for (int j = 0; j < t.num_strategies(); ++j) {
      if (!allowed.empty() && !allowed[static_cast<size_t>(j)]) continue;
      const StrategyCost& x = t.Cost(type, j);
      const int64_t bytes = x.memory.PeakBytes(InFlight(c, 0));
      if (bytes < smallest) {
        smallest = bytes;
        best = j;
      }
    }
    out.push_back(best);
  }
  return out;
}

// Algorithm 2: from the even partition (Galvatron-Base's), the memory-balanced one under the even
// partition's strategies (PP_Partition_Init; the smallest-memory strategies when it has none) and the
// partition with the smallest feasible peak, move layers off the slowest stage while that helps.
void Search::BiObjective(const CostTables& t, const PipelineConfig& c, const StagePeakBounds& bounds) {
  const Partition even = EvenPartition(Layers(t), c.pp);
  std::deque<Partition> queue;
  std::set<Partition> seen{even};
  std::vector<int> initial = SmallestMemoryStrategies(t, c);
  if (bounds.Peak(even) <= options_.memory_budget_bytes) {
    PartitionSolution sol;
    Solve(t, c, even, &sol);
    if (sol.feasible) {
      initial = sol.strategies;
      for (Partition& q : AdjustPartition(t, c, even, sol.strategies, options_.memory_budget_bytes, deadline_)) queue.push_back(q);
    }
  }
  queue.push_front(bounds.BestPartition(deadline_));
  queue.push_front(MemoryBalancedPartition(t, c, initial, deadline_));
  const int64_t cap = 4 * static_cast<int64_t>(Layers(t)) + 8;
  for (int64_t solved = 0; !queue.empty() && solved < cap; ++solved) {
    if (Expired()) {
      timed_out_ = true;
      return;
    }
    const Partition p = queue.front();
    queue.pop_front();
    if (!seen.insert(p).second || bounds.Peak(p) > options_.memory_budget_bytes) continue;
    PartitionSolution sol;
    Solve(t, c, p, &sol);
    if (!sol.feasible) continue;
    for (Partition& q : AdjustPartition(t, c, p, sol.strategies, options_.memory_budget_bytes, deadline_)) queue.push_back(q);
  }
  Refine(t, c, bounds, seen);
}

// kiwi's addition to Algorithm 2, which keeps each layer's strategy when it validates a move: from the
// best plan of this configuration, shift one stage boundary by one layer and re-optimize the
// strategies, as long as that beats the best plan found.
void Search::Refine(const CostTables& t, const PipelineConfig& c, const StagePeakBounds& bounds,
                    std::set<Partition>& seen) {
  if (!best_.found || !(best_.config.pp == c.pp && best_.config.global_batch == c.global_batch &&
                        best_.config.micro_batches == c.micro_batches &&
                        best_.config.virtual_stages == c.virtual_stages))
    return;
  for (bool improved = true; improved && !Expired();) {
    improved = false;
    const Partition current = best_.partition;
    for (size_t b = 0; b + 1 < current.size() && !improved; ++b)
      for (int shift : {-1, 1}) {
        Partition q = current;
        q[b] += shift;
        q[b + 1] -= shift;
        if (q[b] < 1 || q[b + 1] < 1 || !seen.insert(q).second || bounds.Peak(q) > options_.memory_budget_bytes) continue;
        PartitionSolution sol;
        Solve(t, c, q, &sol);
        if (sol.feasible) {  // beats the best plan, which is now q's
          improved = true;
          break;
        }
      }
  }
}

Status Search::Evaluate(const PipelineConfig& c) {
  Result<const CostTables*> tables = Tables(c.pp, c.Microbatch(), c.micro_batches, c.virtual_stages);
  if (!tables) return tables.error();
  const CostTables& t = **tables;
  const StagePeakBounds bounds(t, c, Allowed(t));
  const int64_t budget = options_.memory_budget_bytes;
  ++stats_.evaluated;
  if (mode_ == PartitionMode::kEven) {
    const Partition even = EvenPartition(Layers(t), c.pp);
    if (bounds.Peak(even) <= budget) Solve(t, c, even);
  } else if (mode_ == PartitionMode::kExhaustive) {
    for (const Partition& p : AllPartitions(Layers(t), c.pp))
      if (bounds.Peak(p) <= budget) Solve(t, c, p);
  } else if (bounds.Peak(bounds.BestPartition(deadline_)) <= budget) {
    BiObjective(t, c, bounds);
  }
  return Status::Ok();
}

// The smallest budget with a plan at the smallest batch of the sweep that the method can run at all.
Status Search::FindSmallestMemory(HybridSearchResult& r) {
  for (int64_t batch : Batches()) {
    int64_t smallest = StagePeakBounds::kUnreachable;
    bool any = false;
    for (int pp : space_.pp_degrees)
      for (int m : MicroBatchCounts(batch, pp)) {
        Result<const CostTables*> t = Tables(pp, batch / m, m);
        if (!t) return t.error();
        if (!AnyAllowed(**t)) continue;
        any = true;
        const PipelineConfig c{pp, batch, m, space_.schedule};
        const StagePeakBounds bounds(**t, c, Allowed(**t));
        const Partition p = mode_ == PartitionMode::kEven ? EvenPartition(num_layers_, pp) : bounds.BestPartition(deadline_);
        smallest = std::min(smallest, bounds.Peak(p));
      }
    if (!any) continue;
    r.smallest_batch = batch;
    r.smallest_feasible_memory = smallest >= StagePeakBounds::kUnreachable ? 0 : smallest;
    return Status::Ok();
  }
  return Status::Ok();
}

// A pipeline degree whose stages cannot be laid over the cluster's nodes (280 GPUs in 2 stages of
// 140 on nodes of 8: a stage would take half a node) is left out of the search, said in the progress
// output; so is one where some TP degree's mesh would straddle nodes unevenly.
Status Search::SkipDegreesThatCannotBeLaidOut() {
  const cost::Cluster& cluster = *inputs_.cluster;
  std::vector<int> kept;
  for (int pp : space_.pp_degrees) {
    const int stage = cluster.NumDevices() / pp;
    Status laid_out = Status::Ok();
    for (const plan::LayerStrategy& s : LayerStrategies(stage, space_.strategies)) {
      Result<cost::StageMesh> mesh = cost::MakeLayerMesh(cluster, pp, s);
      if (!mesh) {
        laid_out = mesh.error();
        break;
      }
    }
    if (laid_out.ok()) {
      kept.push_back(pp);
    } else if (options_.progress) {
      options_.progress(fmt::format("pp {} skipped: stages of {} devices do not tile nodes of {} ({})", pp, stage,
                                    cluster.devices_per_node, laid_out.error().message));
    }
  }
  if (kept.empty())
    return BadInput(fmt::format("hybrid search: cluster {} ({} devices, {} per node): no pipeline degree of the search "
                                "lays its stages over whole nodes",
                                cluster.name, cluster.NumDevices(), cluster.devices_per_node));
  space_.pp_degrees = std::move(kept);
  return Status::Ok();
}

Result<HybridSearchResult> Search::Run() {
  const auto start = Clock::now();
  deadline_ = DeadlineAfter(start, options_.time_limit_seconds);
  KIWI_RETURN_IF_ERROR(SkipDegreesThatCannotBeLaidOut());
  Result<std::vector<Candidate>> candidates = Enumerate();
  if (!candidates) return candidates.error();
  stats_.configurations = static_cast<int64_t>(candidates->size());
  // One chunk per stage first, then interleaved 1F1B against the best plan of those: Algorithm 2's
  // exploration depends on the best plan so far, and so the plans without interleaving stay those the
  // search finds without it.
  for (bool interleaved : {false, true}) {
    for (const Candidate& c : *candidates) {
      if ((c.config.virtual_stages > 1) != interleaved) continue;
      // No later configuration can beat the best plan known (found or given).
      if (c.upper_bound <= ToBeat()) break;
      if (Expired()) {
        timed_out_ = true;
        break;
      }
      KIWI_RETURN_IF_ERROR(Evaluate(c.config));
    }
  }
  HybridSearchResult r = stats_;
  r.timed_out = timed_out_;
  if (best_.found) {
    r.feasible = true;
    r.plan = MakeLayerPlan(*best_.tables, best_.config, best_.partition, best_.strategies);
    r.claimed_iteration_seconds = best_.estimate.iteration_seconds;
    r.claimed_peak_memory_bytes = best_.estimate.peak_memory_bytes;
    r.strategies_proven = all_proven_ && !timed_out_;
    r.proven = r.strategies_proven && mode_ != PartitionMode::kBiObjective;
    Result<sim::LayerSimResult> sim = sim::SimulateLayerPlan(model_, r.plan, *inputs_.cluster, *inputs_.cost_model);
    if (!sim) return sim.error();
    r.simulated = std::move(*sim);
  } else {
    r.none_faster = options_.beat_throughput > 0.0;
    KIWI_RETURN_IF_ERROR(FindSmallestMemory(r));
  }
  r.search_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

// One search of the method's space (with the device's reserve taken off the budget and added back).
Result<HybridSearchResult> SearchOnce(const cost::LayerModel& model, const cost::Cluster& cluster,
                                      const cost::CostModel& cost_model, const HybridSearchOptions& options) {
  // The device's reserve (context, communication buffers, fragmentation) is part of every peak the
  // simulator reports: the search plans the tensors within what is left, then adds it back.
  const int64_t reserve = cost::ReservedBytes(cluster.device);
  HybridSearchOptions tensors = options;
  tensors.memory_budget_bytes = std::max<int64_t>(options.memory_budget_bytes - reserve, 1);
  Search search(model, cluster, cost_model, tensors);
  Result<HybridSearchResult> r = search.Run();
  if (!r) return r;
  if (r->feasible) r->claimed_peak_memory_bytes += reserve;
  if (r->smallest_feasible_memory > 0) r->smallest_feasible_memory += reserve;
  return r;
}

// A model FSDP2 runs (cost::ZeroRuntime::kFsdp2) is planned for kiwi.torch.parallelize: the space narrowed
// to what it runs (no offloading, context or expert parallelism; recompute sets it runs,
// kiwi.torch.parallel.recompute_sets; TP degrees that change between layers only without pipeline stages
// and, where the head is tied to the input embedding, with both ends on one layout), searched once per
// TP degree for every layer unless one is given, then, for untied ends, once more without stages and
// the TP degree free per layer (Slice-Gather between layouts, kiwi.torch.parallel.slice_gather), each
// search wanting only plans faster than the best so far; the fastest wins (proven when every search is).
Result<HybridSearchResult> SearchForParallelize(const cost::LayerModel& model, const cost::Cluster& cluster,
                                                const cost::CostModel& cost_model, HybridSearchOptions options) {
  options.offload = options.context_parallel = options.expert_parallel = false;
  if (options.tp > 0) return SearchOnce(model, cluster, cost_model, options);
  const auto start = std::chrono::steady_clock::now();
  HybridSearchResult best;
  bool all_proven = true, all_strategies_proven = true, all_none_faster = true;
  int64_t configurations = 0, evaluated = 0, partitions = 0, dp_runs = 0;
  bool timed_out = false;
  std::vector<std::pair<int, int>> searches;  // (tp, pp): one TP degree for every layer, any pipeline degree
  for (int tp = 1; tp <= cluster.NumDevices(); tp *= 2) searches.emplace_back(tp, options.pp);
  if (model.tied_embedding_bytes == 0 && options.pp <= 1) searches.emplace_back(0, 1);  // any TP per layer, no stages
  for (auto [tp, pp] : searches) {
    HybridSearchOptions s = options;
    s.tp = tp;
    s.pp = pp;
    s.time_limit_seconds = std::max(options.time_limit_seconds - SecondsSince(start), 0.01);
    if (best.feasible) s.beat_throughput = std::max(s.beat_throughput, best.simulated.throughput_samples_per_second);
    Result<HybridSearchResult> r = SearchOnce(model, cluster, cost_model, s);
    if (!r) return r;
    all_proven &= r->proven || r->none_faster;
    all_strategies_proven &= r->strategies_proven || r->none_faster;
    all_none_faster &= r->none_faster;
    timed_out |= r->timed_out;
    configurations += r->configurations;
    evaluated += r->evaluated;
    partitions += r->partitions;
    dp_runs += r->dp_runs;
    if (r->feasible) {  // faster than every earlier degree's (it beat their best)
      best = *std::move(r);
    } else if (!best.feasible && r->smallest_feasible_memory > 0 &&
               (best.smallest_feasible_memory == 0 || r->smallest_feasible_memory < best.smallest_feasible_memory)) {
      best.smallest_feasible_memory = r->smallest_feasible_memory;
      best.smallest_batch = r->smallest_batch;
    }
  }
  best.timed_out = timed_out;
  best.proven = all_proven && !timed_out;
  best.strategies_proven = all_strategies_proven;
  best.none_faster = !best.feasible && all_none_faster;
  if (best.feasible || best.none_faster) best.smallest_feasible_memory = best.smallest_batch = 0;
  best.configurations = configurations;
  best.evaluated = evaluated;
  best.partitions = partitions;
  best.dp_runs = dp_runs;
  best.search_seconds = SecondsSince(start);
  return best;
}

}  // namespace

Result<HybridSearchResult> SearchHybridPlan(const cost::LayerModel& model, const cost::Cluster& cluster,
                                            const cost::CostModel& cost_model, const HybridSearchOptions& options) {
  if (model.layers.empty()) return BadInput(fmt::format("hybrid search: model {} has no layers", model.name));
  // 0 is a request nothing meets (exit 3 with the smallest memory that works, as kiwi plan, remat and joint).
  if (options.memory_budget_bytes < 0)
    return BadInput(fmt::format("--memory: must not be negative, got {}", options.memory_budget_bytes));
  if (!(options.beat_throughput >= 0.0) || !std::isfinite(options.beat_throughput))
    return BadInput(fmt::format("hybrid search: the throughput to beat must be finite and not negative, got {}",
                                options.beat_throughput));
  if (options.global_batch && *options.global_batch < 1)
    return BadInput(fmt::format("--batch: must be positive, got {}", *options.global_batch));
  if (options.max_batch < 1 || options.batch_step < 1 || options.max_batch > kMaxSweepBatch)
    return BadInput(fmt::format("--max-batch: must be between 1 and {}, got {}", kMaxSweepBatch, options.max_batch));
  if (cluster.NumDevices() < 1) return BadInput(fmt::format("cluster {}: has no devices", cluster.name));
  if (model.zero_runtime == cost::ZeroRuntime::kFsdp2) return SearchForParallelize(model, cluster, cost_model, options);
  return SearchOnce(model, cluster, cost_model, options);
}

}  // namespace kiwi::solve::hybrid
