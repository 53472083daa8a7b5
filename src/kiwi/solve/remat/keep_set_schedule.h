#pragma once
// The keep-set family of rematerialization schedules, shared by the heuristic and the baselines.
//
// Each tensor is either kept (resident from its compute until its last use, as in checkpoint-all)
// or cut at some positions of the execution order: a "cut" of tensor v at position s means the
// consumers of v at positions >= s are not served by the copy computed before s; that copy is freed
// after its last consumer before s and v is recomputed on demand (recursively from its nearest
// resident ancestors) right before the first consumer that needs it. Everything is executed in the
// problem's order: step t computes order[t] after recomputing its missing inputs, in ascending
// position (Checkmate's frontier-advancing stages: every schedule here is one of the MILP's).
//
// Residency rule (one rule for every tensor): a tensor made resident at step t stays resident until
// the last consumer in the interval between the active cuts around t (kept tensors: one interval,
// so until their last use), or until its "hold" position if that lies later in the same interval (a
// hold keeps a small tensor resident so that a later recomputation can start from it instead of
// recomputing its ancestors), and is freed within the step as soon as nothing else needs it there.
// On a training graph (one with backward nodes) the natural cut of a forward tensor is the forward
// boundary B, the position of the first backward node: Chen et al.'s checkpointing, where non-kept
// forward tensors are freed once no later forward op needs them and are recomputed before the first
// backward op that needs them, then stay resident until their last remaining use.
//
//   KeepSetScheduler ks(problem);
//   KeepPolicy policy = ks.FromKeep(keep);          // per-node flags -> cuts
//   KeepSetEvaluation e = ks.Evaluate(policy);      // cost and peak, O(schedule + edges), no steps
//   std::vector<plan::Step> steps = ks.Schedule(policy);
//
// Parameters, optimizer state and graph inputs are never cut (persistent ones are never freed).
// Evaluate() returns exactly what the simulator (FinishResult) measures for Schedule(): the same
// peak and the same cost, summed in the same order. One run costs O(schedule length + edges read),
// i.e. O(n + E) plus the recomputations, so searches can afford thousands of them.
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "kiwi/plan/plan.h"
#include "kiwi/solve/remat/problem.h"

namespace kiwi::solve::remat {

// A position from which a tensor's consumers are served by a recomputation.
struct Cut {
  ir::NodeId node = ir::kNoNode;
  int32_t at = 0;  // a position in the order, after the node's own
};

// Per candidate cut id: 1 = active.
using CutSet = std::vector<uint8_t>;

// A member of the family: the active cuts, and per node (id) a hold position or kNoHold.
// KeepSetScheduler::KeepAll() / FromKeep() size both vectors.
struct KeepPolicy {
  static constexpr int32_t kNoHold = -1;
  CutSet cuts;
  std::vector<int32_t> hold;
  bool operator==(const KeepPolicy&) const = default;
};

// A recomputation in a schedule: `node` recomputed in the step at order position `position`.
struct Recomputation {
  ir::NodeId node = ir::kNoNode;
  int32_t position = 0;
};

struct KeepSetEvaluation {
  double cost = 0.0;        // total compute cost, recomputation included (simulator's total)
  int64_t peak = 0;         // bytes, right after the worst compute
  int64_t peak_compute = -1;   // index (among computes) of the first compute reaching the peak
  int32_t peak_position = -1;  // the order position t of the step in which it happened
  double overflow = 0.0;    // sum over computes of max(0, resident bytes - budget): the memory-time over budget
  int64_t computes = 0;     // compute steps, recomputations included
};

// The tensors resident at one moment (right after one compute), for choosing what to cut.
struct ResidentSnapshot {
  int32_t position = -1;               // the step's order position
  ir::NodeId computed = ir::kNoNode;   // the node whose compute it follows
  std::vector<ir::NodeId> idle;        // resident, cuttable, not needed again within this step, not `computed`
};

class KeepSetScheduler {
 public:
  static constexpr int32_t kNever = std::numeric_limits<int32_t>::max();

