#pragma once
// Galvatron's hybrid-parallel strategy config (galvatron_config_*.json, its JSON config mode), so a
// kiwi layer plan runs in Galvatron and a Galvatron plan can be replayed by kiwi:
//   {"pp_deg": 2, "tp_sizes_enc": "1,1,2,2", "tp_consecutive_flags": "1,1,1,1",
//    "dp_types_enc": "0,0,1,1", "use_sp": "0,0,0,0", "checkpoint": "0,1,0,0", "global_bsz": 64,
//    "chunks": 8, "pp_division": "2,2", "pipeline_type": "pipedream_flush", "default_dp_type": "ddp",
//    "vtp": 1, "vsp": 0, "vcp": 1, "embed_sdp": 0, "vocab_sdp": 0, "cp_sizes_enc": "1,1,1,1"}
// Per-layer lists are comma-separated strings (arrays are accepted too). The DP degree of a layer
// is world / (pp_deg x tp); dp_types_enc 1 = sharded DP (FSDP/ZeRO-3), 0 = default_dp_type.
// "pipedream_flush" is 1F1B-flush. vtp/vsp/vcp are the embeddings' and head's TP degree, Ulysses flag
// and CP degree; Galvatron's search writes their ZeRO-3 flag as embed_sdp, its runtime reads vocab_sdp
// (core/search_engine/search_engine.py save_results, core/runtime/hybrid_parallel_config.py): kiwi
// writes both and reads either. Galvatron's Megatron sequence parallelism is a run-wide flag
// (sequence_parallel), not in the config.
#include <string>
#include <string_view>
#include <vector>

#include "kiwi/plan/plan.h"
#include "kiwi/util/result.h"

namespace kiwi::io {

// kiwi's estimator places TP innermost, so every layer is written with tp_consecutive_flags 1.
// Galvatron's zero2 is kiwi's ZeRO-1 under gradient accumulation (by default Galvatron reduce-scatters
// only after the last backward pass, keeping whole gradients) and ZeRO-2 with one micro-batch.
// Errors (kBadInput) name the first layer Galvatron cannot express: the other of ZeRO-1/2, or plain DP
// beside it in one plan (Galvatron has one default data-parallel type beside per-layer ZeRO-3), or an
// interleaved 1F1B plan. A layer's ring attention degree is written as its cp_sizes_enc (1 without).
// `sequence_parallel`: for a Galvatron run with sequence_parallel on, where every TP layer runs Megatron
// SP (a TP layer without it is then refused, naming it); off, a layer with SP is refused.
Result<std::string> WriteGalvatronConfig(const plan::LayerPlan& plan, bool sequence_parallel = false);

// How a config is read: on `num_devices` devices; `sequence_parallel`: the run has Galvatron's
// sequence_parallel on, so its TP layers are Megatron TP + SP.
struct GalvatronConfigReading {
  int num_devices = 0;
  bool sequence_parallel = false;
};

// Reads a config. Errors (kBadInput) name the field: lists of different lengths, degrees that do not
// divide the devices, a world_size (written by Galvatron's search) other than the cluster's, and what
// kiwi cannot model: TP spread across DP groups (tp_consecutive_flags 0 with tp and dp > 1). A layer with
// use_sp 1 runs Ulysses of its tp_sizes_enc degree: kiwi's cp (plan::LayerStrategy::ulysses) over dp =
// the stage's devices. cp_sizes_enc (Galvatron's ring attention; absent: 1) multiplies kiwi's cp: a ring
// alone, or after Ulysses' all-to-alls (USP). default_dp_type "zero3" makes every layer ZeRO-3; "zero2" makes the layers of
// dp_types_enc 0 ZeRO-1 (chunks > 1) or ZeRO-2 (chunks 1), as above. kiwi places the embeddings with
// the first layer and the head with the last: an embeddings strategy (vtp, embed_sdp) other than
// theirs (vtp, vsp, vcp, embed_sdp) is priced as theirs, and said so in `notes` (one line each) when given.
Result<plan::LayerPlan> ParseGalvatronConfig(std::string_view text, const std::string& source,
                                             const GalvatronConfigReading& reading,
                                             std::vector<std::string>* notes = nullptr);
Result<plan::LayerPlan> ReadGalvatronConfigFile(const std::string& path, const GalvatronConfigReading& reading,
                                                std::vector<std::string>* notes = nullptr);

}  // namespace kiwi::io
