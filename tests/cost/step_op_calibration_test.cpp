// The per-op time of eager training calibrated from a timed reference pass (cost/step_op_calibration.h).
#include "kiwi/cost/step_op_calibration.h"

#include <gtest/gtest.h>

#include "cost_test_util.h"

namespace kiwi::cost {
namespace {

using ir::OpKind;
using testing::ExpectSeconds;
using testing::TestDevice;

ir::Node Op(std::string name, OpKind kind, int64_t bytes, ir::Pass pass = ir::Pass::kForward) {
  ir::Node n;
  n.name = std::move(name);
  n.kind = kind;
  n.op = kind == OpKind::kOptimizer ? "sgd" : "relu";
  n.pass = pass;
  n.output = {ir::DType::kF32, {bytes / 8}};
  n.bytes_accessed = bytes;
  return n;
}

// A parameter (no work), three memory-bound ops (forward, backward, and one the profile times by name)
// and an optimizer step: 80 bytes at the profile's 1e9 B/s copy bandwidth each.
ir::Graph Reference() {
  ir::Graph g("reference");
  g.Add(Op("w", OpKind::kParameter, 80));
  g.Add(Op("relu", OpKind::kElementwise, 80));
  g.Add(Op("relu.grad", OpKind::kElementwise, 80, ir::Pass::kBackward));
  g.Add(Op("named", OpKind::kElementwise, 80));
  g.Add(Op("step", OpKind::kOptimizer, 80, ir::Pass::kBackward));
  return g;
}

CostModel Priced() {
  Profile p;
  p.device.memory_bandwidth = 1e9;
  p.device.kernel_seconds = 1e-6;  // the chain's figure: replaced, not added to, by the calibration
  p.op_seconds = {{"named", 5e-6}};
  return CostModel(TestDevice(), {}, p);
}

TEST(CalibratedStepOpSeconds, TheMeasuredPassLessItsWorkOverTheOpsThatPayIt) {
  // Work: 2 x 80 ns for the two priced ops, 5 us for the op measured by name; the optimizer step is not
  // in the pass. Measured 5.16 us + 2 x 7 us: 7 us per op.
  const double work = 2 * 80e-9 + 5e-6;
  ExpectSeconds(*CalibratedStepOpSeconds(Reference(), work + 2 * 7e-6, Priced()), 7e-6);
  // Calibrated from the profile's own figures whatever they were: a larger kernel time is work's no more.
  Profile slow_chain;
  slow_chain.device.memory_bandwidth = 1e9;
  slow_chain.device.kernel_seconds = 3e-6;
  slow_chain.op_seconds = {{"named", 5e-6}};
  ExpectSeconds(*CalibratedStepOpSeconds(Reference(), work + 2 * 7e-6, CostModel(TestDevice(), {}, slow_chain)), 7e-6);
}

TEST(CalibratedStepOpSeconds, APassNoLongerThanItsWorkLeavesNoPerOpTime) {
  EXPECT_EQ(*CalibratedStepOpSeconds(Reference(), 1e-6, Priced()), 0.0);
}

TEST(CalibratedStepOpSeconds, RefusesANonPositiveTimeAndAModelWithoutOps) {
  for (double bad : {0.0, -1e-3}) {
    Result<double> r = CalibratedStepOpSeconds(Reference(), bad, Priced());
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
    EXPECT_NE(r.error().message.find("must be positive"), std::string::npos) << r.error().message;
  }
  ir::Graph params_only;
  params_only.Add(Op("w", OpKind::kParameter, 80));
  Result<double> r = CalibratedStepOpSeconds(params_only, 1e-3, Priced());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("no op"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace kiwi::cost
