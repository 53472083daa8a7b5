#pragma once
// A layer plan as Megatron-LM's command-line arguments (pretrain_gpt.py's parallelism, batch and
// recomputation flags), so a kiwi plan runs in Megatron-LM and a Megatron-LM configuration can be
// replayed and compared by kiwi:
//   --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --context-parallel-size 1
//   --sequence-parallel --use-distributed-optimizer --micro-batch-size 1 --global-batch-size 64
//   --num-layers-per-virtual-pipeline-stage 2 --recompute-granularity selective
// Megatron-LM runs every layer with one strategy over data x context x pipeline x tensor parallel
// ranks (world = tp x cp x pp x dp), splits the layers evenly over the stages, and shards over the
// data-parallel ranks at most the optimizer states (its distributed optimizer, ZeRO-1).
#include <string>
#include <string_view>

#include "kiwi/plan/plan.h"
#include "kiwi/util/result.h"

namespace kiwi::io {

// One flag per line (value after a space), in a fixed order. Errors (kBadInput) name what Megatron-LM
// cannot express and the first layer that has it: a layer strategy unlike the first (a per-layer mix),
// ZeRO-2/3, a recompute set, optimizer offloading, GPipe, stages of unequal layers.
Result<std::string> WriteMegatronArgs(const plan::LayerPlan& plan);

// Reads arguments (whitespace-separated, `--flag value` or `--flag=value`, shell line continuations and
// `#` comments allowed; flags that do not shape the plan are ignored) as a plan of `num_layers` layers on
// `num_devices` devices. Missing parallelism flags are Megatron-LM's defaults (1, off); the batch flags
// are required. Errors (kBadInput) name `source` and the flag: a value that is not a positive integer or
// one of the choices, degrees that do not divide the devices or the layers, a batch that does not split
// into micro-batches over the data-parallel ranks, --num-layers unlike the model's.
Result<plan::LayerPlan> ParseMegatronArgs(std::string_view text, const std::string& source, int num_devices,
                                          int num_layers);
Result<plan::LayerPlan> ReadMegatronArgsFile(const std::string& path, int num_devices, int num_layers);

}  // namespace kiwi::io
