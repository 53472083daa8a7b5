#pragma once
// Galvatron-BMW's search (§IV, Algorithms 1 and 2) and the paper's baselines (Table II), all through
// one engine and one estimator:
//  - configurations: PP degree P (powers of two, at most the layers), global batch B (a sweep, or
//    one), micro-batches m (powers of two dividing B, or only enough to fill the pipeline), and for
//    kiwi's space model chunks per stage v (interleaved 1F1B; m a multiple of P): the partition and
//    the strategies are then one round's, repeated in each of the v chunks of a stage;
//  - per configuration, partitions (even; or BMW's memory-balanced start refined by Algorithm 2) and,
//    per partition, the layer DP (pipeline_solver.h);
//  - branch and bound over configurations: each gets an upper bound on its throughput (every layer at
//    its fastest strategy, the bubble spread evenly: valid for any partition and ignoring memory) and
//    its least peak memory (partition.h StagePeakBounds); configurations are tried
//    best bound first and the search stops when no bound beats the best plan found. That, identical
//    layers sharing cost rows, and the label DP are why a 48-layer sweep takes well under a second.
//
//   HybridSearchOptions o;
//   o.method = Method::kKiwi;  // the default
//   o.memory_budget_bytes = 16'000'000'000;
//   Result<HybridSearchResult> r = SearchHybridPlan(model, cluster, cost_model, o);
//   if (r && r->feasible) Use(r->plan);   // r->simulated is SimulateLayerPlan's verdict on it
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/plan/plan.h"
#include "kiwi/sim/layer_simulator.h"
#include "kiwi/solve/hybrid/strategy_space.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::hybrid {

// kiwi's own search (Galvatron-BMW's with every technique kiwi prices: ZeRO-1/2 beside DP and SDP),
// then Table II's rows: Galvatron-BMW, Galvatron-Base (no bi-objective partition), Galvatron (no
// CKPT), pure DP (PyTorch DDP), SDP (FSDP / ZeRO-3), TP (Megatron), PP (GPipe, tuned micro-batches),
// DeepSpeed 3D (2-way TP x 2-way PP x the rest DP), Galvatron (DP+TP), Galvatron (DP+PP).
enum class Method : uint8_t { kKiwi, kBmw, kBase, kGalvatron, kDp, kSdp, kTp, kPp, k3d, kDpTp, kDpPp };
std::optional<Method> ParseMethod(std::string_view name);  // "kiwi", "bmw", "base", "dp+tp", ...
std::string MethodName(Method method);
std::vector<std::string> MethodNames();
std::vector<Method> AllMethods();

enum class PartitionMode : uint8_t {
  kEven,         // layers split evenly (Galvatron-Base's ideally balanced partition)
  kBiObjective,  // Algorithm 2 from the memory-balanced, even and smallest-peak partitions
  kExhaustive,   // every partition (small models; tests)
};

struct MethodSpace {
  StrategySpaceOptions strategies;
  std::vector<int> pp_degrees;     // candidates (filtered to divide the devices and not exceed the layers)
  int tp = 0;                      // a fixed TP degree (DeepSpeed 3D), 0 = any
  bool accumulate = true;          // false: one micro-batch without pipelining (no gradient accumulation)
  PartitionMode partitions = PartitionMode::kEven;
  plan::PipelineSchedule schedule = plan::PipelineSchedule::k1F1B;
  // Model chunks per stage to try with 1F1B (interleaved 1F1B above 1): each where the layer types
  // repeat that many times and every stage gets a layer of each round (CostTables::Interleaved).
  std::vector<int> virtual_stages = {1};
};
MethodSpace SpaceOf(Method method, int num_devices, int num_layers);

