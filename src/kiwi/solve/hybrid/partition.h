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

// Stage memory (Eq. 1) and stage micro-batch time C_s for fixed per-layer strategies, balanced.
Partition MemoryBalancedPartition(const CostTables& tables, const PipelineConfig& config, const std::vector<int>& strategies,
                                  Clock::time_point deadline = Clock::time_point::max());
Partition TimeBalancedPartition(const CostTables& tables, const PipelineConfig& config, const std::vector<int>& strategies,
                                Clock::time_point deadline = Clock::time_point::max());

// The smallest peak any assignment of allowed strategies reaches per stage, for a given partition or
// for the best partition: caps on the two transients (largest recomputation, largest SDP gather) are
// enumerated, and under each pair every layer takes its smallest-memory strategy. Exact.
class StagePeakBounds {
 public:
  StagePeakBounds(const CostTables& tables, const PipelineConfig& config, const std::vector<bool>& allowed);
  int64_t StagePeak(int stage, int first, int count) const;   // kUnreachable if nothing fits
  int64_t Peak(const Partition& partition) const;             // max over stages
  Partition BestPartition(Clock::time_point deadline = Clock::time_point::max()) const;  // minimizes Peak
  static constexpr int64_t kUnreachable = int64_t{1} << 60;

 private:
  struct Cap { int64_t recompute, gather; };
  std::vector<Cap> caps_;
  int num_layers_ = 0;
  int num_stages_ = 0;
  std::vector<int64_t> prefix_;  // [cap][stage][layer + 1]: sums of the smallest memory under the cap
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
