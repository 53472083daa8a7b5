// SimulateOperatorPlan on one device: memory replay, time buckets, recomputation, random DAGs.
#include "kiwi/sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "op_sim_test_util.h"

namespace kiwi::sim {
namespace {

using ir::NodeId;
using ir::OpKind;
using op_test::AddBytes;
using op_test::C;
using op_test::F;

std::vector<int64_t> TimelineBytes(const SimResult& r) {
  std::vector<int64_t> bytes;
  for (const MemoryEvent& e : r.timeline) bytes.push_back(e.bytes_after);
  return bytes;
}

Result<SimResult> Simulate(const ir::Graph& g, std::vector<plan::Step> schedule = {}) {
  plan::OperatorPlan p;
  p.schedule = std::move(schedule);
  return SimulateOperatorPlan(g, p, op_test::MeasuredCostModel(), op_test::SingleDevice());
}

TEST(SimulateOperatorPlan, ChainCheckpointAllPeakByHand) {
  ir::Graph g("chain");
  const NodeId a = AddBytes(g, "a", 10, 1.0, {});
  const NodeId b = AddBytes(g, "b", 20, 2.0, {a});
  const NodeId c = AddBytes(g, "c", 30, 3.0, {b});
  AddBytes(g, "d", 40, 4.0, {c});
  Result<SimResult> r = Simulate(g);
  ASSERT_TRUE(r) << r.error().message;
  // C a, C b, F a, C c, F b, C d, F c, F d.
  EXPECT_EQ(TimelineBytes(*r), (std::vector<int64_t>{10, 30, 20, 50, 30, 70, 40, 0}));
  EXPECT_EQ(r->peak_memory_bytes, 70);
  EXPECT_EQ(r->peak_step, 5);
  EXPECT_EQ(r->peak_memory_per_device, (std::vector<int64_t>{70}));
  EXPECT_DOUBLE_EQ(r->time.compute, 10.0);
  EXPECT_DOUBLE_EQ(r->time.recompute, 0.0);
  EXPECT_DOUBLE_EQ(r->time.communication, 0.0);
  EXPECT_DOUBLE_EQ(r->time.resharding, 0.0);
  EXPECT_DOUBLE_EQ(r->iteration_seconds, 10.0);
  EXPECT_EQ(r->recomputations, 0);
  ASSERT_EQ(r->timeline.size(), 8u);
  EXPECT_EQ(r->timeline[2].step, 2);
  EXPECT_EQ(r->timeline[2].node, a);
  EXPECT_EQ(r->timeline[2].kind, plan::StepKind::kFree);
}

TEST(SimulateOperatorPlan, DiamondCheckpointAllPeakByHand) {
  ir::Graph g("diamond");
  const NodeId a = AddBytes(g, "a", 8, 1.0, {});
  const NodeId b = AddBytes(g, "b", 16, 1.0, {a});
  const NodeId c = AddBytes(g, "c", 32, 1.0, {a});
  AddBytes(g, "d", 4, 1.0, {b, c});
  Result<SimResult> r = Simulate(g);
  ASSERT_TRUE(r) << r.error().message;
  // C a, C b, C c, F a, C d, F b, F c, F d: a stays until c, its last consumer, has run.
  EXPECT_EQ(TimelineBytes(*r), (std::vector<int64_t>{8, 24, 56, 48, 52, 36, 4, 0}));
  EXPECT_EQ(r->peak_memory_bytes, 56);
  EXPECT_EQ(r->peak_step, 2);
  EXPECT_DOUBLE_EQ(r->time.compute, 4.0);
}

TEST(SimulateOperatorPlan, OutputWithNoConsumerIsFreedRightAfterItIsComputed) {
  ir::Graph g("dead_end");
  const NodeId a = AddBytes(g, "a", 10, 1.0, {});
  AddBytes(g, "side", 100, 1.0, {a});  // nobody reads it: counted at its compute, then freed
  AddBytes(g, "b", 20, 1.0, {a});
  Result<SimResult> r = Simulate(g);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(TimelineBytes(*r), (std::vector<int64_t>{10, 110, 10, 30, 20, 0}));
  EXPECT_EQ(r->peak_memory_bytes, 110);
  EXPECT_EQ(r->peak_step, 1);
}

TEST(SimulateOperatorPlan, ExplicitCheckpointAllScheduleMatchesTheEmptySchedule) {
  ir::Graph g("diamond");
  const NodeId a = AddBytes(g, "a", 8, 1.5, {});
  const NodeId b = AddBytes(g, "b", 16, 2.5, {a});
  const NodeId c = AddBytes(g, "c", 32, 3.5, {a});
  AddBytes(g, "d", 4, 4.5, {b, c});
  Result<SimResult> implicit = Simulate(g);
  Result<SimResult> explicit_schedule = Simulate(g, plan::CheckpointAllSchedule(g));
  ASSERT_TRUE(implicit && explicit_schedule);
  EXPECT_EQ(TimelineBytes(*implicit), TimelineBytes(*explicit_schedule));
  EXPECT_EQ(implicit->peak_memory_bytes, explicit_schedule->peak_memory_bytes);
  EXPECT_DOUBLE_EQ(implicit->iteration_seconds, explicit_schedule->iteration_seconds);
  EXPECT_DOUBLE_EQ(implicit->time.compute, 12.0);
}

TEST(SimulateOperatorPlan, OneRecomputationAddsExactlyThatNodesCostToRecompute) {
  ir::Graph g("remat");
  const NodeId a = AddBytes(g, "a", 10, 5.0, {});
  const NodeId b = AddBytes(g, "b", 20, 7.0, {a});
  const NodeId c = AddBytes(g, "c", 30, 11.0, {a, b});
  Result<SimResult> base = Simulate(g);
  Result<SimResult> remat = Simulate(g, {C(a), C(b), F(a), C(a), C(c), F(a), F(b), F(c)});
  ASSERT_TRUE(base) << base.error().message;
  ASSERT_TRUE(remat) << remat.error().message;
  EXPECT_DOUBLE_EQ(remat->time.recompute - base->time.recompute, 5.0);
  EXPECT_DOUBLE_EQ(remat->time.compute, base->time.compute);
  EXPECT_DOUBLE_EQ(remat->time.compute, 23.0);
  EXPECT_DOUBLE_EQ(remat->time.communication, base->time.communication);
  EXPECT_DOUBLE_EQ(remat->time.resharding, base->time.resharding);
  EXPECT_DOUBLE_EQ(remat->iteration_seconds, 28.0);
  EXPECT_EQ(remat->recomputations, 1);
  EXPECT_EQ(base->recomputations, 0);
  EXPECT_EQ(TimelineBytes(*remat), (std::vector<int64_t>{10, 30, 20, 30, 60, 50, 30, 0}));
  EXPECT_EQ(remat->peak_memory_bytes, 60);
  EXPECT_EQ(remat->peak_step, 4);
}

TEST(SimulateOperatorPlan, PersistentNodesAreNeverFreedByCheckpointAll) {
  ir::Graph g("train_step");
  const NodeId x = AddBytes(g, "x", 100, 0.0, {}, OpKind::kInput);
  const NodeId w = AddBytes(g, "w", 1000, 9.0, {}, OpKind::kParameter);  // loaded, not computed: cost 0
  const NodeId m = AddBytes(g, "m", 2000, 9.0, {}, OpKind::kOptimizerState);
  const NodeId y = AddBytes(g, "y", 50, 3.0, {x, w});
  AddBytes(g, "update", 4, 2.0, {w, m, y}, OpKind::kOptimizer);
  Result<SimResult> r = Simulate(g);
  ASSERT_TRUE(r) << r.error().message;
  for (const MemoryEvent& e : r->timeline) {
    if (e.kind != plan::StepKind::kFree) continue;
    EXPECT_TRUE(e.node != w && e.node != m) << "freed node " << e.node;
  }
  EXPECT_EQ(r->timeline.back().bytes_after, 3000);  // w and m stay resident
  EXPECT_EQ(r->peak_memory_bytes, 3150);           // after y: x + w + m + y
  EXPECT_EQ(r->timeline[static_cast<size_t>(r->peak_step)].node, y);
  EXPECT_DOUBLE_EQ(r->time.compute, 5.0);
}

TEST(SimulateOperatorPlan, PeakStepIsTheFirstStepReachingThePeak) {
  ir::Graph g("equal_chain");
  const NodeId a = AddBytes(g, "a", 10, 1.0, {});
  const NodeId b = AddBytes(g, "b", 10, 1.0, {a});
  AddBytes(g, "c", 10, 1.0, {b});
  Result<SimResult> r = Simulate(g);  // C a, C b, F a, C c, F b, F c: 20 after steps 1 and 3
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(TimelineBytes(*r), (std::vector<int64_t>{10, 20, 10, 20, 10, 0}));
  EXPECT_EQ(r->peak_memory_bytes, 20);
  EXPECT_EQ(r->peak_step, 1);
}

TEST(SimulateOperatorPlan, TensorsMayStayResidentAtTheEnd) {
  ir::Graph g("keep");
  const NodeId a = AddBytes(g, "a", 10, 1.0, {});
  const NodeId b = AddBytes(g, "b", 20, 1.0, {a});
  Result<SimResult> r = Simulate(g, {C(a), C(b)});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(TimelineBytes(*r), (std::vector<int64_t>{10, 30}));
  EXPECT_EQ(r->peak_step, 1);
}

TEST(SimulateOperatorPlan, EmptyGraphHasNoPeakStep) {
  Result<SimResult> r = Simulate(ir::Graph("empty"));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->peak_memory_bytes, 0);
  EXPECT_EQ(r->peak_step, -1);
  EXPECT_TRUE(r->timeline.empty());
  EXPECT_EQ(r->peak_memory_per_device, (std::vector<int64_t>{0}));
}

TEST(SimulateOperatorPlan, OneDevicePlanRunsReplicatedOnAnyMesh) {
  ir::Graph g("chain");
  const NodeId a = AddBytes(g, "a", 10, 2.0, {});
  AddBytes(g, "b", 20, 4.0, {a});
  ir::DeviceMesh mesh;
  mesh.axes = {{2, 1e9, 1e-6, "x"}, {2, 1e9, 1e-6, "y"}};
  Result<SimResult> r = SimulateOperatorPlan(g, plan::OperatorPlan{}, op_test::MeasuredCostModel(), mesh);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->peak_memory_per_device, (std::vector<int64_t>{30, 30, 30, 30}));
  EXPECT_DOUBLE_EQ(r->time.compute, 6.0);  // every device runs the whole of each op
  EXPECT_DOUBLE_EQ(r->time.communication, 0.0);
}

