// SimulateOperatorPlan rejects bad plans with kBadInput and one line naming the step or node at fault.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiwi/sim/simulator.h"
#include "op_sim_test_util.h"

namespace kiwi::sim {
namespace {

using ir::AxisBit;
using ir::NodeId;
using ir::ShardingSpec;
using op_test::C;
using op_test::F;

class SimulatorErrors : public ::testing::Test {
 protected:
  SimulatorErrors() {
    a_ = op_test::AddTyped(g_, "a", {ir::DType::kF32, {4, 8}}, 1.0, {});
    b_ = op_test::AddTyped(g_, "b", {ir::DType::kF32, {4, 8}}, 1.0, {a_});
    c_ = op_test::AddTyped(g_, "c", {ir::DType::kF32, {4, 8}}, 1.0, {a_, b_});
    mesh_.axes = {{2, 1e9, 1e-6, "x"}, {2, 1e9, 1e-6, "y"}};
  }

  // Expects kBadInput with exactly `message`.
  void ExpectError(const plan::OperatorPlan& p, const std::string& message) {
    Result<SimResult> r = SimulateOperatorPlan(g_, p, op_test::MeasuredCostModel(), mesh_);
    ASSERT_FALSE(r) << "expected: " << message;
    EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
    EXPECT_EQ(r.error().message, message);
  }
  void ExpectScheduleError(std::vector<plan::Step> steps, const std::string& message) {
    plan::OperatorPlan p;
    p.schedule = std::move(steps);
    ExpectError(p, message);
  }
  // A 2x2 plan whose only entry is `s` for node `v`.
  void ExpectShardingError(NodeId v, plan::OpSharding s, const std::string& message) {
    plan::OperatorPlan p;
    p.mesh_shape = {2, 2};
    p.shardings[v] = std::move(s);
    ExpectError(p, message);
  }

