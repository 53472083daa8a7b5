#pragma once
// Internal to ir/verify.cpp: the per-(kind, op) shape and dtype checks, one small function each.
// A check returns the field at fault and the problem; VerifyGraph adds the source and the node.
#include <optional>
#include <string>

#include "kiwi/ir/graph.h"

namespace kiwi::ir::internal {

struct Problem {
  std::string field;  // "inputs[1]", "output.shape", "attrs.axes", ...
  std::string what;   // "contraction dim 5 does not match inputs[0]'s 4"
};

// Checks one node whose inputs are known to exist. Unknown ops of a known kind get the kind's
// default (forward) rule; kOpaque, kCollective and kOptimizer accept anything.
std::optional<Problem> CheckNodeShapes(const Graph& graph, const Node& node);

}  // namespace kiwi::ir::internal