// ---- Random DAGs and random valid schedules with recomputation ----

ir::Graph RandomDag(std::mt19937& rng, int n) {
  ir::Graph g("random");
  for (int v = 0; v < n; ++v) {
    std::vector<NodeId> inputs;
    const int k = v == 0 ? 0 : static_cast<int>(rng() % 4);
    for (int j = 0; j < k; ++j) inputs.push_back(static_cast<NodeId>(rng() % static_cast<unsigned>(v)));
    const bool parameter = inputs.empty() && rng() % 3 == 0;
    const double cost = 0.5 * (1 + rng() % 8);  // halves: sums are exact
    AddBytes(g, "n" + std::to_string(v), 1 + rng() % 1000, cost, inputs,
             parameter ? OpKind::kParameter : OpKind::kOpaque);
  }
  return g;
}

// Computes v, first recomputing (recursively) any input that is not resident.
void Ensure(const ir::Graph& g, NodeId v, std::vector<bool>& resident, std::vector<plan::Step>& out) {
  if (resident[static_cast<size_t>(v)]) return;
  for (NodeId in : g.node(v).inputs) Ensure(g, in, resident, out);
  out.push_back(C(v));
  resident[static_cast<size_t>(v)] = true;
}

// Every node in order; after each compute, each resident non-persistent tensor is freed with
// probability 0.4, so later nodes often need their inputs recomputed.
std::vector<plan::Step> RandomSchedule(std::mt19937& rng, const ir::Graph& g) {
  std::vector<bool> resident(static_cast<size_t>(g.size()), false);
  std::vector<plan::Step> steps;
  for (NodeId v : g.order()) {
    Ensure(g, v, resident, steps);
    for (NodeId u = 0; u < g.size(); ++u)
      if (resident[static_cast<size_t>(u)] && !g.node(u).is_persistent() && rng() % 10 < 4) {
        steps.push_back(F(u));
        resident[static_cast<size_t>(u)] = false;
      }
  }
  return steps;
}

