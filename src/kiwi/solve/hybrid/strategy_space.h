#pragma once
// Galvatron-BMW's per-layer strategy space (§III-B): decision trees over the devices of a pipeline
// stage. PP splits the devices into equal groups first (Takeaway #1: across device islands); inside a
// group each tree level applies one paradigm (DP, SDP or TP) with a power-of-two degree, no paradigm
// twice (so the level order is a permutation), and every tree comes with and without CKPT. Takeaway #3
// removes the trees that mix DP and SDP. For 8 GPUs (PP 1/2/4/8) that is 44 strategies, 68 with the
// DP+SDP mixes (the paper's counts).
//
//   auto all = DecisionTreeStrategies(8, {});          // 44, every PP degree
//   auto per_stage = LayerStrategies(4, {});           // what the estimator distinguishes on 4 devices
#include <string>
#include <vector>

#include "kiwi/plan/plan.h"

namespace kiwi::solve::hybrid {

enum class Paradigm : uint8_t { kDp, kSdp, kTp };

struct TreeLevel {
  Paradigm paradigm = Paradigm::kDp;
  int degree = 2;
  bool operator==(const TreeLevel&) const = default;
};

// One leaf of a decision tree: a strategy for one layer.
struct TreeStrategy {
  int pp = 1;
  std::vector<TreeLevel> levels;  // outermost (slowest links) first, innermost last
  bool checkpoint = false;

  int Degree(Paradigm p) const;  // 1 when the paradigm is absent
  // TP on the innermost level (Galvatron's tp_consecutive): its all-reduces use the fastest links.
  bool TpInnermost() const;
  // The estimator's view (plan::LayerStrategy): degrees and flags, without the level order. A DP+SDP
  // mix has no LayerStrategy (Takeaway #3 excludes it); it maps to SDP over both levels.
  plan::LayerStrategy ToLayerStrategy() const;
  std::string Name() const;  // "PP2-TP2-DP2+CKPT", "SDP8", "PP8"
  bool operator==(const TreeStrategy&) const = default;
};

struct StrategySpaceOptions {
  bool allow_dp = true;          // plain data parallelism with degree > 1
  bool allow_sdp = true;         // sharded data parallelism (ZeRO-3)
  // ZeRO-1 and ZeRO-2 (sharded optimizer states; and gradients) beside DP and SDP: kiwi's own space,
  // not Galvatron-BMW's (its trees and Table II rows leave them out). Only LayerStrategies has them.
  bool allow_zero12 = false;
  bool allow_tp = true;          // Megatron tensor parallelism with degree > 1
  // Megatron sequence parallelism beside plain TP (plan::LayerStrategy::sequence_parallel): kiwi's own
  // space, like allow_zero12. Only LayerStrategies has it.
  bool allow_sequence_parallel = false;
  // Every TP layer runs Megatron sequence parallelism, and only so (Galvatron's run-wide
  // sequence_parallel): TP strategies come with SP whatever allow_sequence_parallel says.
  bool tp_sequence_parallel = false;
  bool allow_checkpoint = true;  // CKPT on or off per layer
  // Megatron's selective recomputation of the attention core (plan::LayerStrategy::selective_recompute)
  // beside none and CKPT: kiwi's own space. Only LayerStrategies has it; the search turns it off for
  // models without an attention core to recompute (cost::LayerModel::HasAttentionCore).
  bool allow_selective_recompute = false;
  // Expert parallelism (plan::LayerStrategy::ep) for layers of this many experts: every power-of-two ep
  // dividing both dp and the experts, beside ep 1, with DP or ZeRO-1/2 (Megatron-LM's: its distributed
  // optimizer is ZeRO-1). Only LayerStrategies has it, and only kiwi's space: the search sets it from
  // the model (cost::LayerModel::MaxExperts); 0: none.
  int64_t experts = 0;
  bool allow_expert_parallel = false;
  // Context parallelism (plan::LayerStrategy::cp) over a sequence of this many tokens: every
  // power-of-two cp dividing dp (and the sequence into 2 cp chunks, load-balanced causal attention),
  // beside cp 1, not beside EP, under TP only with sequence parallelism (Megatron-LM's and torchtitan's
  // pairing). Only LayerStrategies has it, and only kiwi's space: the search sets it from the model
  // (cost::LayerModel::ContextParallelSequence); 0: none.
  int64_t context_sequence = 0;
  bool allow_context_parallel = false;
  // ZeRO-Offload (plan::LayerStrategy::offload) beside every strategy that shards the optimizer states
  // (a ZeRO stage) or has one rank: only LayerStrategies has it; kiwi's search sets it when asked
  // (HybridSearchOptions::offload) where the cluster's device has a host (cost::DeviceSpec::HasHost)
  // and the model an optimizer step.
  bool allow_offload = false;
  // Recompute sets (plan::LayerStrategy::recompute) offered beside no recomputation, selective
  // recomputation and CKPT, not beside EP: only LayerStrategies has them; kiwi's search fills them from
  // its layer types' frontiers (solve/remat/recompute_frontier.h).
  std::vector<std::vector<std::string>> recompute_sets;
  bool mix_dp_sdp = false;       // keep the DP+SDP trees that Takeaway #3 removes
  int max_tp = 0;                // the largest TP degree, 0 = any (the search: a node's GPUs)
};

// The leaves of the trees for one PP degree: `num_devices` / pp devices per group. Deterministic
// order: by number of levels, then level paradigms and degrees, then CKPT off before on.
std::vector<TreeStrategy> DecisionTreeStrategies(int num_devices, int pp, const StrategySpaceOptions& options);
// All PP degrees (powers of two dividing num_devices), smallest first.
std::vector<TreeStrategy> DecisionTreeStrategies(int num_devices, const StrategySpaceOptions& options);

// The distinct strategies the layer estimator tells apart on a stage of `stage_devices` devices (it
// always places TP innermost, so level orders collapse): tp x dp = stage_devices, sequence parallelism
// only with tp > 1, a ZeRO stage only with dp > 1, EP and CP only below dp, CKPT off/on (and selective
// recomputation), offloading. Order: tp ascending, then SP off before on, then DP, ZeRO-1, ZeRO-2, SDP,
// then ep ascending, then cp ascending, then offload off before on, then no recomputation, selective, the
// recompute sets in their order, CKPT.
std::vector<plan::LayerStrategy> LayerStrategies(int stage_devices, const StrategySpaceOptions& options);

// Powers of two dividing n, ascending (1 first).
std::vector<int> PowerOfTwoDivisors(int n);

// Whether `s` is worth pricing for micro-batches of `microbatch` samples: a CP device does its cp 1
// twin's work on the same share of samples, plus the ring, so CP only where the dp ranks cannot each
// take whole samples, and then at the least degree that gives each replica whole ones. Strategies
// without CP always are.
bool WorthContextParallel(const plan::LayerStrategy& s, int64_t microbatch);

}  // namespace kiwi::solve::hybrid
