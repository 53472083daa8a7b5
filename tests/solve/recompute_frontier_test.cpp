// Recompute sets (cost/recompute_set.h) and their frontier (solve/remat/recompute_frontier.h): the
// minimum cut equals brute force over every set of a layer's recomputable ops, the frontier's sets are
// Pareto-optimal among them all, and a set's price is its ops' closed form.
#include "kiwi/solve/remat/recompute_frontier.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/cost/layer_cost.h"
#include "kiwi/models/layer_model.h"
#include "kiwi/sim/layer_simulator.h"

namespace kiwi::solve::remat {
namespace {

cost::LayerModel LayerModelOf(const std::string& family, models::AttentionKernel attention) {
  models::ModelOverrides o;
  o.layers = 2;
  o.batch = 2;
  o.hidden = 64;
  o.heads = 4;
  o.seq = 32;
  o.attention = attention;
  Result<models::ModelSpec> spec = models::LoadModel(family, o);
  EXPECT_TRUE(spec.ok()) << family << ": " << spec.error().message;
  if (!spec.ok()) return {};
  Result<cost::Cluster> cluster = cost::ClusterPreset("dgx-h100");
  EXPECT_TRUE(cluster.ok());
  Result<cost::LayerModel> m = models::BuildSpecLayerModel(*spec, cost::CostModel{cluster->device});
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? *m : cost::LayerModel{};
}

const cost::RecomputeMenu& MenuOf(const cost::LayerModel& m) { return *m.layers.front().recompute_menu.menu; }

// What the closure minimizes: bytes kept (less those dropped) + lambda x recompute seconds.
double Objective(const cost::RecomputeCost& c, double lambda) {
  return -static_cast<double>(c.dropped_bytes_per_sample) + lambda * c.seconds_per_sample;
}

std::vector<int> Recomputable(const cost::RecomputeMenu& menu) {
  std::vector<int> ops;
  for (size_t i = 0; i < menu.ops.size(); ++i)
    if (menu.ops[i].recomputable) ops.push_back(static_cast<int>(i));
  return ops;
}

// Every set of the menu's recomputable ops (2^n of them), priced.
std::vector<cost::RecomputeCost> EverySet(const cost::RecomputeMenu& menu) {
  const std::vector<int> ops = Recomputable(menu);
  std::vector<cost::RecomputeCost> all;
  for (uint64_t mask = 0; mask < (uint64_t{1} << ops.size()); ++mask) {
    std::vector<bool> in_set(menu.ops.size(), false);
    for (size_t k = 0; k < ops.size(); ++k) in_set[static_cast<size_t>(ops[k])] = (mask >> k & 1) != 0;
    all.push_back(cost::PriceRecomputeSet(menu, in_set));
  }
  return all;
}

constexpr models::AttentionKernel kFused = models::AttentionKernel::kFused;
constexpr models::AttentionKernel kMaterialized = models::AttentionKernel::kMaterialized;

// For prices from nothing to far beyond every op's bytes per second, the minimum cut's set is as good as
// the best of every set of a Llama layer's 16 recomputable ops (65,536).
TEST(RecomputeFrontier, MinimumCutEqualsBruteForce) {
  const cost::LayerModel m = LayerModelOf("llama", kFused);
  const cost::RecomputeMenu& menu = MenuOf(m);
  ASSERT_EQ(Recomputable(menu).size(), 16u);
  const std::vector<cost::RecomputeCost> all = EverySet(menu);
  for (double lambda : {0.0, 1e9, 1e11, 5e11, 1e12, 2e12, 5e12, 1e13, 1e15}) {
    double best = INFINITY;
    for (const cost::RecomputeCost& c : all) best = std::min(best, Objective(c, lambda));
    const double cut = Objective(cost::PriceRecomputeSet(menu, CheapestRecomputeSet(menu, lambda)), lambda);
    EXPECT_NEAR(cut, best, 1e-6 * std::max(1.0, std::abs(best))) << "lambda " << lambda;
  }
}

// No set of the layer's ops both recomputes less and drops more than a frontier set; the frontier drops
// more with each step and ends at the most any set drops.
TEST(RecomputeFrontier, SetsAreParetoOptimal) {
  for (auto kernel : {kFused, kMaterialized}) {
    const cost::LayerModel m = LayerModelOf("llama", kernel);
    const cost::RecomputeMenu& menu = MenuOf(m);
    if (Recomputable(menu).size() > 18) continue;  // brute force stays small
    const std::vector<cost::RecomputeCost> all = EverySet(menu);
    const std::vector<FrontierSet> frontier = RecomputeFrontier(menu);
    ASSERT_GE(frontier.size(), 3u);
    int64_t most = 0;
    for (const cost::RecomputeCost& c : all) most = std::max(most, c.dropped_bytes_per_sample);
    EXPECT_EQ(frontier.back().cost.dropped_bytes_per_sample, most);
    for (size_t k = 0; k < frontier.size(); ++k) {
      const cost::RecomputeCost& f = frontier[k].cost;
      if (k > 0) {
        EXPECT_GT(f.dropped_bytes_per_sample, frontier[k - 1].cost.dropped_bytes_per_sample);
        EXPECT_GE(f.seconds_per_sample, frontier[k - 1].cost.seconds_per_sample);
      }
      for (const cost::RecomputeCost& c : all) {
        const bool dominates = c.seconds_per_sample <= f.seconds_per_sample * (1 - 1e-9) &&
                               c.dropped_bytes_per_sample >= f.dropped_bytes_per_sample;
        EXPECT_FALSE(dominates) << "set " << k << " is dominated";
      }
      Result<cost::RecomputeCost> by_name = cost::PriceRecomputeSet(menu, frontier[k].ops);
      ASSERT_TRUE(by_name.ok());
      EXPECT_EQ(*by_name, f);
    }
    const std::vector<FrontierSet> two = RecomputeFrontier(menu, 2);
    ASSERT_EQ(two.size(), 2u);
    EXPECT_EQ(two.back().ops, frontier.back().ops);
  }
}

// A set's price is its ops' closed form: the SwiGLU's activation output (saved for the gated product's
// backward) drops its bytes for its forward seconds; the query heads' transpose drops its bytes but must
// keep its input (the split, which the backward does not keep), so it drops nothing; a GPT layer's whole
// attention core drops what Megatron's selective recomputation does (Korthikanti et al. 2023 eq. 6).
TEST(RecomputeSet, PricesOpsInClosedForm) {
  const cost::LayerModel llama = LayerModelOf("llama", kFused);
  const cost::RecomputeMenu& menu = MenuOf(llama);
  const cost::MenuOp& act = menu.ops[static_cast<size_t>(menu.Find("mlp.act"))];
  const std::vector<std::string> one{"mlp.act"};
  Result<cost::RecomputeCost> c = cost::PriceRecomputeSet(menu, one);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->dropped_bytes_per_sample, act.bytes_per_sample);
  EXPECT_EQ(c->dropped_replicated_bytes_per_sample, 0);  // split over TP (column-parallel)
  EXPECT_EQ(c->recomputed_bytes_per_sample, act.bytes_per_sample);
  EXPECT_DOUBLE_EQ(c->seconds_per_sample, act.seconds_per_sample);
  EXPECT_EQ(c->replicated_seconds_per_sample, 0.0);  // TP splits its work too
  EXPECT_FALSE(c->attention);
  const std::vector<std::string> heads{"attn.q_heads"};
  c = cost::PriceRecomputeSet(menu, heads);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->dropped_bytes_per_sample, 0);
  const std::vector<std::string> norms{"attn.norm", "mlp.norm"};  // kept whole on every TP rank
  c = cost::PriceRecomputeSet(menu, norms);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->dropped_replicated_bytes_per_sample, c->dropped_bytes_per_sample);
  EXPECT_GT(c->dropped_bytes_per_sample, 0);
  EXPECT_DOUBLE_EQ(c->replicated_seconds_per_sample, c->seconds_per_sample);  // and run whole again
  EXPECT_GT(c->seconds_per_sample, 0.0);

  const cost::LayerModel gpt = LayerModelOf("gpt", kMaterialized);
  const cost::LayerProfile& p = gpt.layers.front();
  const std::vector<std::string> core{"attn.scores", "attn.softmax", "attn.attn_dropout_mask", "attn.attn_dropout",
                                      "attn.context"};
  c = cost::PriceRecomputeSet(*p.recompute_menu.menu, core);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->dropped_bytes_per_sample, p.attention_core_bytes_per_sample);
  EXPECT_NEAR(c->seconds_per_sample, p.attention_core_seconds_per_sample, 1e-12);
  EXPECT_TRUE(c->attention);
}