TEST(SimulateOperatorPlan, RandomSchedulesMatchANaiveReplay) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 40; ++trial) {
    const ir::Graph g = RandomDag(rng, 2 + static_cast<int>(rng() % 25));
    const std::vector<plan::Step> steps = RandomSchedule(rng, g);
    Result<SimResult> r = Simulate(g, steps);
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_EQ(r->timeline.size(), steps.size());

    std::set<NodeId> live;
    std::vector<int> computes(static_cast<size_t>(g.size()), 0);
    int64_t peak = 0, largest_working_set = 0;
    int32_t peak_step = -1;
    double first_cost = 0.0, extra_cost = 0.0;
    for (size_t i = 0; i < steps.size(); ++i) {
      const NodeId v = steps[i].node;
      if (steps[i].kind == plan::StepKind::kFree) {
        live.erase(v);
      } else {
        live.insert(v);
        const double cost = g.node(v).is_persistent() ? 0.0 : *g.node(v).measured_cost;
        if (computes[static_cast<size_t>(v)]++ == 0) {
          first_cost += cost;
        } else {
          extra_cost += cost;
        }
      }
      int64_t sum = 0;
      for (NodeId u : live) sum += g.node(u).output.Bytes();
      EXPECT_EQ(r->timeline[i].bytes_after, sum) << "trial " << trial << " step " << i;
      if (steps[i].kind == plan::StepKind::kFree) continue;
      if (sum > peak || peak_step < 0) peak_step = static_cast<int32_t>(i);  // the first step reaching it
      peak = std::max(peak, sum);
      // The working set of a compute: its output and its (distinct) inputs.
      const std::set<NodeId> inputs(g.node(v).inputs.begin(), g.node(v).inputs.end());
      int64_t working_set = g.node(v).output.Bytes();
      for (NodeId in : inputs) working_set += g.node(in).output.Bytes();
      EXPECT_GE(r->timeline[i].bytes_after, working_set);
      largest_working_set = std::max(largest_working_set, working_set);
    }
    EXPECT_EQ(r->peak_memory_bytes, peak);
    EXPECT_GE(r->peak_memory_bytes, largest_working_set);
    EXPECT_EQ(r->peak_step, peak_step);
    EXPECT_EQ(r->recomputations, static_cast<int64_t>(std::count_if(steps.begin(), steps.end(), [](const plan::Step& s) {
                return s.kind == plan::StepKind::kCompute;
              })) - g.size());
    EXPECT_DOUBLE_EQ(r->time.compute, first_cost);
    EXPECT_DOUBLE_EQ(r->time.recompute, extra_cost);
  }
}

