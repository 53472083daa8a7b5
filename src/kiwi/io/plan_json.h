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

#include "kiwi/plan/plan.h"
#include "kiwi/util/result.h"

namespace kiwi::io {

Result<plan::Plan> ReadPlanFile(const std::string& path);
Result<plan::Plan> ParsePlanJson(std::string_view text, const std::string& source);
std::string WritePlanJson(const plan::Plan& plan);  // ParsePlanJson(WritePlanJson(p)) == p

}  // namespace kiwi::io
