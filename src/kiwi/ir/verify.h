#pragma once
// Structural checks every graph passes before anything uses it (run after every reader and builder).
// Errors name the source (file), the node (id and name) and the field at fault, in one line:
//   "model.json: node 12 'fc1': inputs[1]: node 99 does not exist"
#include <optional>
#include <string_view>
#include <vector>

#include "kiwi/ir/graph.h"
#include "kiwi/util/result.h"

namespace kiwi::ir {

// Rejects: tensors of more than 2^50 bytes (checked without overflow), dangling inputs, cycles, an explicit order that is not a topological permutation of all
// nodes, non-positive dims (and empty names), shape/dtype mismatches per kind (a table of small
// per-kind checks: matmul contraction dims, elementwise broadcast, conv channels, ...), negative
// flops/bytes/costs, backward ops whose grad_of is not a forward node.
Status VerifyGraph(const Graph& graph, std::string_view source = "graph");

// A topological order that breaks ties by smallest id; nullopt if the graph has a cycle (or a
// dangling input).
std::optional<std::vector<NodeId>> TopologicalOrder(const Graph& graph);

}  // namespace kiwi::ir