// CONTRACT.md's checkpoint_all_peak_bytes, computed as intervals: right after the compute at position
// i, the resident tensors are those computed at or before i whose last consumer runs at or after i
// (persistent ones forever).
int64_t CheckpointAllPeakByIntervals(const ir::Graph& g) {
  const auto n = static_cast<size_t>(g.size());
  std::vector<int> last(n);
  for (size_t v = 0; v < n; ++v) last[v] = g.node(static_cast<NodeId>(v)).is_persistent() ? static_cast<int>(n) : static_cast<int>(v);
  for (const ir::Node& node : g.nodes())
    for (NodeId in : node.inputs) last[static_cast<size_t>(in)] = std::max(last[static_cast<size_t>(in)], node.id);
  int64_t peak = 0;
  for (size_t i = 0; i < n; ++i) {
    int64_t live = 0;
    for (size_t u = 0; u <= i; ++u)
      if (last[u] >= static_cast<int>(i)) live += g.node(static_cast<NodeId>(u)).output.Bytes();
    peak = std::max(peak, live);
  }
  return peak;
}

TEST(SimulateOperatorPlan, RandomCheckpointAllPeakMatchesTheIntervalDefinition) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const ir::Graph g = RandomDag(rng, 1 + static_cast<int>(rng() % 40));
    Result<SimResult> r = Simulate(g);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->peak_memory_bytes, CheckpointAllPeakByIntervals(g)) << "trial " << trial;
    EXPECT_EQ(r->recomputations, 0);
    EXPECT_DOUBLE_EQ(r->time.recompute, 0.0);
  }
}

}  // namespace
}  // namespace kiwi::sim
