#pragma once
// ASPLOS 2025 IOPDDL contest files (../shared/benchmarks/README.md): `{"problem": {"name", "nodes":
// {"intervals", "costs", "usages"}, "edges": {"nodes", "costs"}, "usage_limit"}}`, .json or .json.gz.
// The reader streams the document (SAX) straight into an ir::ShardingProblem, so the largest public
// instance (6 million edge-cost entries) loads without a JSON tree in memory.
//
//   Result<ir::ShardingProblem> p = ReadIopddlFile("asplos-2025-iopddl-A.json.gz");
//   // error: "A.json.gz: problem.edges.costs[3]: has 5 entries, expected 2 x 3 = 6"
#include <string>
#include <string_view>

#include "kiwi/ir/sharding_problem.h"
#include "kiwi/util/result.h"

namespace kiwi::io {

// Parses an IOPDDL document; `source` names it in errors. Checks the structure as
// ir::ValidateShardingProblem does, plus: required fields present, intervals are [start, end] pairs
// with 0 <= start, node arrays of equal length, one cost matrix per edge.
Result<ir::ShardingProblem> ParseIopddlJson(std::string_view text, const std::string& source);
Result<ir::ShardingProblem> ReadIopddlFile(const std::string& path);

// The contest's own format, for tests and generated instances (exact round trip).
std::string WriteIopddlJson(const ir::ShardingProblem& problem);

// A solution in the contest's output format: "[0, 0, 2, 1, 0]".
std::string FormatIopddlSolution(const ir::Solution& solution);

}  // namespace kiwi::io
