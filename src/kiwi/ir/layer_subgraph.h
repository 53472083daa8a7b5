#pragma once
// One layer of a training graph as a graph of its own: the layer's forward and backward operators and
// its parameters, in the training graph's order, each tensor they read from outside the layer (the
// previous layer's output, the gradient from the next layer's backward pass) an input placed right
// before its first reader. What operator-level solvers (KIWI's joint sharding + recomputation) refine
// inside a layer-level plan's layer, without the embeddings, head and other layers around it.
#include <cstdint>

#include "kiwi/ir/graph.h"
#include "kiwi/util/result.h"

namespace kiwi::ir {

// Errors (kBadInput): a graph of storages, a layer index the graph does not have.
Result<Graph> LayerSubgraph(const Graph& training, int32_t layer);

}  // namespace kiwi::ir
