#pragma once
// KIWI with the reduced formulation (§3.2): the joint MILP of KiwiSpec, warm-started from the
// baselines' plans projected onto the reduced family, replayed by the simulator.
#include "kiwi/solve/joint/joint.h"
#include "kiwi/solve/joint/problem.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::joint {

// The reduced-family decision closest to a plan: its strategies, recomputing the candidates its
// schedule computes more than once; where that breaks eq. 9, `prefer_consumers` keeps the consumer
// recomputed (and keeps its inputs), else the input.
JointSolution ProjectOntoReduced(const JointProblem& problem, const JointResult& result, bool prefer_consumers);

// The least peak any reduced-family plan reaches: every node at its smallest layout (the peak only
// grows with any node's bytes), the recomputation chosen by the peak-minimizing MILP. `best` (if
// given) receives that decision. The value is exact when the MILP finishes (small: one binary per
// candidate), else the best peak found.
Result<int64_t> SmallestReducedPeak(const JointProblem& problem, const JointSolveOptions& options,
                                    JointSolution* best = nullptr);

// See joint.h (kKiwi).
Result<JointResult> SolveKiwi(const JointProblem& problem, const JointSolveOptions& options);

}  // namespace kiwi::solve::joint
