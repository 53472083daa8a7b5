#pragma once
// Galvatron's profile files, so users with Galvatron profiles get kiwi's plans:
//  - computation profile (computation_profiling_*.json): "layertype_{i}_bsz{b}_seq{s}" -> forward
//    milliseconds of one layer of type i per sample; "layertype_other_..." for embeddings/head;
//  - memory profile (memory_profiling_*.json): "layertype_{i}" -> {"parameter_size": MB,
//    "tp_activation_per_bsz_dict": {"1": MB per sample, ..., "checkpoint": MB per sample}}, either
//    directly or keyed by sequence length; "other_memory_pp_off" -> {"model_states": MB,
//    "activation": MB per sample} (numbers, or objects keyed by TP degree: the "1" entry is used);
//  - hardware: allreduce_bandwidth_*.json ("allreduce_size_{g}_consec_{0|1}" -> GB/s),
//    p2p_bandwidth_*.json ("pp_size_{k}" -> GB/s), overlap_coefficient.json ("overlap_coe").
// MB are 2^20 bytes, GB/s 10^9 bytes/s. The backward pass is taken as twice the forward (§V), a
// layer's boundary activation as its checkpointed activation, and its Megatron TP traffic as twice
// that boundary (as cost::BuildLayerModel does).
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/util/result.h"

namespace kiwi::io {

struct GalvatronModelOptions {
  std::string name = "galvatron";
  std::vector<int> layers_per_type;        // Galvatron's layer_num list, e.g. {24, 24} for T5
  int64_t seq = 0;                         // sequence length to pick among several (0: the only one)
  double state_bytes_per_parameter_byte = 3.0;  // gradients + optimizer states per parameter byte (fp32 Adam: 3)
};

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
};

// The three hardware files' texts and the names errors give them; a file with an empty name was not
// given (the base cluster's figures stay).
struct GalvatronHardwareTexts {
  std::string_view allreduce, p2p, overlap;
  std::string allreduce_source, p2p_source, overlap_source;
};

// The intra-node link gets the bandwidth of an all-reduce over one node's devices (consec_1), the
// inter-node link that of an all-reduce over all devices when there are several nodes. Empty paths
// are skipped (the base cluster's figures stay).
Result<GalvatronHardware> ParseGalvatronHardware(const GalvatronHardwareTexts& texts, cost::Cluster base);
Result<GalvatronHardware> ReadGalvatronHardware(const std::string& allreduce_path, const std::string& p2p_path,
                                                const std::string& overlap_path, cost::Cluster base);

}  // namespace kiwi::io