TEST(RecomputeSet, BadNamesAreOneLineErrors) {
  const cost::LayerModel m = LayerModelOf("llama", kFused);
  const cost::RecomputeMenu& menu = MenuOf(m);
  for (const auto& [names, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"mlp.nope"}, "no op \"mlp.nope\" in the layer (its recomputable ops: attn.norm"},
           {{"mlp.up"}, "cannot recompute the op \"mlp.up\""},  // a linear
           {{"mlp.residual"}, "cannot recompute the op \"mlp.residual\""},  // read by the next layer
           {{"mlp.act", "mlp.act"}, "\"mlp.act\" is named twice"}}) {
    Result<cost::RecomputeCost> c = cost::PriceRecomputeSet(menu, names);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error().code, ErrorCode::kBadInput);
    EXPECT_NE(c.error().message.find(says), std::string::npos) << c.error().message;
    EXPECT_EQ(c.error().message.find('\n'), std::string::npos);
  }
}

// Repeated graph names get "#k" (the GPT layer's context matmul and the reshape after it are both
// "attn.context"), so every menu name is one op; the layers of a stack share their type's menu.
TEST(RecomputeSet, MenuNamesAreUniqueAndAlikeAcrossLayers) {
  const cost::LayerModel m = LayerModelOf("gpt", kMaterialized);
  const cost::RecomputeMenu& menu = MenuOf(m);
  for (size_t i = 0; i < menu.ops.size(); ++i) EXPECT_EQ(menu.Find(menu.ops[i].name), static_cast<int>(i));
  EXPECT_GE(menu.Find("attn.context#1"), 0);
  EXPECT_EQ(m.layers[0].recompute_menu, m.layers[1].recompute_menu);
  EXPECT_FALSE(m.embedding.recompute_menu.menu);
}

