#pragma once
// Uniform layer-level plans: every layer gets the same strategy. Enumerates the hybrid space the
// Galvatron-BMW paper's baselines live in (pure DP, SDP/ZeRO-3, TP/Megatron, PP/GPipe and their
// combinations, each with and without checkpointing) and ZeRO-1/2, sequence parallelism, selective
// recomputation and expert parallelism beside them; the simulator judges each one.
#include <cstdint>
#include <string>
#include <vector>

#include "kiwi/plan/plan.h"

namespace kiwi::solve {

struct NamedLayerPlan {
  std::string name;  // "TP2xDP4+CKPT", "PP2xSDP4"
  plan::LayerPlan plan;
};

struct UniformPlanOptions {
  int num_layers = 1;
  int num_devices = 1;
  int64_t global_batch = 1;
  bool allow_sdp = true;     // ZeRO-3
  bool allow_zero12 = true;  // ZeRO-1 and ZeRO-2
  bool allow_sequence_parallel = true;  // Megatron SP beside TP
  bool allow_checkpoint = true;
  bool allow_selective_recompute = true;  // of the attention core (for models that have one)
  // Every layer a mixture of this many experts: expert parallelism beside (0: none).
  int64_t experts = 0;
  // The sequence a ring splits in every layer (cost::LayerModel::ContextParallelSequence): context
  // parallelism beside (0: none), at the least CP degree that gives each replica whole samples, and only
  // where the batch does not divide over dp (elsewhere the cp 1 plan does the same work without a ring).
  int64_t context_sequence = 0;
  // Recompute sets every layer can run (solve/remat/recompute_frontier.h CommonRecomputeSets): each a
  // plan beside none, selective and CKPT, not beside EP.
  std::vector<std::vector<std::string>> recompute_sets = {};
  int max_tp = 0;  // the largest TP degree, 0 = any
  // Gradient accumulation searched: every number of micro-batches dividing the batch over the replicas
  // (1F1B with pipelining), instead of the one count below.
  bool sweep_micro_batches = false;
  // With pipelining and the sweep, interleaved 1F1B too: v > 1 model chunks per stage where the layers
  // split into pp x v equal chunks and the micro-batches are a multiple of pp (Megatron-LM's rules).
  bool interleave = false;
  // Each plan's `layers` holds its one strategy instead of num_layers copies of it (ExpandUniform
  // gives the plan): thousands of plans of a 10,000-layer model then take kilobytes, not gigabytes.
  bool compact = false;
};

// Degrees are powers of two with pp * tp * dp = num_devices and pp <= num_layers. Layers are split
// evenly over stages (earlier stages take the remainder). Micro-batches: 1 without pipelining; with
// pipelining, global_batch / (dp / cp) (micro-batches of one sample per replica: the fewest bubbles);
// with sweep_micro_batches, each count in ascending order (then each interleaving).
// Plans whose batch does not divide over the dp / cp replicas are skipped. The strategies are hybrid::LayerStrategies' of a
// stage. Deterministic order: pp, then LayerStrategies' (tp, SP, ZeRO stage, checkpoint).
std::vector<NamedLayerPlan> UniformLayerPlans(const UniformPlanOptions& options);

// A compact plan (UniformPlanOptions::compact) with its strategy given to each of `num_layers` layers.
plan::LayerPlan ExpandUniform(plan::LayerPlan compact, int num_layers);

// Splits n layers over k stages as evenly as possible, earlier stages first: (5, 2) -> {3, 2}.
std::vector<int> EvenPartition(int num_layers, int num_stages);

}  // namespace kiwi::solve
