#pragma once
// Linear training chains: the graphs the exact chain dynamic program (chain_dp.h) solves.
//
//   std::string why;
//   std::optional<Chain> chain = ExtractChain(problem, &why);
//   if (!chain) fmt::print("not a chain: {}\n", why);
//
// Canonical form (1-based, as in Griewank & Walther's revolve and Beaumont et al. 2019, "Optimal
// checkpointing for heterogeneous chains"): forward ops f_1..f_n, f_1 reading no chain tensor and f_i
// reading only f_{i-1}; backward ops b_h, b_{h-1}, ..., b_l computed in that order, where h = n or
// h = n + 1 (a loss-like node that reads only f_n is b_{n+1}), b_t reads b_{t+1} (the incoming
// gradient, t < h) and any subset of {f_{t-1}, f_t}. Every other node must be persistent (parameters,
// optimizer state: no inputs, computed once at their place in the order, never freed). Checkmate's
// VGG exports fit with the loss as f_n: "X_backward" reads X, the op after X and the next gradient.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiwi/ir/graph.h"
#include "kiwi/solve/remat/problem.h"

namespace kiwi::solve::remat {

inline constexpr uint8_t kReadsPrevious = 1;  // b_t reads f_{t-1}
inline constexpr uint8_t kReadsSame = 2;      // b_t reads f_t

struct Chain {
  int32_t n = 0;  // forward ops f_1..f_n
  int32_t h = 0;  // first backward op b_h (h = n or n + 1)
  int32_t l = 1;  // last backward op b_l (l >= 1)
  // Indexed 0..n (f) and 0..h+1 (b); entries outside f_1..f_n and b_l..b_h are 0 / kNoNode.
  std::vector<ir::NodeId> forward, backward;
  std::vector<int64_t> a, d;  // bytes of f_i and of b_t (a[0] = 0: "no tensor"; d[h+1] = 0)
  std::vector<double> u, w;   // cost of one execution of f_i and of b_t
  std::vector<uint8_t> reads;  // reads[t]: kReadsPrevious | kReadsSame
  // Persistent bytes resident while f_i is computed for the first time / during b_t's stage: the
  // persistent nodes placed before it in the order (Checkmate's frontier-advancing stages).
  std::vector<int64_t> persistent_at_forward, persistent_at_backward;
  int64_t persistent_total = 0;
  double persistent_cost = 0.0;          // one execution of every persistent node
  std::vector<ir::NodeId> persistent;    // persistent nodes in execution order
  std::vector<int64_t> persistent_bytes;  // and their sizes
  std::vector<int32_t> persistent_position;  // their positions in problem.order
  std::vector<int32_t> forward_position, backward_position;  // positions of f_i and b_t

  int64_t DeltaBytes(int32_t t) const { return t < h ? d[static_cast<size_t>(t) + 1] : 0; }  // b_{t+1}'s output
  double BaselineCost() const;  // every op once
};

// The chain underlying `problem`, or nullopt with a one-line reason in *why_not (which may be null).
std::optional<Chain> ExtractChain(const RematProblem& problem, std::string* why_not);

// Test and benchmark helper: a training chain of kOpaque ops with measured_cost and u8 tensors.
// Layer i (1-based) has f_i (forward_bytes[i-1], forward_cost[i-1]) and b_i (backward_bytes[i-1],
// backward_cost[i-1]); b_i reads b_{i+1} (or the loss, or nothing for b_n without a loss) and
// f_{i-1} / f_i as `reads` says. With `loss`, node "loss" reads f_n between the passes. With
// parameter_bytes > 0, layer i also has a kParameter "w<i>" placed just before f_i, read by f_i and b_i.
struct TrainingChainSpec {
  std::vector<int64_t> forward_bytes, backward_bytes;  // one per layer, each >= 1
  std::vector<double> forward_cost, backward_cost;
  bool loss = true;
  int64_t loss_bytes = 1;
  double loss_cost = 1.0;
  uint8_t reads = kReadsPrevious | kReadsSame;
  int64_t parameter_bytes = 0;
};
ir::Graph BuildTrainingChain(const TrainingChainSpec& spec);

}  // namespace kiwi::solve::remat
