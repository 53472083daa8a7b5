#pragma once
// Readers of networkx node-link graphs (internal to io/; the public entry is io/graph_json.h).
// Both dialects become kOpaque nodes producing a u8 tensor of the node's output size in bytes, with
// measured_cost set from the file's cost; node ids are mapped to dense indices in ascending id order
// and each node keeps the file's name (Checkmate) or id (random-layered) in Node::name.
#include <optional>
#include <string>
#include <utility>

#include "kiwi/io/json_fields.h"
#include "kiwi/ir/graph.h"
#include "kiwi/util/result.h"

namespace kiwi::io::internal {

// Checkmate export: nodes {id, name, backward, cost_cpu, cost_ram}, links {source, target}.
Result<ir::Graph> ReadCheckmateNodeLink(const Json& doc, const std::string& source);

// Random layered graphs (Moccasin): nodes {name (the id), duration, out_cost, param_cost}, links
// {"0", "1"}, graph attribute `order` (a list, or a string holding one).
Result<ir::Graph> ReadRandomLayeredNodeLink(const Json& doc, const std::string& source);

// The first (node, input index) whose input does not come before the node in id order, if any: when
// there is none, ids ascending are a topological order.
std::optional<std::pair<ir::NodeId, size_t>> FirstLaterInput(const ir::Graph& g);

}  // namespace kiwi::io::internal
