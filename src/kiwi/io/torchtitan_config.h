#pragma once
// A layer plan as torchtitan's job config (TOML: its [training], [parallelism] and
// [activation_checkpoint] sections), so a kiwi plan runs in torchtitan and a torchtitan config can be
// replayed and compared by kiwi:
//   [training]              local_batch_size = 8, global_batch_size = 64
//   [parallelism]           data_parallel_replicate_degree = 1, data_parallel_shard_degree = 4,
//                           tensor_parallel_degree = 2, pipeline_parallel_degree = 1,
//                           pipeline_parallel_schedule = "1F1B", pipeline_parallel_microbatch_size = 1,
//                           context_parallel_degree = 1, expert_parallel_degree = 1
//   [activation_checkpoint] mode = "selective", selective_ac_option = "op"
// torchtitan composes PyTorch's own pieces: FSDP2 (ZeRO-3) over dp_shard x cp ranks, or DDP over
// dp_replicate ranks; DTensor tensor parallelism with sequence parallelism; torch.distributed.pipelining
// (1F1B, GPipe, Interleaved1F1B); activation checkpointing of every layer, every k-th layer
// (selective_ac_option = "k") or by ops ("op", kiwi's selective recomputation). Every layer has the
// same parallelism. Its local_batch_size is one data-parallel rank's samples per optimizer step
// (split into micro-batches of pipeline_parallel_microbatch_size with pipelining); a global_batch_size
// above local_batch_size x the data-parallel ranks accumulates gradients over that many local batches.
#include <string>
#include <string_view>

#include "kiwi/plan/plan.h"
#include "kiwi/util/result.h"

namespace kiwi::io {

// Errors (kBadInput) name what torchtitan cannot express and the first layer that has it: a
// parallelism unlike layer 0's, ZeRO-1/2, plain data parallelism beside context parallelism (torchtitan
// shards over dp_shard x cp), tensor parallelism without sequence parallelism, a recompute set,
// optimizer offloading, checkpointing that is neither every layer nor every k-th of each stage.
Result<std::string> WriteTorchtitanConfig(const plan::LayerPlan& plan);

// Reads a config as a plan of `num_layers` layers on `num_devices` devices (missing fields take
// torchtitan's defaults: degrees 1, data_parallel_shard_degree -1 = the devices left, 1F1B, no
// checkpointing). Errors (kBadInput) name `source` and the field: TOML syntax (with its line), a value of
// the wrong type or out of range, degrees that do not multiply to the devices, HSDP (replicate and shard
// both above 1), a batch that does not split, an unknown schedule or checkpointing mode.
Result<plan::LayerPlan> ParseTorchtitanConfig(std::string_view text, const std::string& source, int num_devices,
                                              int num_layers);
Result<plan::LayerPlan> ReadTorchtitanConfigFile(const std::string& path, int num_devices, int num_layers);

}  // namespace kiwi::io