  ir::Graph g_{"errors"};
  NodeId a_ = 0, b_ = 0, c_ = 0;
  ir::DeviceMesh mesh_;
};

TEST_F(SimulatorErrors, ComputeWithAnInputThatWasNeverComputed) {
  ExpectScheduleError({C(b_)}, "schedule[0]: compute node 1 'b' but its input 0 'a' is not resident");
}

TEST_F(SimulatorErrors, ComputeWithAnInputThatWasFreed) {
  ExpectScheduleError({C(a_), C(b_), F(a_), C(c_)},
                      "schedule[3]: compute node 2 'c' but its input 0 'a' is not resident");
}

TEST_F(SimulatorErrors, ComputeOfAResidentTensor) {
  ExpectScheduleError({C(a_), C(a_)}, "schedule[1]: compute node 0 'a' but it is already resident (free it first)");
}

TEST_F(SimulatorErrors, FreeOfATensorNeverComputed) {
  ExpectScheduleError({F(a_)}, "schedule[0]: free node 0 'a' but it is not resident");
}

TEST_F(SimulatorErrors, DoubleFree) {
  ExpectScheduleError({C(a_), F(a_), F(a_)}, "schedule[2]: free node 0 'a' but it is not resident");
}

TEST_F(SimulatorErrors, NodeNeverComputed) {
  ExpectScheduleError({C(a_), C(b_)}, "schedule: node 2 'c' is never computed");
}

TEST_F(SimulatorErrors, NodeIdOutOfRange) {
  ExpectScheduleError({C(a_), C(3)}, "schedule[1]: node 3 does not exist (the graph has 3 nodes)");
  ExpectScheduleError({F(-1)}, "schedule[0]: node -1 does not exist (the graph has 3 nodes)");
}

TEST_F(SimulatorErrors, UnknownStepKind) {
  ExpectScheduleError({{static_cast<plan::StepKind>(7), a_}}, "schedule[0]: unknown step kind 7");
}

TEST_F(SimulatorErrors, MeshShapeDiffersFromTheMesh) {
  plan::OperatorPlan p;
  p.mesh_shape = {4};
  ExpectError(p, "plan.mesh_shape: 4 does not match the device mesh 2x2");
  p.mesh_shape = {2, 1};
  ExpectError(p, "plan.mesh_shape: 2x1 does not match the device mesh 2x2");
}

TEST_F(SimulatorErrors, MeshAxisOfSizeZero) {
  mesh_.axes[1].size = 0;
  ExpectError(plan::OperatorPlan{}, "mesh: axis 1 has size 0, must be at least 1");
}

TEST_F(SimulatorErrors, ShardingOfANodeThatDoesNotExist) {
  ExpectShardingError(9, {ShardingSpec::Replicated(2), {}, 0, ""},
                      "plan.shardings: node 9 does not exist (the graph has 3 nodes)");
}

TEST_F(SimulatorErrors, OutputRankDiffersFromTheTensor) {
  ExpectShardingError(b_, {ShardingSpec::Replicated(3), {}, 0, ""},
                      "plan.shardings[node 1 'b']: output 'RRR': has 3 dims, the tensor has 2");
}

TEST_F(SimulatorErrors, OperandCountDiffersFromTheInputs) {
  ExpectShardingError(c_, {ShardingSpec::Replicated(2), {ShardingSpec::Replicated(2)}, 0, ""},
                      "plan.shardings[node 2 'c']: operands: 1 layouts given, the node has 2 inputs");
}

TEST_F(SimulatorErrors, OperandRankDiffersFromItsInput) {
  ExpectShardingError(c_, {ShardingSpec::Replicated(2), {ShardingSpec::Replicated(2), ShardingSpec::Replicated(1)}, 0, ""},
                      "plan.shardings[node 2 'c']: operands[1] 'R' (input 1 'b'): has 1 dims, the tensor has 2");
}

TEST_F(SimulatorErrors, OutputAxisBeyondTheMesh) {
  ExpectShardingError(a_, {ShardingSpec::SplitDim(2, 0, AxisBit(2)), {}, 0, ""},
                      "plan.shardings[node 0 'a']: output 'S2R': mesh axis 2 does not exist (the plan's mesh has 2 axes)");
}

TEST_F(SimulatorErrors, OperandAxisBeyondTheMesh) {
  ExpectShardingError(b_, {ShardingSpec::Replicated(2), {ShardingSpec::SplitDim(2, 1, AxisBit(5))}, 0, ""},
                      "plan.shardings[node 1 'b']: operands[0] 'RS5' (input 0 'a'): mesh axis 5 does not exist "
                      "(the plan's mesh has 2 axes)");
}

TEST_F(SimulatorErrors, ReduceAxisBeyondTheMesh) {
  ExpectShardingError(b_, {ShardingSpec::Replicated(2), {}, AxisBit(0) | AxisBit(3), ""},
                      "plan.shardings[node 1 'b']: reduce_axes: mesh axis 3 does not exist (the plan's mesh has 2 axes)");
}

TEST_F(SimulatorErrors, OneAxisSplittingTwoDims) {
  ExpectShardingError(a_, {ShardingSpec{{AxisBit(0) | AxisBit(1), AxisBit(1)}}, {}, 0, ""},
                      "plan.shardings[node 0 'a']: output 'S01S1': mesh axis 1 splits two dims");
}

TEST_F(SimulatorErrors, OneDevicePlanMayNotUseMeshAxes) {
  plan::OperatorPlan p;  // empty mesh_shape: a one-device plan, even on the 2x2 mesh
  p.shardings[a_] = {ShardingSpec::SplitDim(2, 0, AxisBit(0)), {}, 0, ""};
  ExpectError(p, "plan.shardings[node 0 'a']: output 'S0R': mesh axis 0 does not exist (the plan's mesh has 0 axes)");
}

TEST_F(SimulatorErrors, CheckpointAllOnAnOrderThatIsNotAPermutation) {
  g_.set_order({0, 1, 1});
  ExpectError(plan::OperatorPlan{}, "graph: order: node 1 is out of range or listed twice");
  g_.set_order({0, 1});
  ExpectError(plan::OperatorPlan{}, "graph: order lists 2 of the 3 nodes");
  g_.set_order({0, 7, 2});
  ExpectError(plan::OperatorPlan{}, "graph: order: node 7 is out of range or listed twice");
}

TEST_F(SimulatorErrors, CheckpointAllOnAnOrderThatIsNotTopological) {
  g_.set_order({1, 0, 2});
  ExpectError(plan::OperatorPlan{}, "schedule[0]: compute node 1 'b' but its input 0 'a' is not resident");
}

TEST_F(SimulatorErrors, DanglingInputOfAnUnverifiedGraph) {
  g_.mutable_node(c_).inputs.push_back(42);
  ExpectError(plan::OperatorPlan{}, "graph: node 2 'c': inputs[2]: node 42 does not exist");
}

TEST_F(SimulatorErrors, ValidPlansOfTheFixturePass) {
  // The fixture itself is fine: errors above come from the one thing each test breaks.
  plan::OperatorPlan p;
  p.mesh_shape = {2, 2};
  p.shardings[c_] = {ShardingSpec::SplitDim(2, 0, AxisBit(0)),
                     {ShardingSpec::SplitDim(2, 0, AxisBit(0)), ShardingSpec::Replicated(2)}, AxisBit(1), ""};
  Result<SimResult> r = SimulateOperatorPlan(g_, p, op_test::MeasuredCostModel(), mesh_);
  ASSERT_TRUE(r) << r.error().message;
  Result<SimResult> s = SimulateOperatorPlan(g_, plan::OperatorPlan{}, op_test::MeasuredCostModel(), mesh_);
  ASSERT_TRUE(s) << s.error().message;
}

}  // namespace
}  // namespace kiwi::sim
