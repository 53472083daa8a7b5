#pragma once
// Block coordinate descent on KIWI's reduced problem (kiwi.h), used to warm-start its MILP. The joint
// MILP is hard for CBC at tight budgets (the root bound is close, but its search finds no good
// incumbent for minutes), while each half of the decision alone is easy:
//  - strategies fixed: the best recomputation is a tiny MILP (one binary per candidate);
//  - recomputation fixed: the best strategies are the sharding of a fixed schedule (JointSchedule),
//    the same MILP Alpa solves (FixedScheduleSpec).
// Alternating the two never gets worse; every decision it returns is in the reduced family.
//
//   std::optional<JointSolution> s = AlternateFrom(problem, start.strategy, options, /*seconds=*/20);
#include <optional>

#include "kiwi/solve/joint/joint.h"
#include "kiwi/solve/joint/problem.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::joint {

// The problem with every node restricted to the given strategy (each must be allowed).
JointProblem WithStrategiesFixed(const JointProblem& problem, const ir::Solution& strategies);

// The cheapest recomputation within problem.budget for fixed strategies; nullopt when none fits.
Result<std::optional<JointSolution>> BestRecomputation(const JointProblem& problem, const ir::Solution& strategies,
                                                       const JointSolveOptions& options, double seconds);

// The fastest strategies within problem.budget for a fixed recomputation (its reduced schedule),
// starting from `start` (which should fit); nullopt when none is found.
Result<std::optional<JointSolution>> BestStrategies(const JointProblem& problem, const JointSolution& start,
                                                    const JointSolveOptions& options, double seconds);

// Alternates the two from `strategies` until neither improves or `seconds` run out; the best feasible
// decision found (EvaluateJoint), or nullopt when no recomputation makes `strategies` fit.
Result<std::optional<JointSolution>> AlternateFrom(const JointProblem& problem, const ir::Solution& strategies,
                                                   const JointSolveOptions& options, double seconds);

// Large-neighbourhood search from a feasible decision: one transformer layer at a time (IR
// Node::layer; the nodes outside layers form one more group), that group's strategies are freed, the
// others fixed, and every recomputation is free; the joint MILP of that neighbourhood is solved from
// the incumbent. Repeats passes while one improves and `seconds` last. Never worse than `start`.
Result<JointSolution> ImproveByLayers(const JointProblem& problem, const JointSolution& start,
                                      const JointSolveOptions& options, double seconds);

}  // namespace kiwi::solve::joint