  // Builds the candidate cuts and lookup tables: O(n + E log E). The problem must outlive this.
  explicit KeepSetScheduler(const RematProblem& problem);

  const RematProblem& problem() const { return problem_; }
  // Position of the first backward node; size() when the graph has none (forward only).
  int32_t forward_boundary() const { return boundary_; }
  bool has_backward() const { return boundary_ < problem_.size(); }

  // Candidate cuts: for every cuttable tensor (not persistent, not a graph input), each consumer
  // position at least two steps after its previous use; for forward tensors of a training graph the
  // first backward consumer's cut is placed at the forward boundary instead.
  int32_t num_cuts() const { return static_cast<int32_t>(cuts_.size()); }
  const Cut& cut(int32_t id) const { return cuts_[static_cast<size_t>(id)]; }
  std::span<const int32_t> CutsOf(ir::NodeId v) const;  // cut ids of v, ascending position
  std::span<const int32_t> ConsumerPositions(ir::NodeId v) const;  // ascending, unique
  bool Cuttable(ir::NodeId v) const { return cuttable_[static_cast<size_t>(v)] != 0; }
  // The cut of v at the forward boundary, if it has one (-1 otherwise).
  int32_t BoundaryCut(ir::NodeId v) const { return boundary_cut_[static_cast<size_t>(v)]; }

  // No cuts, no holds: checkpoint-all.
  KeepPolicy KeepAll() const;
  // keep[v] false: on a training graph, a forward tensor is cut at the forward boundary (the
  // checkpointing family); a backward tensor, or any tensor of a forward-only graph, at every
  // candidate (recomputed on demand before each distant use). Uncuttable tensors are always kept.
  KeepPolicy FromKeep(const std::vector<bool>& keep) const;

  // Cost and peak of the schedule without building it. `budget` only feeds `overflow`.
  KeepSetEvaluation Evaluate(const KeepPolicy& policy, int64_t budget = std::numeric_limits<int64_t>::max());
  // The plan::Step sequence (computes and frees) that Evaluate() measures.
  std::vector<plan::Step> Schedule(const KeepPolicy& policy);
  // The resident tensors right after the compute with index `compute_index` (see peak_compute).
  ResidentSnapshot Snapshot(const KeepPolicy& policy, int64_t compute_index);
  // Every recomputation of the schedule, in order.
  std::vector<Recomputation> Recomputations(const KeepPolicy& policy);
  // How many schedules this scheduler has run (evaluations, snapshots, schedules): for reports.
  int64_t runs() const { return runs_; }

 private:
  friend class KeepSetRun;
  void BuildConsumers();
  void BuildCuts();
  // The position after which a tensor made resident (or used) at step t can be freed (t: this step).
  int32_t FreeTime(ir::NodeId v, int32_t t, const KeepPolicy& policy) const;

  const RematProblem& problem_;
  int32_t boundary_ = 0;
  std::vector<int32_t> input_begin_;     // CSR copy of the graph's input lists
  std::vector<ir::NodeId> input_ids_;
  std::vector<uint8_t> cuttable_;
  std::vector<int32_t> consumer_begin_;  // CSR: sorted unique consumer positions per node
  std::vector<int32_t> consumer_pos_;
  std::vector<int32_t> cut_begin_;       // CSR: cut ids per node
  std::vector<int32_t> cut_ids_;
  std::vector<Cut> cuts_;
  std::vector<int32_t> boundary_cut_;
  // Scratch reused by every run (one run at a time).
  std::vector<uint8_t> resident_, planned_;
  std::vector<int32_t> free_at_, uses_;
  std::vector<ir::NodeId> plan_, stack_;
  std::vector<std::vector<ir::NodeId>> expire_;
  int64_t runs_ = 0;  // per position: held tensors whose hold ends there
  std::vector<size_t> stack_next_;
};

// Convenience wrappers for one-off use (they build a KeepSetScheduler each time).
std::vector<plan::Step> KeepSetSchedule(const RematProblem& problem, const std::vector<bool>& keep);
KeepSetEvaluation EvaluateKeepSet(const RematProblem& problem, const std::vector<bool>& keep);

}  // namespace kiwi::solve::remat
