#include "kiwi/solve/remat/max_batch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "kiwi/io/graph_json.h"

namespace kiwi::solve::remat {
namespace {

cost::CostModel TestCostModel() { return cost::CostModel(cost::DeviceSpec{}); }

ir::NodeId Add(ir::Graph& g, const std::string& name, ir::OpKind kind, int64_t bytes, std::vector<ir::NodeId> inputs,
               ir::Pass pass = ir::Pass::kForward) {
  ir::Node n;
  n.name = name;
  n.kind = kind;
  n.pass = pass;
  n.output = {ir::DType::kU8, {bytes}};
  n.measured_cost = 1.0;
  n.inputs = std::move(inputs);
  return g.Add(std::move(n));
}

// At batch 1: a parameter w (1000 B, fixed) and the chain a -> b(a, w) -> c, gc(c), gb(gc, b, w), ga(gb, a).
ir::Graph ChainWithParameter() {
  ir::Graph g("chain");
  const ir::NodeId w = Add(g, "w", ir::OpKind::kParameter, 1000, {});
  const ir::NodeId a = Add(g, "a", ir::OpKind::kOpaque, 10, {});
  const ir::NodeId b = Add(g, "b", ir::OpKind::kOpaque, 20, {a, w});
  const ir::NodeId c = Add(g, "c", ir::OpKind::kOpaque, 5, {b});
  const ir::NodeId gc = Add(g, "gc", ir::OpKind::kOpaque, 5, {c}, ir::Pass::kBackward);
  const ir::NodeId gb = Add(g, "gb", ir::OpKind::kOpaque, 20, {gc, b, w}, ir::Pass::kBackward);
  Add(g, "ga", ir::OpKind::kOpaque, 10, {gb, a}, ir::Pass::kBackward);
  return g;
}

RematOptions Options() {
  RematOptions o;
  o.time_limit_seconds = 5.0;
  return o;
}

TEST(ScaleOpaqueGraph, ScalesActivationsAndCostsButNotParameters) {
  const ir::Graph g = ChainWithParameter();
  Result<ir::Graph> s = ScaleOpaqueGraph(g, 2, 7);  // the graph is at batch 2; go to 7
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->node(0).output.shape[0], 1000);
  EXPECT_EQ(s->node(1).output.shape[0], 35);
  EXPECT_EQ(s->node(3).output.shape[0], 18);  // 5 * 7 / 2 = 17.5 rounds to 18
  EXPECT_DOUBLE_EQ(*s->node(2).measured_cost, 3.5);
  EXPECT_DOUBLE_EQ(*s->node(0).measured_cost, 1.0);
}

TEST(ScaleOpaqueGraph, RejectsTypedActivationsAndBadBatches) {
  ir::Graph g = ChainWithParameter();
  g.mutable_node(2).kind = ir::OpKind::kMatmul;
  Result<ir::Graph> typed = ScaleOpaqueGraph(g, 1, 2);
  ASSERT_FALSE(typed.ok());
  EXPECT_EQ(typed.error().code, ErrorCode::kBadInput);
  EXPECT_NE(typed.error().message.find("node 2 'b'"), std::string::npos) << typed.error().message;
  EXPECT_FALSE(ScaleOpaqueGraph(ChainWithParameter(), 0, 2).ok());
  EXPECT_FALSE(ScaleOpaqueGraph(ChainWithParameter(), 1, 0).ok());
  Result<ir::Graph> huge = ScaleOpaqueGraph(ChainWithParameter(), 1, int64_t{1} << 62);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.error().message.find("overflow"), std::string::npos);
}

TEST(MaxBatch, CheckpointAllOnAChainMatchesTheHandComputedBatch) {
  // Checkpoint-all peaks at gb with w + a + b + gc + gb = 1000 + 55 * batch bytes.
  const ir::Graph g = ChainWithParameter();
  for (int64_t batch : {1, 7, 100}) {
    const int64_t budget = 1000 + 55 * batch + 54;  // one byte short of batch + 1
    Result<MaxBatchResult> r = MaxBatchSize(g, 1, budget, SolverKind::kCheckpointAll, TestCostModel(), Options());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->batch, batch);
    EXPECT_EQ(r->plan.peak_memory, 1000 + 55 * batch);
    EXPECT_DOUBLE_EQ(r->plan.cost, 6.0 * static_cast<double>(batch));  // six nodes of cost 1 per sample
    EXPECT_TRUE(r->plan.feasible);
  }
}

TEST(MaxBatch, NothingFitsGivesBatchZero) {
  Result<MaxBatchResult> r =
      MaxBatchSize(ChainWithParameter(), 1, 1000, SolverKind::kCheckpointAll, TestCostModel(), Options());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->batch, 0);
  ASSERT_EQ(r->probes.size(), 1u);
  EXPECT_FALSE(r->probes[0].fits);
}

TEST(MaxBatch, StopsAtTheLargestBatchAllowed) {
  MaxBatchOptions o;
  o.max_batch = 6;
  Result<MaxBatchResult> r =
      MaxBatchSize(ChainWithParameter(), 1, 1 << 20, SolverKind::kCheckpointAll, TestCostModel(), Options(), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->batch, 6);
  for (const BatchProbe& p : r->probes) EXPECT_LE(p.batch, 6);
}

