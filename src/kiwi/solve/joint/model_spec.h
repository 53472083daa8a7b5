#pragma once
// What the joint MILP (milp_builder.h) is built from: per node its execution count and whether it has
// a recompute mode, and per time step the tensors resident right after that step's compute, as terms
// whose bytes depend on the decisions. Two families are described this way:
//  - KiwiSpec: the reduced formulation (problem.h, KIWI §3.2): one row per position of the order;
//    a candidate's term between its last forward and first backward use is kKept (resident only when
//    not recomputed), and a kept tensor read by a recomputed consumer w after its own last use stays
//    resident through H_w (kExtension: eq. 10's h_i);
//  - FixedScheduleSpec: any compute/free schedule with the sharding left open (Alpa on the
//    checkpoint-all schedule, the heuristics' schedules for ckpt-dots + Alpa and Megatron + Alpa): one
//    row per compute, every term kMemory, execution counts from the schedule.
// EvaluateSpec() is the spec's exact accounting, against which the MILP and the simulator are tested.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiwi/plan/plan.h"
#include "kiwi/solve/joint/problem.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::joint {

enum class TermKind : uint8_t {
  kMemory,     // s_x^T mem_x: always resident at this step
  kKept,       // s_x^T mem_x (1 - r_x): resident unless x is recomputed
  kExtension,  // s_x^T mem_x if any consumer of the segment is recomputed
};

struct MemTerm {
  ir::NodeId node = ir::kNoNode;
  TermKind kind = TermKind::kMemory;
  int32_t segment = 0;  // kExtension: index into extensions[node]
  bool operator==(const MemTerm&) const = default;
};

// The order of a row's terms (and of the tails): by node.
inline bool ByNode(const MemTerm& a, const MemTerm& b) { return a.node < b.node; }

// Steps after x's last use during which x is resident iff one of `consumers` is recomputed (they are
// recomputed at or after this segment's last step).
struct ExtensionSegment {
  std::vector<ir::NodeId> consumers;
};

// A term resident from row `first` to the last row (parameters, optimizer states, whatever is live at
// the end): kept once instead of in every row (at 200 layers, 10^4 of them over 2.4 x 10^4 rows).
struct TailTerm {
  MemTerm term;
  int32_t first = 0;
};

struct JointModelSpec {
  std::vector<int32_t> executions;      // per node: executions when not recomputed (>= 1)
  std::vector<uint8_t> recomputable;    // per node: also has the mode "recomputed" (one more execution)
  std::vector<std::vector<ExtensionSegment>> extensions;     // per node
  std::vector<std::pair<ir::NodeId, ir::NodeId>> exclusive;  // never both recomputed (KIWI eq. 9)
  // Per step, the terms resident then, sorted by node, one term per node at most: rows[t] and the
  // tails with first <= t (RowTerms merges them).
  std::vector<std::vector<MemTerm>> rows;
  std::vector<TailTerm> tails;             // sorted by first, then node; one per node at most
  std::vector<int32_t> tail_of;            // per node: index into tails, or -1
  std::vector<uint8_t> row_needed;         // 0: implied by another row (PruneImpliedRows)
};

// Every term resident at step t, sorted by node.
std::vector<MemTerm> RowTerms(const JointModelSpec& spec, size_t t);

JointModelSpec KiwiSpec(const JointProblem& problem);

// Errors (kInternal): a schedule that computes a resident tensor, frees one that is not resident or
// never computes a node.
Result<JointModelSpec> FixedScheduleSpec(const JointProblem& problem, const std::vector<plan::Step>& schedule);

// Marks rows implied by a neighbouring kept row: every term of the row appears in the other one as the
// same term or as kMemory of the same node (which holds at least as much). Rows equal to a kept
// neighbour count as implied, so of a run of equal rows one stays.
void PruneImpliedRows(JointModelSpec& spec);

// A spec's decisions: a strategy per node and, for recomputable nodes, the mode.
struct SpecEvaluation {
  int64_t cost = 0;    // units, sum of executions x (node cost + in-edge resharding)
  int64_t peak = 0;    // bytes, max over all rows (needed or not)
  int32_t peak_row = -1;
  std::vector<int64_t> memory;  // per row
};
SpecEvaluation EvaluateSpec(const JointProblem& problem, const JointModelSpec& spec, const JointSolution& solution);

}  // namespace kiwi::solve::joint
