#pragma once
// KIWI's full joint formulation (appendix 7.1): Checkmate's stages (R[t][i] compute i in stage t,
// S[t][i] keep i into stage t, FREE[t][i][k] free i after computing k in stage t, U[t][k] resident
// bytes; eqs. 12-20, with the tightenings of solve/remat/checkmate_ilp.h: frontier-advancing stages,
// no double computation, no waste, exact frees) times one sharding strategy per operator (eq. 21-23).
// The products of a stage binary b (R, S or FREE) with a node's one-hot strategy s_i (its sharded
// size s_i^T mem_i; eq. 1's A_ti [s_i^T (c_i + d_i) + sum e_ji^T R_ji] with the resharding pairs) are
// split exactly: z_a = b s_ia as sum_a z_a = b, z_a <= s_ia (no big-M). Its family contains the reduced
// one (every reduced schedule is a stage schedule whose frees come no later), so its optimum is never
// slower; it is meant for small graphs (O(n^2) stage variables) and, as in the paper (26 minutes for a
// 26-operator MLP), slow to prove: its LP relaxation keeps and recomputes fractionally. Where no given
// plan fits, Checkmate's solver on the smallest layouts provides the MIP start.
#include <vector>

#include "kiwi/solve/joint/joint.h"
#include "kiwi/solve/joint/problem.h"
#include "kiwi/solve/remat/checkmate_schedule.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::joint {

// A stage schedule with a strategy per node, as the full formulation decides it.
struct FullSolution {
  ir::Solution strategy;
  remat::StageSolution stages;
};

// See joint.h (kKiwiFull). Warm starts: the portfolio's plans in stage form (the reduced KIWI plan,
// checkpoint-all with Alpa's sharding, ...) that fit the budget; the best is handed to CBC.
Result<JointResult> SolveKiwiFull(const JointProblem& problem, const JointSolveOptions& options);

}  // namespace kiwi::solve::joint
