#pragma once
// Activation bytes one tensor-parallel rank keeps (Korthikanti et al. 2023, "Reducing Activation
// Recomputation in Large Transformer Models", eq. 2 and 4). Megatron TP splits the tensors between a
// column-parallel and the next row-parallel linear over the t ranks; without sequence parallelism
// every rank keeps the others whole (a GPT layer: sbh(10 + 24/t + 5as/(ht)) bytes in 16-bit); with
// it they are split over the sequence as well (sbh(34/t + 5as/(ht))).
#include <cstdint>

namespace kiwi::cost {

// `split_bytes`: what TP divides over the ranks; `whole_bytes`: what it keeps on every rank without
// sequence parallelism. Rounded up to whole bytes per rank.
int64_t TpRankActivationBytes(int64_t split_bytes, int64_t whole_bytes, int tp, bool sequence_parallel = false);

}  // namespace kiwi::cost
