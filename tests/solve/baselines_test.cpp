#include "kiwi/solve/remat/baselines.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "kiwi/io/graph_json.h"
#include "kiwi/models/presets.h"

namespace kiwi::solve::remat {
namespace {

cost::CostModel TestCostModel() { return cost::CostModel(cost::DeviceSpec{}); }

ir::NodeId AddOpaque(ir::Graph& g, const std::string& name, int64_t bytes, std::vector<ir::NodeId> inputs,
                     ir::Pass pass = ir::Pass::kForward) {
  ir::Node n;
  n.name = name;
  n.kind = ir::OpKind::kOpaque;
  n.pass = pass;
  n.output = {ir::DType::kU8, {bytes}};
  n.measured_cost = 1.0;
  n.inputs = std::move(inputs);
  return g.Add(std::move(n));
}

// A forward chain f0 -> ... -> f{n-1} (plus `skips` extra edges) and one gradient node per forward
// node, reading the node and the gradient of its successor.
ir::Graph Chain(const std::vector<int64_t>& bytes, const std::vector<std::pair<int, int>>& skips = {}) {
  ir::Graph g("chain");
  const int n = static_cast<int>(bytes.size());
  for (int i = 0; i < n; ++i) {
    std::vector<ir::NodeId> in;
    if (i > 0) in.push_back(i - 1);
    for (const auto& [from, to] : skips)
      if (to == i) in.push_back(from);
    AddOpaque(g, "f" + std::to_string(i), bytes[static_cast<size_t>(i)], in);
  }
  for (int i = n - 1; i >= 0; --i) {
    std::vector<ir::NodeId> in = {i};
    if (i < n - 1) in.push_back(g.size() - 1);
    AddOpaque(g, "g" + std::to_string(i), 1, in, ir::Pass::kBackward);
  }
  return g;
}

RematProblem Problem(const ir::Graph& g, int64_t budget = int64_t{1} << 40) {
  Result<RematProblem> p = MakeRematProblem(g, TestCostModel(), budget);
  EXPECT_TRUE(p.ok());
  return std::move(*p);
}

std::set<ir::NodeId> Dropped(const KeepSetScheduler& ks, const std::vector<bool>& keep) {
  std::set<ir::NodeId> dropped;
  for (ir::NodeId v : ForwardActivations(ks))
    if (!keep[static_cast<size_t>(v)]) dropped.insert(v);
  return dropped;
}

TEST(Baselines, ForwardActivationsAreTheForwardNodes) {
  const ir::Graph g = Chain(std::vector<int64_t>(5, 10));
  const RematProblem p = Problem(g);
  const KeepSetScheduler ks(p);
  EXPECT_EQ(ForwardActivations(ks), (std::vector<ir::NodeId>{0, 1, 2, 3, 4}));
}

TEST(Baselines, ArticulationPointsOfADiamond) {
  // f0 -> f1 -> {f2, f3} -> f4 -> f5: f2 and f3 are bypassed by each other; f0 (a source) is left out.
  ir::Graph g("diamond");
  AddOpaque(g, "f0", 1, {});
  AddOpaque(g, "f1", 1, {0});
  AddOpaque(g, "f2", 1, {1});
  AddOpaque(g, "f3", 1, {1});
  AddOpaque(g, "f4", 1, {2, 3});
  AddOpaque(g, "f5", 1, {4});
  AddOpaque(g, "g", 1, {5, 4}, ir::Pass::kBackward);
  const RematProblem p = Problem(g);
  const KeepSetScheduler ks(p);
  EXPECT_EQ(ForwardArticulationPoints(ks), (std::vector<ir::NodeId>{1, 4, 5}));
}

TEST(Baselines, SkipConnectionsRemoveArticulationPoints) {
  // f1 -> f4 bypasses f2 and f3 (a residual block).
  const ir::Graph g = Chain(std::vector<int64_t>(6, 10), {{1, 4}});
  const RematProblem p = Problem(g);
  const KeepSetScheduler ks(p);
  EXPECT_EQ(ForwardArticulationPoints(ks), (std::vector<ir::NodeId>{1, 4, 5}));
}

TEST(Baselines, SqrtNKeepsSegmentBoundariesOfAChain) {
  // 9 activations: 3 segments of 3; the boundaries are the last nodes of the first two: f2 and f5.
  const ir::Graph g = Chain(std::vector<int64_t>(9, 10));
  const RematProblem p = Problem(g);
  const KeepSetScheduler ks(p);
  EXPECT_EQ(Dropped(ks, SqrtNKeep(ks, false)), (std::set<ir::NodeId>{0, 1, 3, 4, 6, 7, 8}));
  EXPECT_EQ(Dropped(ks, SqrtNKeep(ks, true)), (std::set<ir::NodeId>{0, 1, 3, 4, 6, 7, 8}));
}

TEST(Baselines, SqrtNSnapsBoundariesToArticulationPoints) {
  // Skips f1 -> f3 and f4 -> f6 leave f1, f3, f4, f6, f7, f8 as articulation points; the boundaries
  // nearest to f2 and f5 are f3 and f6 (ties go to the later point).
  const ir::Graph g = Chain(std::vector<int64_t>(9, 10), {{1, 3}, {4, 6}});
  const RematProblem p = Problem(g);
  const KeepSetScheduler ks(p);
  EXPECT_EQ(ForwardArticulationPoints(ks), (std::vector<ir::NodeId>{1, 3, 4, 6, 7, 8}));
  EXPECT_EQ(Dropped(ks, SqrtNKeep(ks, true)), (std::set<ir::NodeId>{0, 1, 2, 4, 5, 7, 8}));
}

TEST(Baselines, ChenGreedyStartsASegmentOnceTheRunningSizeExceedsTheThreshold) {
  const ir::Graph g = Chain({10, 10, 10, 10, 10, 10, 10});
  const RematProblem p = Problem(g);
  const KeepSetScheduler ks(p);
  // Running sums 10, 20, 30 > 25: keep f2; again 10, 20, 30: keep f5; then 10.
  EXPECT_EQ(Dropped(ks, ChenGreedyKeep(ks, 25, false)), (std::set<ir::NodeId>{0, 1, 3, 4, 6}));
  // Threshold 5: every node exceeds it alone.
  EXPECT_TRUE(Dropped(ks, ChenGreedyKeep(ks, 5, false)).empty());
}

TEST(Baselines, ChenGreedyWithArticulationPointsWaitsForOne) {
  // Only f1, f4, f5, f6 are articulation points (f1 -> f4 skips f2, f3).
  const ir::Graph g = Chain({10, 10, 10, 10, 10, 10, 10}, {{1, 4}});
  const RematProblem p = Problem(g);
  const KeepSetScheduler ks(p);
  EXPECT_EQ(ForwardArticulationPoints(ks), (std::vector<ir::NodeId>{1, 4, 5, 6}));
  // Running 10, 20 (f1 ok but 20 <= 25), 30 (f2 not a point), 40 (f3 not), 50 at f4: keep f4; 10, 20.
  EXPECT_EQ(Dropped(ks, ChenGreedyKeep(ks, 25, true)), (std::set<ir::NodeId>{0, 1, 2, 3, 5, 6}));
}

TEST(Baselines, OpaqueNamesThatAreDots) {
  for (const char* dot : {"conv2_block1_1_conv", "block1_conv1", "fc1", "predictions", "conv_dw_1", "conv_pw_13",
                          "conv1", "dense_2", "layer0.attn.q/MatMul"})
    EXPECT_TRUE(OpaqueNameIsDot(dot)) << dot;
  for (const char* other : {"conv2_block1_1_bn", "conv1_relu", "conv_pad_2", "block1_pool", "flatten",
                            "conv2_block1_add", "conv2_block1_out", "conv_dw_1_bn", "pool1_pool", "input_1"})
    EXPECT_FALSE(OpaqueNameIsDot(other)) << other;
}

TEST(Baselines, CheckpointDotsKeepsDotsOfAGraphFile) {
  ir::Graph g("keras");
  AddOpaque(g, "block1_conv1", 10, {});
  AddOpaque(g, "block1_relu", 10, {0});
  AddOpaque(g, "block1_conv2", 10, {1});
  AddOpaque(g, "block1_bn", 10, {2});
  AddOpaque(g, "fc1", 10, {3});
  AddOpaque(g, "g", 1, {4, 3, 2, 1, 0}, ir::Pass::kBackward);
  const RematProblem p = Problem(g);
  const KeepSetScheduler ks(p);
  EXPECT_EQ(Dropped(ks, CheckpointDotsKeep(ks)), (std::set<ir::NodeId>{1, 3}));
}

ir::Graph SmallGpt() {
  models::ModelOverrides o;
  o.layers = 2;
  o.hidden = 64;
  o.heads = 4;
  o.seq = 16;
  o.batch = 2;
  Result<models::ModelSpec> spec = models::LoadModel("gpt", o);
  EXPECT_TRUE(spec.ok());
  Result<ir::Graph> g = models::BuildTrainingGraph(*spec);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  return std::move(*g);
}

TEST(Baselines, CheckpointDotsKeepsMatmulOutputsOfAModel) {
  const ir::Graph g = SmallGpt();
  const RematProblem p = Problem(g);
  const KeepSetScheduler ks(p);
  const std::vector<bool> keep = CheckpointDotsKeep(ks);
  int dots = 0;
  for (ir::NodeId v : ForwardActivations(ks)) {
    const ir::Node& n = g.node(v);
    const bool dot = n.kind == ir::OpKind::kMatmul || n.kind == ir::OpKind::kBatchMatmul;
    EXPECT_EQ(keep[static_cast<size_t>(v)], dot) << n.name;
    dots += dot;
  }
  EXPECT_GE(dots, 2 * 8);  // q, k, v, scores, context, out, fc1, fc2 per layer
}

TEST(Baselines, MegatronSelectiveRecomputesTheAttentionCore) {
  const ir::Graph g = SmallGpt();
  const RematProblem p = Problem(g);
  const KeepSetScheduler ks(p);
  std::set<std::string> dropped;
  for (ir::NodeId v : Dropped(ks, MegatronSelectiveKeep(ks))) dropped.insert(g.node(v).name);
  std::set<std::string> expected;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string scope = "layer" + std::to_string(layer) + ".attn.";
    expected.insert(scope + "scores");
    expected.insert(scope + "softmax");
    for (const ir::Node& n : g.nodes())  // dropout sites exist only when the preset trains with dropout
      if (n.name == scope + "attn_dropout") expected.insert({scope + "attn_dropout", scope + "attn_dropout_mask"});
  }
  EXPECT_EQ(expected.size(), 8u);  // GPT trains with dropout: scores, softmax, mask, dropout per layer
  EXPECT_EQ(dropped, expected);
}

TEST(Baselines, MegatronSelectiveWithoutAttentionIsCheckpointAll) {
  const ir::Graph g = Chain(std::vector<int64_t>(5, 10));
  const RematProblem p = Problem(g, 1000);
  Result<RematResult> r = SolveMegatronSelective(p, TestCostModel());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->schedule, plan::CheckpointAllSchedule(g));
  EXPECT_DOUBLE_EQ(r->cost, p.baseline_cost);
}