// Issue 18: --time-limit bounds the whole search (it applied to each of about ten probes: 3.6 s against
// 1 s). No probe starts after the deadline; the answer is the largest batch that fitted so far.
TEST(MaxBatch, NoProbeStartsAfterTheDeadline) {
  const ir::Graph g = ChainWithParameter();
  const cost::CostModel cm = TestCostModel();
  const GraphAtBatch graph_at = [&](int64_t batch) { return ScaleOpaqueGraph(g, 1, batch); };
  MaxBatchOptions o;  // the search reads it by reference: the third probe ends past its deadline
  int probes = 0;
  const BatchSolver solve = [&](const RematProblem& p) {
    if (++probes == 3) o.deadline = std::chrono::steady_clock::time_point::min();
    return SolveRemat(p, cm, SolverKind::kCheckpointAll, Options());
  };
  Result<MaxBatchResult> r = MaxBatchSize(graph_at, 1 << 20, cm, solve, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->timed_out);
  ASSERT_EQ(r->probes.size(), 3u);  // batches 1, 2, 4; batch 8 is never probed
  EXPECT_EQ(r->batch, 4);
  EXPECT_TRUE(r->plan.feasible);

  o.deadline = std::chrono::steady_clock::time_point::min();
  Result<MaxBatchResult> none = MaxBatchSize(graph_at, 1 << 20, cm, solve, o);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->timed_out);
  EXPECT_EQ(none->batch, 0);
  EXPECT_TRUE(none->probes.empty());
  // Without a deadline the search runs to its end.
  Result<MaxBatchResult> all = MaxBatchSize(g, 1, 1 << 20, SolverKind::kCheckpointAll, cm, Options());
  ASSERT_TRUE(all.ok());
  EXPECT_FALSE(all->timed_out);
  EXPECT_GT(all->batch, 4);
}

TEST(MaxBatch, RematerializationFitsALargerBatch) {
  // Dropping b (recomputed for gb) lowers the peak to w + a + c + gc... so the heuristic fits more.
  const ir::Graph g = ChainWithParameter();
  const int64_t budget = 1000 + 55 * 10;
  Result<MaxBatchResult> all = MaxBatchSize(g, 1, budget, SolverKind::kCheckpointAll, TestCostModel(), Options());
  Result<MaxBatchResult> heuristic = MaxBatchSize(g, 1, budget, SolverKind::kHeuristic, TestCostModel(), Options());
  ASSERT_TRUE(all.ok() && heuristic.ok());
  EXPECT_EQ(all->batch, 10);
  EXPECT_GT(heuristic->batch, all->batch);
  EXPECT_LE(heuristic->plan.peak_memory, budget);
  EXPECT_GT(heuristic->plan.cost, 6.0 * static_cast<double>(heuristic->batch));  // it recomputes something
}

TEST(MaxBatch, MoreBudgetNeverGivesASmallerBatch) {
  const std::filesystem::path file =
      std::filesystem::path(KIWI_SHARED_DIR) / "benchmarks" / "remat" / "vgg16_b256_train.json";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << file << " is absent";
  Result<ir::Graph> g = io::ReadGraphFile(file.string());
  ASSERT_TRUE(g.ok());
  Result<RematProblem> p = MakeRematProblem(*g, TestCostModel(), 0);
  ASSERT_TRUE(p.ok());
  for (SolverKind kind : {SolverKind::kCheckpointAll, SolverKind::kSqrtN, SolverKind::kHeuristic}) {
    int64_t previous = 0;
    for (double f : {0.5, 0.8, 1.0, 1.5, 2.0}) {
      const auto budget = static_cast<int64_t>(f * static_cast<double>(p->checkpoint_all_peak));
      Result<MaxBatchResult> r = MaxBatchSize(*g, 256, budget, kind, TestCostModel(), Options());
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_GE(r->batch, previous) << SolverName(kind) << " at " << f;
      if (kind == SolverKind::kCheckpointAll && f == 1.0) { EXPECT_EQ(r->batch, 256); }  // its own batch fits exactly
      if (r->batch > 0) { EXPECT_LE(r->plan.peak_memory, budget); }
      previous = r->batch;
    }
  }
}

TEST(MaxBatch, RemainsMonotoneOnEveryProbe) {
  // The search's probes agree with monotonicity: every probe below the answer fits, every one above fails.
  const ir::Graph g = ChainWithParameter();
  Result<MaxBatchResult> r = MaxBatchSize(g, 1, 1000 + 55 * 37, SolverKind::kCheckpointAll, TestCostModel(), Options());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->batch, 37);
  for (const BatchProbe& p : r->probes) EXPECT_EQ(p.fits, p.batch <= 37) << p.batch;
}

// Checkmate's max-batch experiment on VGG16 (report table): run with --gtest_also_run_disabled_tests.
TEST(MaxBatch, DISABLED_Vgg16Table) {
  const std::filesystem::path file =
      std::filesystem::path(KIWI_SHARED_DIR) / "benchmarks" / "remat" / "vgg16_b256_train.json";
  if (!std::filesystem::exists(file)) GTEST_SKIP();
  Result<ir::Graph> g = io::ReadGraphFile(file.string());
  ASSERT_TRUE(g.ok());
  Result<RematProblem> p = MakeRematProblem(*g, TestCostModel(), 0);
  ASSERT_TRUE(p.ok());
  const int64_t budget = p->checkpoint_all_peak;  // the memory that fits batch 256 without remat
  for (SolverKind kind : {SolverKind::kCheckpointAll, SolverKind::kSqrtN, SolverKind::kGreedy, SolverKind::kCkptDots,
                          SolverKind::kHeuristic}) {
    Result<MaxBatchResult> r = MaxBatchSize(*g, 256, budget, kind, TestCostModel(), Options());
    ASSERT_TRUE(r.ok());
    std::printf("| %s | %lld | %.3f | %zu probes |\n", SolverName(kind).c_str(), static_cast<long long>(r->batch),
                r->plan.cost / (p->baseline_cost * static_cast<double>(r->batch) / 256.0), r->probes.size());
  }
}

}  // namespace
}  // namespace kiwi::solve::remat
