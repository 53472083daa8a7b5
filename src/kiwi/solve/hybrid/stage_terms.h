#pragma once
// A layer's memory as the hybrid search adds a stage up layer by layer (cost::StageMemory's terms on
// one stage), shared by the layer DP's options (layer_dp.cpp) and StagePeakBounds (partition.cpp), and
// the (memory, peak) staircase both keep.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "kiwi/cost/pipeline.h"

namespace kiwi::solve::hybrid {

struct StageTerms {
  int64_t memory = 0;       // additive bytes: model states + the micro-batches in flight's activations
  int64_t activations = 0;  // what its backward pass frees before the earlier layers' run (one micro-batch's)
  int64_t headroom = 0;     // what its backward pass holds beyond `memory` at its peak
  int64_t Peak() const { return memory + headroom; }
  // These terms followed by `next`, the stage's next layer (cost::AppendedHeadroom).
  void Append(const StageTerms& next) {
    headroom = cost::AppendedHeadroom(headroom, next.activations, next.headroom);
    memory += next.memory;
    activations += next.activations;
  }
};

// Of `n` (memory, peak) pairs, the indices of those that no other beats with no more memory and no
// higher a peak (of equal pairs the first by memory, then peak), by memory ascending, peaks falling:
// whatever fits after some pair also fits after one of these.
template <typename MemoryOf, typename PeakOf>
std::vector<size_t> StaircaseIndices(size_t n, MemoryOf memory_of, PeakOf peak_of) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (memory_of(a) != memory_of(b)) return memory_of(a) < memory_of(b);
    return peak_of(a) < peak_of(b);
  });
  std::vector<size_t> out;
  int64_t least_peak = std::numeric_limits<int64_t>::max();
  for (size_t k : order)
    if (peak_of(k) < least_peak) {
      least_peak = peak_of(k);
      out.push_back(k);
    }
  return out;
}

}  // namespace kiwi::solve::hybrid
