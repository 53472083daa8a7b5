#pragma once
// Pipeline partitions (layers per stage) for the search: Galvatron-BMW's memory-balanced start
// (PP_Partition_Init), the time-balanced partition, the partition with the smallest feasible peak,
// every partition (tests), and Algorithm 2's adjustment (Appendix B) that moves boundary layers off
// the slowest stage while memory allows.
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "kiwi/solve/hybrid/layer_costs.h"

namespace kiwi::solve::hybrid {

using Partition = std::vector<int>;

using Clock = std::chrono::steady_clock;

// Minimizes max_s cost(s, first, count) over partitions of num_layers into num_stages non-empty
// contiguous stages (linear-partition DP, O(stages * layers^2) calls). Ties: the first found, with
// earlier stages as long as possible. `grows`: a stage's cost never falls as it takes in earlier
// layers, so the DP stops scanning a stage's starts at the first that alone costs as much as the best
// found (exact, and far fewer calls). Past `deadline` it gives up and returns the even partition (the
// search stops at its next check of the same deadline).
Partition LinearPartition(int num_layers, int num_stages, const std::function<double(int, int, int)>& cost,
                          bool grows = false, Clock::time_point deadline = Clock::time_point::max());

// Stage memory (cost::StageMemory::PeakBytes) and stage micro-batch time C_s for fixed per-layer strategies, balanced.
Partition MemoryBalancedPartition(const CostTables& tables, const PipelineConfig& config, const std::vector<int>& strategies,
                                  Clock::time_point deadline = Clock::time_point::max());
Partition TimeBalancedPartition(const CostTables& tables, const PipelineConfig& config, const std::vector<int>& strategies,
                                Clock::time_point deadline = Clock::time_point::max());

// The smallest peak (cost::StageMemory::PeakBytes) any assignment of allowed strategies reaches per
// stage, for a given partition (exact: a DP over the stage's layers keeping the (memory, peak) pairs no
// other beats, as the layer DP's labels) or for the best partition by an upper bound that takes O(1)
// per stage: a cap on every layer's own headroom (its transient and gather) is enumerated, and under
// each cap every layer takes its smallest-memory strategy; that assignment's peak is at most the sum
// plus the cap (a stage's headroom is a layer's, less the later layers' activations).
class StagePeakBounds {
 public:
  StagePeakBounds(const CostTables& tables, const PipelineConfig& config, const std::vector<bool>& allowed);
  int64_t StagePeak(int stage, int first, int count) const;   // kUnreachable if nothing fits
  int64_t Peak(const Partition& partition) const;             // max over stages
  // The partition with the least upper bound (the caps' above) on its largest stage peak.
  Partition BestPartition(Clock::time_point deadline = Clock::time_point::max()) const;
  static constexpr int64_t kUnreachable = int64_t{1} << 60;

 private:
  const std::vector<StageTerms>& OptionsOf(int stage, int layer) const;  // a layer's strategies on a stage
  int64_t CappedStagePeak(int stage, int first, int count) const;

  std::vector<int64_t> caps_;  // ascending
  int num_layers_ = 0;
  int num_stages_ = 0;
  int num_types_ = 0;
  std::vector<int> type_of_;
  std::vector<int64_t> prefix_;  // [cap][stage][layer + 1]: sums of the smallest memory under the cap
  std::vector<std::vector<StageTerms>> options_;  // [stage][type, then the first and the last layer]
};

// Every partition of num_layers into num_stages non-empty stages (for exhaustive tests).
std::vector<Partition> AllPartitions(int num_layers, int num_stages);

// Algorithm 2, lines 13-14: move the first layer of the slowest stage to the stage before it, or its
// last layer to the stage after it, keeping every layer's strategy; a move is kept (validate) when no
// stage then takes longer than the slowest did, no stage exceeds the budget, and no stage exceeds the
// largest stage memory of the time-balanced partition under the same strategies.
std::vector<Partition> AdjustPartition(const CostTables& tables, const PipelineConfig& config, const Partition& partition,
                                       const std::vector<int>& strategies, int64_t budget,
                                       Clock::time_point deadline = Clock::time_point::max());

}  // namespace kiwi::solve::hybrid
