#pragma once
// Helpers shared by the rematerialization tests.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/graph.h"
#include "kiwi/solve/remat/problem.h"

namespace kiwi::solve::remat::test_util {

// A cost model whose costs are the nodes' measured costs (graphs built with AddOpaque).
inline const cost::CostModel& Costs() {
  static const cost::CostModel cm{cost::DeviceSpec{}};
  return cm;
}

inline RematProblem Problem(const ir::Graph& g, int64_t budget) {
  Result<RematProblem> p = MakeRematProblem(g, Costs(), budget);
  EXPECT_TRUE(p.ok());
  return *p;
}

// An opaque node of `bytes` bytes and measured cost `cost`, as graph files give them.
inline ir::NodeId AddOpaque(ir::Graph& g, const std::string& name, int64_t bytes, double cost, std::vector<ir::NodeId> inputs,
                            ir::Pass pass = ir::Pass::kForward) {
  ir::Node n;
  n.name = name;
  n.kind = ir::OpKind::kOpaque;
  n.pass = pass;
  n.output = {ir::DType::kU8, {bytes}};
  n.measured_cost = cost;
  n.inputs = std::move(inputs);
  return g.Add(std::move(n));
}

}  // namespace kiwi::solve::remat::test_util