// A layer's memory and time with a set: its activations less the set's dropped bytes, its backward's
// transient more the recomputed ones, the set's forward seconds again (as recompute); whole-layer
// checkpointing moots it; the simulator replays it and rejects a set the layer cannot run.
TEST(RecomputeSet, LayerCostAndSimulatorPriceASet) {
  const cost::LayerModel m = LayerModelOf("llama", kFused);
  Result<cost::Cluster> cluster = cost::ClusterPreset("dgx-h100");
  ASSERT_TRUE(cluster.ok());
  const cost::CostModel cm{cluster->device};
  const cost::RecomputeMenu& menu = MenuOf(m);
  const int64_t act = menu.ops[static_cast<size_t>(menu.Find("mlp.act"))].bytes_per_sample;
  Result<cost::StageMesh> mesh = cost::MakeLayerMesh(*cluster, 1, {.tp = 1, .dp = 8});
  ASSERT_TRUE(mesh.ok());
  const cost::PlacedLayer keep{m.layers[0], {.tp = 1, .dp = 8}, *mesh, 2};
  cost::PlacedLayer set = keep;
  set.strategy.recompute = {"mlp.act"};
  const cost::StageMemory a = cost::LayerMemory(keep, m), b = cost::LayerMemory(set, m);
  EXPECT_EQ(a.activations - b.activations, 2 * act);
  EXPECT_EQ(b.transient - a.transient, 2 * act);
  cost::StageCost ta, tb;
  cost::AddLayerCost(keep, cm, ta);
  cost::AddLayerCost(set, cm, tb);
  EXPECT_EQ(ta.recompute, 0.0);
  EXPECT_GT(tb.recompute, 0.0);
  EXPECT_DOUBLE_EQ(tb.compute, ta.compute);
  cost::PlacedLayer ckpt = keep, ckpt_set = set;
  ckpt.strategy.checkpoint = ckpt_set.strategy.checkpoint = true;
  EXPECT_EQ(cost::LayerMemory(ckpt, m).activations, cost::LayerMemory(ckpt_set, m).activations);
  EXPECT_EQ(cost::LayerMemory(ckpt, m).transient, cost::LayerMemory(ckpt_set, m).transient);

  plan::LayerPlan plan;
  plan.layers.assign(2, {.tp = 1, .dp = 8});
  plan.global_batch = 16;
  Result<sim::LayerSimResult> base = sim::SimulateLayerPlan(m, plan, *cluster, cm);
  ASSERT_TRUE(base.ok()) << base.error().message;
  plan.layers[1].recompute = {"mlp.act", "attn.norm"};
  Result<sim::LayerSimResult> with = sim::SimulateLayerPlan(m, plan, *cluster, cm);
  ASSERT_TRUE(with.ok()) << with.error().message;
  EXPECT_GT(with->summary.time.recompute, base->summary.time.recompute);
  plan.layers[1].recompute = {"mlp.up"};
  Result<sim::LayerSimResult> bad = sim::SimulateLayerPlan(m, plan, *cluster, cm);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("layers[1]: recompute: layer layer1: cannot recompute the op \"mlp.up\""),
            std::string::npos) << bad.error().message;
  plan.layers[1].recompute = {"mlp.act"};
  plan.layers[1].selective_recompute = true;
  EXPECT_FALSE(sim::SimulateLayerPlan(m, plan, *cluster, cm).ok());
}

}  // namespace
}  // namespace kiwi::solve::remat