struct HybridSearchOptions {
  Method method = Method::kKiwi;
  int64_t memory_budget_bytes = 0;           // per device
  std::optional<int64_t> global_batch;       // one batch size; nullopt: the sweep below
  int64_t max_batch = 512;                   // sweep: 1, 2, 4, then multiples of batch_step up to max_batch
  int64_t batch_step = 8;
  // Gradient accumulation: any power-of-two number of micro-batches dividing B. Without it (the
  // paper's Table II setting, where memory bounds the batch) m = 1 without pipelining and m in
  // {P, 2P, 4P} with P > 1 stages (enough micro-batches to fill the pipeline).
  bool accumulation = true;
  // false: no context parallelism in the method's space (plans for a runtime without ring attention,
  // such as kiwi.torch.distributed).
  bool context_parallel = true;
  // true: kiwi's space also offloads optimizer states to the host (ZeRO-Offload) where the cluster's
  // device has a host and the model an optimizer step (false: plans for a runtime that steps on the
  // devices, such as kiwi.torch.distributed).
  bool offload = true;
  // Recompute sets in kiwi's space: per layer type, up to this many sets of the Pareto frontier of its
  // ops' (activation bytes, recompute seconds) (solve/remat/recompute_frontier.h), each offered beside
  // no recomputation, selective recomputation and CKPT; 0: none (plans for a runtime that checkpoints
  // whole layers only, such as kiwi.torch.distributed).
  int recompute_sets = kDefaultRecomputeSets;
  static constexpr int kDefaultRecomputeSets = 2;
  // false: no expert parallelism in kiwi's space (plans for a runtime without it).
  bool expert_parallel = true;
  // true: every TP layer runs Megatron sequence parallelism, and only so, in every method's space
  // (StrategySpaceOptions::tp_sequence_parallel: a Galvatron run with sequence_parallel on).
  bool tp_sequence_parallel = false;
  // Every layer's TP degree (0: any, per layer): plans for a runtime with one TP mesh, such as
  // kiwi.torch.parallelize; overrides the method's own (MethodSpace::tp).
  int tp = 0;
  // The pipeline degree (0: the method's candidates, MethodSpace::pp_degrees).
  int pp = 0;
  std::optional<PartitionMode> partitions;   // overrides the method's (tests use kExhaustive)
  double time_limit_seconds = 60.0;
  // Samples/s of a plan known from elsewhere (another planner's, on the same cost model): the search
  // wants only faster plans, so configurations whose bound does not beat it are skipped and labels that
  // cannot are cut, as if it had found that plan itself. 0: none.
  double beat_throughput = 0.0;
  size_t max_labels = 8192;                  // per DP state (layer_dp.h)
  std::function<void(const std::string&)> progress;  // one line per improvement; may be empty
};

struct HybridSearchResult {
  bool feasible = false;
  plan::LayerPlan plan;
  double claimed_iteration_seconds = 0.0;    // the search's estimate (EstimatePipeline)
  int64_t claimed_peak_memory_bytes = 0;
  sim::LayerSimResult simulated;             // SimulateLayerPlan on `plan`: the numbers to report
  // Optimal over the method's space: every DP proven and nothing cut by the time limit, and the
  // partitions were not chosen heuristically (Algorithm 2 explores some partitions, not all).
  bool proven = false;
  bool strategies_proven = false;  // every partition solved got its optimal strategies
  bool timed_out = false;
  // Infeasible because no plan of the space is faster than options.beat_throughput (proven unless
  // timed_out), not for want of memory.
  bool none_faster = false;
  // When infeasible: the smallest per-device budget with which the method has a plan at its smallest
  // batch (at batch `smallest_batch`), 0 if none at all.
  int64_t smallest_feasible_memory = 0;
  int64_t smallest_batch = 0;
  double search_seconds = 0.0;
  int64_t configurations = 0;   // (P, B, m) enumerated
  int64_t evaluated = 0;        // of those, searched (the others were cut by their bounds)
  int64_t partitions = 0;       // partitions solved
  int64_t dp_runs = 0;
};

// kBadInput for a budget or batch that is not positive or a model without layers. A model FSDP2 runs
// (cost::ZeroRuntime::kFsdp2) gets a plan kiwi.torch.parallelize runs, whatever the method: no
// offloading, context or expert parallelism; one TP degree for every layer (options.tp, else the
// fastest of each degree's search) or, without pipeline stages and for a head not tied to the input
// embedding, one per layer.
Result<HybridSearchResult> SearchHybridPlan(const cost::LayerModel& model, const cost::Cluster& cluster,
                                            const cost::CostModel& cost_model, const HybridSearchOptions& options);

}  // namespace kiwi::solve::hybrid
