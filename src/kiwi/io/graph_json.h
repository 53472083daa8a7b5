#pragma once
// Graph readers and the writer for kiwi's own graph JSON (docs/graph-format.md).
// Three formats are recognised from the document's fields:
//  - kiwi graph JSON: {"kiwi_graph_version": 1, "name": ..., "nodes": [{"id", "name", "kind", "op",
//    "pass", "dtype", "shape", "inputs", "flops", "bytes_accessed", "cost", "grad_of", "layer",
//    "scope", "attrs"}], "order": [...]}
//  - Checkmate's networkx node-link JSON: nodes {id, name, cost_cpu, cost_ram, backward}, links
//    {source, target}; order = ids ascending.
//  - random-layered node-link JSON: nodes {name (the id), duration, out_cost, param_cost}, links
//    {"0": source, "1": target}, graph attribute `order` (a list or its string form).
// Node-link graphs become kOpaque ops producing a u8 tensor of cost_ram/out_cost bytes with
// measured_cost = cost_cpu/duration. Every reader runs ir::VerifyGraph before returning.
#include <string>
#include <string_view>

#include "kiwi/ir/graph.h"
#include "kiwi/util/result.h"

namespace kiwi::io {

enum class GraphFormat { kKiwi, kCheckmateNodeLink, kRandomLayeredNodeLink };

// Reads and parses a graph file (.json, or .json.gz compressed). Errors (kBadInput) name the file and
// the field: "g.json: nodes[3].cost_ram: must be a positive integer".
Result<ir::Graph> ReadGraphFile(const std::string& path);
Result<ir::Graph> ParseGraphJson(std::string_view text, const std::string& source);
Result<GraphFormat> DetectGraphFormat(std::string_view text, const std::string& source);

// Serialises to kiwi graph JSON; ParseGraphJson(WriteGraphJson(g)) reproduces g exactly.
std::string WriteGraphJson(const ir::Graph& graph);

}  // namespace kiwi::io
