// Korthikanti et al. 2023, eq. 2 (TP) and eq. 4 (TP + sequence parallelism): activation_memory.h.
#include "kiwi/cost/activation_memory.h"

#include <algorithm>

namespace kiwi::cost {

int64_t TpRankActivationBytes(int64_t split_bytes, int64_t whole_bytes, int tp, bool sequence_parallel) {
  const int64_t t = std::max(tp, 1);
  auto per_rank = [t](int64_t bytes) { return (std::max<int64_t>(bytes, 0) + t - 1) / t; };
  if (sequence_parallel) return per_rank(split_bytes + whole_bytes);
  return per_rank(split_bytes) + std::max<int64_t>(whole_bytes, 0);
}

}  // namespace kiwi::cost
