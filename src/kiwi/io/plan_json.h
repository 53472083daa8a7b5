#pragma once
// The versioned plan JSON (docs/plan-format.md):
// {"kiwi_plan_version": 1, "graph": ..., "model": ..., "cluster": ..., "solver": ...,
//  "operator": {"mesh": [2, 4], "shardings": [{"node": 3, "output": "S0R", "operands": ["S0R", "RR"],
//               "reduce_axes": [], "strategy": "..."}], "schedule": [{"op": "compute", "node": 0}, ...]},
//  "layer": {"layers": [{"tp": 2, "dp": 4, "zero": 0, "checkpoint": true}], "pp_degree": 1,
//            "pp_partition": [32], "global_batch": 64, "micro_batches": 1, "pipeline": "1f1b"},
//  "claims": {"peak_memory_bytes": ..., "iteration_seconds": ...}}
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kiwi/plan/plan.h"
#include "kiwi/util/result.h"

namespace kiwi::io {

Result<plan::Plan> ReadPlanFile(const std::string& path);
Result<plan::Plan> ParsePlanJson(std::string_view text, const std::string& source);
std::string WritePlanJson(const plan::Plan& plan);  // ParsePlanJson(WritePlanJson(p)) == p

// One layer strategy as the plan's "layer.layers" entries (Json = nlohmann::ordered_json) and `kiwi
// hybrid/plan --json` (nlohmann::json) write it: tp, dp, zero, checkpoint, sequence_parallel,
// selective_recompute, ep and cp where they are above 1, ulysses (its degree) where above 1, offload where true, recompute where not empty; with `contract_sdp`, also CONTRACT.md's "sdp"
// (whether ZeRO-3 is in effect).
template <typename Json>
Json LayerStrategyJson(const plan::LayerStrategy& s, bool contract_sdp = false) {
  Json j;
  j["tp"] = s.tp;
  j["dp"] = s.dp;
  if (contract_sdp) j["sdp"] = s.Shards(plan::Zero::kParameters);
  j["zero"] = static_cast<int>(s.zero);
  j["checkpoint"] = s.checkpoint;
  j["sequence_parallel"] = s.sequence_parallel;
  j["selective_recompute"] = s.selective_recompute;
  if (s.ep > 1) j["ep"] = s.ep;
  if (s.cp > 1) j["cp"] = s.cp;
  if (s.Ulysses()) j["ulysses"] = s.UlyssesDegree();
  if (s.offload) j["offload"] = true;
  if (!s.recompute.empty()) j["recompute"] = s.recompute;
  return j;
}

}  // namespace kiwi::io
