#pragma once
// FLOPs and bytes accessed of every operator, from its kind, op and shapes: the one place these
// formulas live (the model zoo, the backward builder and the PyTorch capture all call it).
#include "kiwi/ir/graph.h"

namespace kiwi::ir {

// Sets flops and bytes_accessed (input bytes + output bytes) of every node of a known kind; leaves
// kOpaque nodes (profiled graph files) untouched. Inputs, parameters and optimizer state get 0.
void AnnotateFlopsAndBytes(Graph& graph);

// The formula for one node (reads its inputs' shapes from `graph`).
double OpFlops(const Graph& graph, const Node& node);

}  // namespace kiwi::ir