TEST(Baselines, CheckpointAllIsFeasibleIffItsPeakFits) {
  const ir::Graph g = Chain({10, 20, 30, 40});
  RematProblem p = Problem(g);
  p.budget = p.checkpoint_all_peak;
  Result<RematResult> fits = SolveCheckpointAll(p, TestCostModel());
  ASSERT_TRUE(fits.ok());
  EXPECT_TRUE(fits->feasible);
  EXPECT_DOUBLE_EQ(fits->cost, p.baseline_cost);
  p.budget = p.checkpoint_all_peak - 1;
  Result<RematResult> over = SolveCheckpointAll(p, TestCostModel());
  ASSERT_TRUE(over.ok());
  EXPECT_FALSE(over->feasible);
  EXPECT_TRUE(over->schedule.empty());
  EXPECT_EQ(over->peak_memory, p.checkpoint_all_peak);
}

TEST(Baselines, SqrtNOnAChainCostsOneExtraForwardPass) {
  // Chen et al.: every non-boundary forward node is recomputed once.
  const ir::Graph g = Chain(std::vector<int64_t>(16, 10));
  const RematProblem p = Problem(g);
  Result<RematResult> r = SolveSqrtN(p, TestCostModel());
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->feasible);
  // 16 activations: 4 segments, boundaries f3, f7, f11 kept; f0 (the source) is recomputed too, f15
  // is not (the backward pass reads it right away): 3 recomputations per segment.
  EXPECT_DOUBLE_EQ(r->cost, p.baseline_cost + 12.0);
  EXPECT_LT(r->peak_memory, p.checkpoint_all_peak);
}

