#pragma once
// Rematerialization baselines, all replayed by the simulator (FinishResult) like every solver:
//  - checkpoint-all: no rematerialization (plan::CheckpointAllSchedule);
//  - sqrt(n) (Chen et al. 2016, "Training deep nets with sublinear memory cost", §4.1): split the
//    forward pass into ~sqrt(n) segments and keep only the segment boundaries; when the forward graph
//    has articulation points the boundaries are placed at articulation points only;
//  - greedy (Chen et al. 2016, Alg. 2 as in Checkmate's strategy_chen): walk the forward order adding up
//    tensor sizes and start a new segment (keep the boundary) once the running sum exceeds a threshold;
//    the threshold is searched for the cheapest schedule within the budget, with and without the
//    articulation-point restriction;
//  - checkpoint-dots (JAX `jax.checkpoint_policies.checkpoint_dots`): keep the outputs of matmul,
//    batch_matmul and conv ops, recompute everything else;
//  - Megatron selective recompute (Korthikanti et al. 2022, §4.2): recompute only the attention core
//    (QK^T scores, softmax, attention dropout) inside scopes containing "attn", keep everything else.
// The keep sets are executed by the keep-set scheduler (keep_set_schedule.h): on a training graph
// non-kept forward tensors are dropped after the forward pass and recomputed for the backward pass; on
// a forward-only graph they are recomputed on demand before each distant use.
#include <cstdint>
#include <string>
#include <vector>

#include "kiwi/solve/remat/keep_set_schedule.h"
#include "kiwi/solve/remat/problem.h"
#include "kiwi/solve/remat/solvers.h"

namespace kiwi::solve::remat {

// The forward activations a baseline may drop, in execution order: cuttable nodes (not parameters,
// optimizer state or graph inputs) before the forward boundary (all of them on a forward-only graph).
std::vector<ir::NodeId> ForwardActivations(const KeepSetScheduler& ks);

// Articulation points of the forward activation graph (Checkmate's DFGraph.articulation_points,
// after Chen et al.): the undirected graph of forward edges between forward activations, plus a
// virtual source joined to the activations without activation inputs and a virtual sink joined to
// those without forward consumers; a node is an articulation point when removing it disconnects that
// graph. Source tensors without inputs (data, labels, dropout masks) are left out: any segment can
// reload or regenerate them. Tarjan's algorithm, O(n + E). Ascending execution position.
std::vector<ir::NodeId> ForwardArticulationPoints(const KeepSetScheduler& ks);

// Keep sets (true = kept; everything outside ForwardActivations is always kept).
std::vector<bool> SqrtNKeep(const KeepSetScheduler& ks, bool articulation_points_only);
std::vector<bool> ChenGreedyKeep(const KeepSetScheduler& ks, int64_t segment_bytes, bool articulation_points_only);
std::vector<bool> CheckpointDotsKeep(const KeepSetScheduler& ks);
std::vector<bool> MegatronSelectiveKeep(const KeepSetScheduler& ks);

// True when the name of an opaque node (a profiled graph file without op kinds) reads as a dot-product
// op: one of its '_'/'.'/'/'-separated tokens, digits stripped, is conv/dense/matmul/fc/linear/gemm/
// predictions/dw/pw (Keras' MobileNet names depthwise/pointwise convs conv_dw_N/conv_pw_N), and none
// names a non-dot op that follows one (bn, relu, pad, pool, add, out, act, norm, flatten, softmax,
// dropout, concat, reshape). So "conv2_block1_1_conv" and "fc1" are dots, "conv2_block1_1_bn" is not.
bool OpaqueNameIsDot(const std::string& name);

// One greedy variant: the cheapest schedule over the searched thresholds that fits the budget, or,
// when none fits, the one with the smallest peak (feasible = false).
struct GreedyChoice {
  std::vector<bool> keep;
  int64_t segment_bytes = 0;
  KeepSetEvaluation eval;
};
GreedyChoice SearchChenGreedy(KeepSetScheduler& ks, bool articulation_points_only);

// Entry points (solvers.h dispatches here). Each returns feasible = false with an empty schedule and
// the measured peak/cost in the result when its schedule exceeds the budget.
Result<RematResult> SolveCheckpointAll(const RematProblem& problem, const cost::CostModel& cost_model);
Result<RematResult> SolveSqrtN(const RematProblem& problem, const cost::CostModel& cost_model);
// articulation_points_only: nullopt = the better of both variants (the CLI's "greedy").
Result<RematResult> SolveChenGreedy(const RematProblem& problem, const cost::CostModel& cost_model,
                                    std::optional<bool> articulation_points_only = std::nullopt);
Result<RematResult> SolveCheckpointDots(const RematProblem& problem, const cost::CostModel& cost_model);
Result<RematResult> SolveMegatronSelective(const RematProblem& problem, const cost::CostModel& cost_model);
// kCheckpointAll, kSqrtN, kGreedy, kCkptDots or kMegatronSelective; anything else is kInternal.
Result<RematResult> SolveBaseline(const RematProblem& problem, const cost::CostModel& cost_model, SolverKind kind,
                                  const RematOptions& options);

// Replays a keep set through FinishResult and applies the convention above.
Result<RematResult> FinishKeepSet(KeepSetScheduler& ks, const cost::CostModel& cost_model, const KeepPolicy& policy,
                                  RematResult partial);

}  // namespace kiwi::solve::remat
