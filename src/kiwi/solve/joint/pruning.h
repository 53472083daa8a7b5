#pragma once
// Dominated sharding strategies: strategy k of node i is dominated by k' when k' costs no more, uses no
// more memory and, on every edge into or out of i, never costs more for any strategy of the other end
// (ties broken by index, so dominance is a strict order). Any solution using k can switch to an
// undominated k' without costing more or holding more at any step, also when nodes are recomputed
// (every cost term is multiplied by the same execution count) - so the optimum of the sharding, the
// joint (KIWI) and the fixed-schedule problems is unchanged (tests: joint_problem_test.cpp).
#include <cstdint>
#include <vector>

#include "kiwi/ir/sharding_problem.h"

namespace kiwi::solve::joint {

// Per node, the undominated strategy indices, ascending (never empty).
// Cost: O(sum over nodes of K_i^2 x (sum of neighbour strategy counts)).
std::vector<std::vector<int32_t>> UndominatedStrategies(const ir::ShardingProblem& problem);

}  // namespace kiwi::solve::joint
