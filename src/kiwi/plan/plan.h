#pragma once
// A plan: what a solver decides and the simulator replays. Two levels share one versioned format
// (io/plan_json.h, documented in docs/plan-format.md):
//  - operator level (Checkmate, KIWI, Alpa-style): per-op sharding on a mesh + an execution sequence
//    of computes and frees, where a node computed twice is a recomputation;
//  - layer level (Galvatron-BMW): per-layer DP/SDP/TP/checkpoint, pipeline partition, batch sizes.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiwi/ir/graph.h"
#include "kiwi/ir/sharding.h"

namespace kiwi::plan {

inline constexpr int kPlanVersion = 1;

// How one operator runs on the mesh. Its work is split over the axes its output is sharded on plus
// the axes its contraction is split on (`reduce_axes`: partial sums, reduced after the op by a
// reduce-scatter over the reduce axes the output is sharded on and an all-reduce over the rest).
struct OpSharding {
  ir::ShardingSpec output;                  // layout of the op's output tensor
  std::vector<ir::ShardingSpec> operands;   // required layout of each input; empty = as produced
  ir::AxisMask reduce_axes = 0;
  std::string strategy;                     // name for reports, e.g. "S0R = S0R x RR"
};

enum class StepKind : uint8_t { kCompute, kFree };

// One step of the execution sequence. A tensor is resident from its compute until its free.
struct Step {
  StepKind kind = StepKind::kCompute;
  ir::NodeId node = ir::kNoNode;
  bool operator==(const Step&) const = default;
};

struct OperatorPlan {
  std::vector<int> mesh_shape;                   // empty = one device
  std::map<ir::NodeId, OpSharding> shardings;    // ops not listed are replicated
  std::vector<Step> schedule;                    // empty = checkpoint-all in graph order
};

// What the DP ranks of a layer shard (Rajbhandari et al. 2020, ZeRO §5): nothing (plain DP), the
// optimizer states (ZeRO-1), also the gradients (ZeRO-2), also the parameters (ZeRO-3, "SDP").
enum class Zero : uint8_t { kNone = 0, kOptimizerStates = 1, kGradients = 2, kParameters = 3 };

struct LayerStrategy {
  int tp = 1;               // tensor-parallel degree (Megatron)
  int dp = 1;               // data-parallel degree (replicas or shards)
  Zero zero = Zero::kNone;  // what the dp ranks shard (nothing when dp is 1)
  bool checkpoint = false;  // recompute the layer's activations in the backward pass
  // Megatron sequence parallelism (Korthikanti et al. 2023 §4.2.2): the TP group also splits the
  // layer's layernorm/dropout regions and its boundary activation over the sequence, each all-reduce
  // becoming an all-gather + reduce-scatter pair.
  bool sequence_parallel = false;
  // Megatron's selective activation recomputation (Korthikanti et al. 2023 §5): only the attention
  // core (scores, softmax, its dropout, context) is recomputed in the backward pass, dropping its
  // 5as^2b bytes per layer (eq. 6). Moot when the whole layer is checkpointed.
  bool selective_recompute = false;
  // Expert parallelism (Megatron-LM MoE) of a mixture-of-experts layer: the dp ranks form dp / ep
  // groups of ep consecutive ranks, each rank holding experts / ep of the experts and exchanging its
  // tokens' routed rows with its group in all-to-alls; the expert weights are data-parallel (and ZeRO-1/2
  // sharded) over the dp / ep ranks that hold the same experts, the rest of the layer over all dp.
  int ep = 1;
  // Context parallelism (Liu et al. 2023, ring attention; torchtitan's and Megatron-LM's CP): the dp
  // ranks form dp / cp groups of cp consecutive ranks, each group running one data-parallel replica's
  // micro-batch with every sample's sequence split over its ranks. Attention passes each rank's keys and
  // values around the group's ring, overlapped with the attention blocks; the rest of the layer works on
  // its tokens alone. Gradients sync (and ZeRO shards) over all dp ranks, as torchtitan's FSDP over
  // dp_shard x cp.
  int cp = 1;
  // ZeRO-Offload (Ren et al. 2021): the layer's optimizer states (with fp32 master weights) live in
  // host memory and its optimizer step runs on the host's CPUs: each rank sends the gradients of the
  // parameters it steps to the host and gets the updated parameters back over PCIe.
  bool offload = false;
  // A recompute set (cost/recompute_set.h): the layer's forward ops, by name within the layer
  // ("mlp.act"), run again before its backward pass instead of keeping their outputs; chosen per layer
  // type by kiwi's rematerialization solver (solve/remat/recompute_frontier.h). Moot when the whole
  // layer is checkpointed; never beside selective recomputation (the attention core is one such set).
  std::vector<std::string> recompute = {};
  // With cp > 1 (above) and tp 1: DeepSpeed-Ulysses sequence parallelism (Jacobs et al. 2023), Galvatron's
  // use_sp, over groups of this many consecutive ranks of the CP group: each all-to-alls the attention's
  // queries, keys and values from its sequence block to a block of the heads before the attention, and
  // the attention's output back after (their gradients back in the backward pass). ulysses = cp: no ring;
  // 1 < ulysses < cp: unified sequence parallelism (Fang & Zhao 2024, USP; Galvatron's use_sp beside its
  // cp_sizes_enc), a ring over the cp / ulysses groups (ranks ulysses apart) after the all-to-alls;
  // 1: the ring alone. The rest as CP.
  int ulysses = 1;
  // The stage in effect: a ZeRO stage over one DP rank shards nothing.
  Zero ZeroStage() const { return dp > 1 ? zero : Zero::kNone; }
  // Sequence parallelism in effect: it needs a TP group.
  bool SequenceParallel() const { return sequence_parallel && tp > 1; }
  bool Shards(Zero what) const { return ZeroStage() >= what; }
  // Selective recomputation in effect: whole-layer checkpointing recomputes the core anyway.
  bool SelectiveRecompute() const { return selective_recompute && !checkpoint; }
  // The recompute set in effect: none under whole-layer checkpointing.
  bool RecomputesSet() const { return !recompute.empty() && !checkpoint; }
  // The ranks that hold the same experts and average their gradients: dp / ep.
  int ExpertDataParallel() const { return dp / ep; }
  // The Ulysses degree in effect (1: none): it needs a CP group.
  int UlyssesDegree() const { return cp > 1 && ulysses > 1 ? ulysses : 1; }
  bool Ulysses() const { return UlyssesDegree() > 1; }
  // The ranks one ring attention passes keys and values around: cp / ulysses (1: no ring).
  int RingDegree() const { return cp / UlyssesDegree(); }
  // The data-parallel replicas the batch is split over: dp / cp (each a CP group).
  int Replicas() const { return dp / cp; }
  bool operator==(const LayerStrategy&) const = default;
};

// The data parallelism's name in plan names: "DP", "ZeRO1", "ZeRO2", "SDP" (ZeRO-3, Galvatron-BMW's name).
inline const char* DataParallelName(Zero zero) {
  constexpr const char* kNames[] = {"DP", "ZeRO1", "ZeRO2", "SDP"};
  return kNames[static_cast<int>(zero)];
}

// "TP2xDP4", "SP-TP2xZeRO2-DP4+CKPT", "TP8+SEL" (selective recomputation), "SDP8", "TP2xZeRO1-DP8xEP4"
// (expert parallelism), "SP-TP8xSDP16xCP4" (context parallelism), "ZeRO2-DP8+OFFLOAD+CKPT" (offloading),
// "TP2xDP4+RC[attn.norm,mlp.act]" (a recompute set); with pp > 1 prefixed "PP2x" (a uniform plan's name);
// "single" without parallelism.
std::string StrategyName(const LayerStrategy& strategy, int pp = 1);
// The same with a recompute set by its size, "TP2xDP4+RC7": for tables, where the ops would not fit.
std::string ShortStrategyName(const LayerStrategy& strategy, int pp = 1);

enum class PipelineSchedule : uint8_t { k1F1B, kGPipe };

struct LayerPlan {
  std::vector<LayerStrategy> layers;  // one per model layer
  int pp_degree = 1;
  // Layers per stage; sums to layers.size(); empty = one stage. With virtual_stages v > 1: layers per
  // model chunk, pp_degree x v of them in model order, chunk c on stage c % pp_degree (Megatron-LM).
  std::vector<int> pp_partition;
  int64_t global_batch = 1;
  int micro_batches = 1;
  PipelineSchedule pipeline = PipelineSchedule::k1F1B;
  // Model chunks per stage: v > 1 is interleaved 1F1B (Narayanan et al. 2021 §2.2), 1F1B only.
  int virtual_stages = 1;
  // The entries pp_partition has (when given), and the stage that runs entry `chunk`.
  int64_t NumChunks() const { return int64_t{pp_degree} * virtual_stages; }
  int StageOfChunk(int chunk) const { return chunk % pp_degree; }
};

// "has 3 stages, pp_degree is 2" / "has 2 chunks, pp_degree 2 x virtual_stages 2 is 4": a pp_partition
// whose length is not NumChunks(), as the plan's readers say it.
std::string PartitionLengthError(const LayerPlan& plan);

// Consecutive layers of one stage with one strategy, [first, last] in model order: how reports list a
// plan along the model. Layers beyond the partition (or all, without one) are on stage 0.
struct LayerRun {
  int first = 0;
  int last = 0;
  int stage = 0;
};
std::vector<int> LayerStages(const LayerPlan& plan);  // each layer's stage
std::vector<LayerRun> LayerRuns(const LayerPlan& plan);

// What a solver claims the plan achieves; tests compare it with the simulator's answer.
struct Claims {
  std::optional<int64_t> peak_memory_bytes;
  std::optional<double> iteration_seconds;
};

// The size flags a model-zoo model was built with on top of its preset (`kiwi plan --model gpt
// --layers 8 ...`), so that a plan replays on exactly the model it was made for.
struct ModelFlags {
  std::optional<int64_t> layers, hidden, heads, seq, batch, ffn, vocab;
  std::optional<double> dropout;  // the probability at every dropout site (0: none); unset = the preset's
  std::optional<double> capacity_factor;  // a mixture of experts' (models::TransformerConfig); unset = 1
  std::string dtype;      // "" = the preset's
  std::string optimizer;  // "" = the preset's
  std::string attention;  // "" = auto (models::AttentionKernel)
  std::string runtime;    // what runs ZeRO-3 (cost::ZeroRuntime): "" = kiwi's own, "fsdp2"
  bool operator==(const ModelFlags&) const = default;
};

// Galvatron's profiles a plan was made from (kiwi hybrid --galvatron-profiles), so that it replays on
// them: the files by absolute path, the options they were read with (io::GalvatronModelOptions) and
// the budget Galvatron's memory reserve was sized for (cost::GalvatronReservedBytes).
struct GalvatronSource {
  std::vector<std::string> profiles;  // computation, memory
  std::vector<std::string> hardware;  // all-reduce, p2p, overlap, sp_time ("" where not given); may be empty
  std::vector<int> layers;            // per layer type
  int64_t seq = 0;
  std::string precision;              // "" = the file name's
  bool sequence_parallel = false;
  int64_t hidden = 0;
  int64_t memory_budget_bytes = 0;
  std::string time_mode, memory_mode;  // Galvatron's profile modes ("" = batch, static)
  bool operator==(const GalvatronSource&) const = default;
};

struct Plan {
  int version = kPlanVersion;
  std::string graph;    // graph name or file the plan is for (informational)
  std::string model;    // model preset, when made for one
  std::string hf_config;  // or the HuggingFace config.json it was made for (its absolute path)
  ModelFlags model_flags;
  std::optional<GalvatronSource> galvatron;  // or the Galvatron profiles it was made from
  std::string cluster;  // cluster preset or file
  std::string solver;   // who made it
  std::optional<OperatorPlan> op;
  std::optional<LayerPlan> layer;
  Claims claims;
};

// The checkpoint-all execution (CONTRACT.md `checkpoint_all_peak_bytes`): every node once in graph
// order; each output freed right after its last consumer runs, an output with no consumer right after
// it is computed. Persistent nodes (parameters, optimizer state) are never freed.
std::vector<Step> CheckpointAllSchedule(const ir::Graph& graph);

}  // namespace kiwi::plan
