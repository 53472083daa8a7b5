#pragma once
// Galvatron's profile files, so users with Galvatron profiles get kiwi's plans, read the way Galvatron's
// own estimator reads them (Hetu-Galvatron galvatron/core/search_engine/search_engine.py and
// core/cost_model/components/*.py, v3):
//  - computation profile (computation_profiling_{fp32,bf16,fp16}_*.json): "layertype_{i}_bsz{b}_seq{s}" ->
//    forward milliseconds of one layer of type i per sample at micro-batch b; "layertype_other_..." for
//    embeddings + head. Galvatron's "batch" mode fits b x ms = slope x b + intercept: a per-sample time and
//    a fixed time per micro-batch (kiwi's LayerProfile::forward_overhead_seconds, not split by TP); its
//    "static" and "sequence" modes as GalvatronTimeMode says;
//  - memory profile (memory_profiling_*.json): "layertype_{i}" (or "layertype_{i}_sp", taken with
//    sequence parallelism) -> {"parameter_size": MB, "tp_activation_per_bsz_dict": {"1": MB per sample,
//    ..., "checkpoint": MB per sample}}, directly or keyed by sequence length; "other_memory_pp_off",
//    "other_memory_pp_on_first", "other_memory_pp_on_last" (and their "_sp" twins) -> {"model_states": MB,
//    "activation": MB per sample}, numbers or objects keyed by TP degree;
//  - hardware: allreduce_bandwidth_*.json ("allreduce_size_{g}_consec_{0|1}" -> GB/s),
//    p2p_bandwidth_*.json ("pp_size_{k}" -> GB/s), overlap_coefficient.json ("overlap_coe"),
//    sp_time_*.json ("allreduce_size_{g}_{m}MB_time", "all2all_size_{g}_{m}MB_time" -> ms: collectives
//    timed over message sizes; an all-gather or reduce-scatter of m MB is half an all-reduce's time, as
//    Galvatron's utils/config_utils.py remap_config_for_latency takes it).
// MB are 2^20 bytes, GB/s 10^9 bytes/s. parameter_size is the layer's parameters in fp32 whatever the
// training precision (Galvatron's model states are 4x it: fp32 Adam, or 16-bit weights and gradients
// with fp32 master weights and Adam states), and its 16-bit runs communicate half of it. The backward
// pass is twice the forward (bct_fct_coe), a layer's boundary activation its checkpointed activation.
// Where a dict has several TP degrees, the part TP keeps whole is fitted from degree 1 and the largest
// (whole + rest / tp through both points).
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/cost/profile.h"
#include "kiwi/util/result.h"

namespace kiwi::io {

// The precision Galvatron profiled and trains in (its mixed_precision: fp32, bf16, fp16).
enum class GalvatronPrecision { kFp32, kBf16, kFp16 };
inline constexpr std::string_view kGalvatronPrecisionNames = "fp32, bf16, fp16";
std::optional<GalvatronPrecision> ParseGalvatronPrecision(std::string_view name);
// What a profile's file name says (computation_profiling_bf16_llama2-7b_all.json: bf16), if anything.
std::optional<GalvatronPrecision> GalvatronPrecisionOfFile(std::string_view path);

// How the profiles were taken and are read (Galvatron's time_profile_mode and memory_profile_mode):
// time: "static" (the profiled per-sample time), "batch" (a line over micro-batch sizes: per sample and
// per micro-batch), "sequence" (micro-batch 1 over sequence lengths: a quadratic in the length for a
// layer, a line for the "other" time, at the sequence length asked for); memory: "static" (the entries
// at the sequence length) or "sequence" (parameters at the shortest profiled length, activations at the
// longest scaled linearly to the one asked for).
enum class GalvatronTimeMode { kStatic, kBatch, kSequence };
enum class GalvatronMemoryMode { kStatic, kSequence };
inline constexpr std::string_view kGalvatronTimeModeNames = "static, batch, sequence";
inline constexpr std::string_view kGalvatronMemoryModeNames = "static, sequence";
std::optional<GalvatronTimeMode> ParseGalvatronTimeMode(std::string_view name);
std::optional<GalvatronMemoryMode> ParseGalvatronMemoryMode(std::string_view name);

struct GalvatronModelOptions {
  std::string name = "galvatron";
  std::vector<int> layers_per_type;        // Galvatron's layer_num list, e.g. {24, 24} for T5
  int64_t seq = 0;                         // sequence length to pick among several (0: the only one)
  // The training precision; unset: the computation profile's file name says, else fp32.
  std::optional<GalvatronPrecision> precision;
  // Read the "_sp" memory entries first (Galvatron's sequence_parallel); either kind is read where it
  // is the only one.
  bool sequence_parallel = false;
  // The model's hidden size: TP's collectives then carry the [seq, hidden] hidden states in the training
  // precision, as Galvatron's message sizes do (0: twice the checkpointed activation per sample).
  int64_t hidden = 0;
  // Gradients + optimizer states per parameter byte; 0: Galvatron's (3 in fp32, 7 in 16 bits).
  double state_bytes_per_parameter_byte = 0.0;
  // kBatch fits a line where several micro-batch sizes are profiled (one: their per-sample time). The
  // sequence modes need `seq`.
  GalvatronTimeMode time_mode = GalvatronTimeMode::kBatch;
  GalvatronMemoryMode memory_mode = GalvatronMemoryMode::kStatic;
};

// A Galvatron reading name not known: its key ("precision", "time_mode", "memory_mode") and why.
struct GalvatronNameError {
  std::string_view key;
  std::string message;
};
// Sets `options`' precision and modes from their names as flags and plan files spell them ("" keeps the
// default); the first name not known is the error.
std::optional<GalvatronNameError> SetGalvatronNames(std::string_view precision, std::string_view time_mode,
                                                    std::string_view memory_mode, GalvatronModelOptions& options);

struct GalvatronProfileTexts {
  std::string_view computation, memory;
  std::string computation_source, memory_source;
};

Result<cost::LayerModel> ParseGalvatronModel(const GalvatronProfileTexts& texts, const GalvatronModelOptions& options);
Result<cost::LayerModel> ReadGalvatronModel(const std::string& computation_path, const std::string& memory_path,
                                           const GalvatronModelOptions& options);

struct GalvatronHardware {
  cost::Cluster cluster;                 // `base` with link bandwidths from the all-reduce profile
  double overlap_coefficient = 1.3;      // cost::CostModelOptions::overlap_slowdown
  std::map<int, double> p2p_bandwidth;   // pp_size -> bytes/s, as measured (informational)
  // The collectives' measured times (cost::DeviceProfile::collectives), from the sp_time file.
  std::vector<cost::CollectiveSample> collectives;
};

// The four hardware files' texts and the names errors give them; a file with an empty name was not
// given (the base cluster's figures stay).
struct GalvatronHardwareTexts {
  std::string_view allreduce, p2p, overlap, sp_time;
  std::string allreduce_source, p2p_source, overlap_source, sp_time_source;
};

// The intra-node link gets the bandwidth of an all-reduce over one node's devices (consec_1), the
// inter-node link that of an all-reduce over all devices when there are several nodes. Empty paths
// are skipped (the base cluster's figures stay).
Result<GalvatronHardware> ParseGalvatronHardware(const GalvatronHardwareTexts& texts, cost::Cluster base);
Result<GalvatronHardware> ReadGalvatronHardware(const std::string& allreduce_path, const std::string& p2p_path,
                                                const std::string& overlap_path, cost::Cluster base,
                                                const std::string& sp_time_path = "");

}  // namespace kiwi::io
