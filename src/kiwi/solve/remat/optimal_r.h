#pragma once
// Checkmate §5.1 (two-phase rounding): "given S, the optimal R is easy". With the stored sets fixed, stage
// t must compute order[t], every tensor S[t+1] keeps that S[t] does not hold, and, walking dependencies
// backwards, every input of a computed node that is not stored: that closure is the cheapest R, and,
// because computing less never leaves more resident, also the one with the least memory.
//
//   StageSolution sol = OptimalR(g, std::move(rounded_s));   // R filled, useless S entries dropped
//   if (StagePeakMemory(g, sol) <= budget) ...               // feasible rounding
#include <cstdint>
#include <vector>

#include "kiwi/solve/remat/checkmate_schedule.h"

namespace kiwi::solve::remat {

// S[t] has t entries (S[0] empty), as in StageSolution. Persistent positions are forced stored after
// their stage. Stored entries that nothing uses (no reader computed in the stage, not kept for the next
// one) are dropped, since they only cost memory. The result passes CheckStageSolution.
StageSolution OptimalR(const StageGraph& g, std::vector<std::vector<uint8_t>> S);

}  // namespace kiwi::solve::remat
