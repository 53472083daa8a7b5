#pragma once
// Internal to solve/sharding/strategies.cpp: every operator of the IR vocabulary (ir/backward.h) as a
// loop nest, einsum style. Each tensor dim names the loop index it runs over (or none); an index that
// the output lacks is a contraction, whose split leaves partial sums. Example, matmul A[b,s,h] x W[h,f]:
//   indices b, s, f (output) and h (contracted); output {b, s, f}; operands {{b, s, h}, {h, f}}.
// Dims that cannot be split without halos or cross-device normalization (conv and pool spatial dims,
// the softmax/layernorm dim, cross-entropy's class dim) and broadcast size-1 dims name no index
// (kNoIndex): they always stay whole on every device.
#include <cstdint>
#include <optional>
#include <vector>

#include "kiwi/ir/graph.h"

namespace kiwi::solve::sharding::internal {

inline constexpr int kNoIndex = -1;

struct LoopIndex {
  int64_t size = 1;
  bool exact = false;  // a split must divide `size` even when uneven splits are allowed (reshape groups)
};

struct OpIndexing {
  std::vector<LoopIndex> indices;
  std::vector<int> output;                 // the index of each output dim, or kNoIndex
  std::vector<std::vector<int>> operands;  // per input, the index of each of its dims, or kNoIndex

  // True when `index` names no output dim: splitting it leaves partial sums.
  bool IsContracted(int index) const;
};

// The loop nest of `node` through a table of per-(kind, op) describers, or nullopt when its kind has
// none (opaque, collective, optimizer, unknown ops) or its shapes do not fit (an unverified graph);
// a returned nest always has one entry per output dim, per input and per input dim.
std::optional<OpIndexing> DescribeOp(const ir::Graph& graph, const ir::Node& node);

}  // namespace kiwi::solve::sharding::internal