TEST(Baselines, EveryBaselineReplaysOnTheBenchmarkGraphs) {
  const std::filesystem::path dir = std::filesystem::path(KIWI_SHARED_DIR) / "benchmarks" / "remat";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    Result<ir::Graph> g = io::ReadGraphFile(entry.path().string());
    ASSERT_TRUE(g.ok());
    for (double f : {1.0, 0.9, 0.8}) {
      RematProblem p = Problem(*g);
      p.budget = static_cast<int64_t>(f * static_cast<double>(p.checkpoint_all_peak));
      for (SolverKind k : {SolverKind::kCheckpointAll, SolverKind::kSqrtN, SolverKind::kGreedy, SolverKind::kCkptDots,
                           SolverKind::kMegatronSelective}) {
        Result<RematResult> r = SolveBaseline(p, TestCostModel(), k, RematOptions{});
        ASSERT_TRUE(r.ok()) << entry.path() << ": " << r.error().message;
        EXPECT_EQ(r->feasible, r->peak_memory <= p.budget);
        EXPECT_EQ(r->feasible, !r->schedule.empty());
        EXPECT_GE(r->cost, p.baseline_cost * (1 - 1e-12));
        if (k == SolverKind::kCheckpointAll) { EXPECT_EQ(r->feasible, f >= 1.0); }
      }
    }
  }
}

TEST(Baselines, SolveBaselineRejectsOtherSolvers) {
  const ir::Graph g = Chain({10, 10});
  const RematProblem p = Problem(g);
  Result<RematResult> r = SolveBaseline(p, TestCostModel(), SolverKind::kIlp, RematOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInternal);
}

}  // namespace
}  // namespace kiwi::solve::remat
