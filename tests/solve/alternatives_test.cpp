// kiwi plan's search over everything (solve/hybrid/alternatives.h): never predicted slower than any of
// kiwi's hybrid methods run on their own at the same batch and budget, and never a plan the simulator
// says does not fit.
#include "kiwi/solve/hybrid/alternatives.h"
#include "kiwi/solve/hybrid/search.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <optional>
#include <set>

#include "kiwi/cost/cluster.h"
#include "kiwi/models/layer_model.h"
#include "kiwi/models/presets.h"

namespace kiwi::solve::hybrid {
namespace {

struct Case {
  const char* model;
  models::ModelOverrides overrides;
  const char* cluster;
  double budget_fraction;  // of the device's memory
};

// A model spec's layer model on a cluster preset, with the cost model it was priced by.
struct Built {
  cost::Cluster cluster;
  cost::CostModel cost_model;
  cost::LayerModel model;
};
std::optional<Built> Build(const char* name, const models::ModelOverrides& overrides, const char* cluster_name) {
  Result<models::ModelSpec> spec = models::LoadModel(name, overrides);
  Result<cost::Cluster> cluster = cost::ClusterPreset(cluster_name);
  if (!spec || !cluster) return std::nullopt;
  const cost::CostModel cm(cluster->device);
  Result<cost::LayerModel> model = models::BuildSpecLayerModel(*spec, cm);
  if (!model) return std::nullopt;
  return Built{*cluster, cm, *model};
}

TEST(PlanAll, NeverSlowerThanAnyMethodAndItsBestFits) {
  const std::vector<Case> cases = {
      {"gpt", {.layers = 4}, "v100-nvlink-8", 1.0},
      {"gpt", {.layers = 4}, "v100-nvlink-8", 0.1},
      {"llama", {.layers = 4, .hidden = 1024, .heads = 8, .seq = 512, .batch = 16}, "dgx-a100-80gb:2", 1.0},
      {"llama", {.layers = 4, .hidden = 1024, .heads = 8, .seq = 512, .batch = 16}, "dgx-a100-80gb:2", 0.05},
      {"bert", {.layers = 6, .hidden = 512, .heads = 8, .seq = 128, .batch = 32}, "rtx-titan-pcie-8", 0.3},
      {"t5", {.layers = 4, .batch = 16}, "v100-nvlink-8", 0.25},
      {"gpt", {.layers = 8, .hidden = 2048, .heads = 16, .seq = 1024, .batch = 32}, "dgx-a100-80gb:2", 0.075},
      {"mixtral-8x7b", {.layers = 2, .hidden = 512, .heads = 8, .seq = 256, .batch = 16}, "dgx-h100:1", 1.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} on {} at {}", c.model, c.cluster, c.budget_fraction));
    Result<models::ModelSpec> spec = models::LoadModel(c.model, c.overrides);
    ASSERT_TRUE(spec) << spec.error().message;
    Result<cost::Cluster> cluster = cost::ClusterPreset(c.cluster);
    ASSERT_TRUE(cluster) << cluster.error().message;
    const cost::CostModel cm(cluster->device);
    Result<cost::LayerModel> model = models::BuildSpecLayerModel(*spec, cm);
    ASSERT_TRUE(model) << model.error().message;
    const int64_t budget = static_cast<int64_t>(c.budget_fraction * static_cast<double>(cluster->device.memory_bytes));
    const int64_t batch = models::SpecBatch(*spec);
    Result<PlanAllResult> all =
        PlanAll(*model, *cluster, cm, {.memory_budget_bytes = budget, .global_batch = batch, .time_limit_seconds = 60});
    ASSERT_TRUE(all) << all.error().message;
    ASSERT_EQ(all->candidates.size(), 7u);
    ASSERT_GE(all->best, 0);
    const PlanCandidate& best = all->candidates[static_cast<size_t>(all->best)];
    // the simulator's verdict on the plan, again: it fits and the numbers are the same
    Result<sim::LayerSimResult> replay = sim::SimulateLayerPlan(*model, best.plan, *cluster, cm);
    ASSERT_TRUE(replay) << replay.error().message;
    EXPECT_LE(replay->summary.peak_memory_bytes, budget);
    EXPECT_EQ(replay->summary.peak_memory_bytes, best.simulated.summary.peak_memory_bytes);
    EXPECT_DOUBLE_EQ(replay->summary.iteration_seconds, best.simulated.summary.iteration_seconds);
    EXPECT_EQ(best.plan.global_batch, batch);  // the batch is the user's
    for (const PlanCandidate& other : all->candidates) {
      if (!other.found) continue;
      EXPECT_LE(other.simulated.summary.peak_memory_bytes, budget) << other.name;
      EXPECT_LE(other.simulated.throughput_samples_per_second, best.simulated.throughput_samples_per_second) << other.name;
    }
    // kiwi's search ran last, for plans faster than the alternatives' best: it found one, or none is.
    const PlanCandidate& kiwi = all->candidates[0];
    EXPECT_NE(kiwi.found, kiwi.none_faster);
    for (size_t i = 1; i < all->candidates.size() && kiwi.found; ++i) {
      if (!all->candidates[i].found) continue;
      EXPECT_GT(kiwi.simulated.throughput_samples_per_second, all->candidates[i].simulated.throughput_samples_per_second)
          << all->candidates[i].name;
    }
    for (Method method : AllMethods()) {
      HybridSearchOptions o;
      o.method = method;
      o.memory_budget_bytes = budget;
      o.global_batch = batch;
      Result<HybridSearchResult> r = SearchHybridPlan(*model, *cluster, cm, o);
      ASSERT_TRUE(r) << MethodName(method) << ": " << r.error().message;
      if (!r->feasible) continue;
      EXPECT_LE(r->simulated.throughput_samples_per_second, best.simulated.throughput_samples_per_second * (1 + 1e-12))
          << MethodName(method);
    }
  }
}

// Planned for FSDP2 (--runtime fsdp2), every planner's plan is one kiwi.torch.parallelize runs: no
// offloading, context or expert parallelism, one TP degree for all layers of a pipeline (without stages
// TP degrees may change between layers of these untied models); kiwi's is the fastest of its searches
// with the TP degree fixed and of its search without stages (brute force over those, same restrictions)
// and no faster than its unrestricted search.
TEST(PlanAll, Fsdp2PlansAreWhatParallelizeRuns) {
  const std::vector<Case> cases = {
      {"llama", {.layers = 4, .hidden = 1024, .heads = 8, .seq = 512, .batch = 16, .zero_runtime = cost::ZeroRuntime::kFsdp2},
       "dgx-a100-80gb:2", 0.05},
      {"gpt", {.layers = 8, .hidden = 2048, .heads = 16, .seq = 1024, .batch = 32, .zero_runtime = cost::ZeroRuntime::kFsdp2},
       "dgx-a100-80gb:2", 0.075},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} on {} at {}", c.model, c.cluster, c.budget_fraction));
    const std::optional<Built> b = Build(c.model, c.overrides, c.cluster);
    ASSERT_TRUE(b);
    ASSERT_EQ(b->model.zero_runtime, cost::ZeroRuntime::kFsdp2);
    const int64_t budget = static_cast<int64_t>(c.budget_fraction * static_cast<double>(b->cluster.device.memory_bytes));
    const int64_t batch = *c.overrides.batch;
    Result<PlanAllResult> all = PlanAll(b->model, b->cluster, b->cost_model,
                                        {.memory_budget_bytes = budget, .global_batch = batch, .time_limit_seconds = 60});
    ASSERT_TRUE(all) << all.error().message;
    for (const PlanCandidate& candidate : all->candidates) {
      if (!candidate.found) continue;
      for (const plan::LayerStrategy& s : candidate.plan.layers) {
        if (candidate.plan.pp_degree > 1) {
          EXPECT_EQ(s.tp, candidate.plan.layers.front().tp) << candidate.name;
        }
        EXPECT_FALSE(s.offload) << candidate.name;
        EXPECT_EQ(s.cp, 1) << candidate.name;
        EXPECT_EQ(s.ep, 1) << candidate.name;
      }
    }
    Result<PlanCandidate> kiwi = PlanWithKiwi({.model = b->model, .cluster = b->cluster, .cost_model = b->cost_model,
                                               .memory_budget_bytes = budget, .global_batch = batch});
    ASSERT_TRUE(kiwi) << kiwi.error().message;
    ASSERT_TRUE(kiwi->found);
    ASSERT_EQ(b->model.tied_embedding_bytes, 0);
    double fastest = 0.0;
    for (int tp = 1; tp <= b->cluster.NumDevices(); tp *= 2) {
      HybridSearchOptions o;
      o.memory_budget_bytes = budget;
      o.global_batch = batch;
      o.tp = tp;
      o.offload = o.context_parallel = o.expert_parallel = false;
      Result<HybridSearchResult> r = SearchHybridPlan(b->model, b->cluster, b->cost_model, o);
      ASSERT_TRUE(r) << r.error().message;
      if (r->feasible) fastest = std::max(fastest, r->simulated.throughput_samples_per_second);
    }
    // at least the fastest one-degree plan; faster only by TP degrees that change without stages
    EXPECT_GE(kiwi->simulated.throughput_samples_per_second, fastest * (1 - 1e-12));
    bool mixed = false;
    for (const plan::LayerStrategy& s : kiwi->plan.layers) mixed |= s.tp != kiwi->plan.layers.front().tp;
    if (mixed) {
      EXPECT_EQ(kiwi->plan.pp_degree, 1);
    } else {
      EXPECT_DOUBLE_EQ(kiwi->simulated.throughput_samples_per_second, fastest);
    }
    // The same model priced by kiwi's own runtime (which holds no more per plan, at the same time) is
    // searched over everything: never slower.
    cost::LayerModel own = b->model;
    own.zero_runtime = cost::ZeroRuntime::kOneLayer;
    HybridSearchOptions any;
    any.memory_budget_bytes = budget;
    any.global_batch = batch;
    Result<HybridSearchResult> unrestricted = SearchHybridPlan(own, b->cluster, b->cost_model, any);
    ASSERT_TRUE(unrestricted && unrestricted->feasible);
    EXPECT_LE(kiwi->simulated.throughput_samples_per_second,
              unrestricted->simulated.throughput_samples_per_second * (1 + 1e-12));
  }
}

// Unseeded, kiwi's search runs on its own and answers what `kiwi hybrid` answers at the batch; seeded,
// where the alternatives tie it (llama2-7b at batch 64, one node: Megatron-LM's plan), it finds none
// faster, proven (not timed out), and the best is the alternative's at the same throughput.
TEST(PlanAll, SeededSearchSaysNoneFasterWhereItTies) {
  const std::optional<Built> b = Build("llama2-7b", {.batch = 64}, "dgx-a100-80gb:1");
  ASSERT_TRUE(b);
  const int64_t budget = b->cluster.device.memory_bytes;
  Result<PlanAllResult> alone = PlanAll(b->model, b->cluster, b->cost_model,
                                        {.memory_budget_bytes = budget, .global_batch = 64, .seed_with_alternatives = false});
  ASSERT_TRUE(alone) << alone.error().message;
  const PlanCandidate& kiwi_alone = alone->candidates[0];
  ASSERT_TRUE(kiwi_alone.found);
  EXPECT_FALSE(kiwi_alone.none_faster);
  HybridSearchOptions o;
  o.memory_budget_bytes = budget;
  o.global_batch = 64;
  Result<HybridSearchResult> hybrid = SearchHybridPlan(b->model, b->cluster, b->cost_model, o);
  ASSERT_TRUE(hybrid) << hybrid.error().message;
  EXPECT_DOUBLE_EQ(kiwi_alone.simulated.throughput_samples_per_second, hybrid->simulated.throughput_samples_per_second);
  Result<PlanAllResult> seeded =
      PlanAll(b->model, b->cluster, b->cost_model, {.memory_budget_bytes = budget, .global_batch = 64});
  ASSERT_TRUE(seeded) << seeded.error().message;
  const PlanCandidate& kiwi = seeded->candidates[0];
  ASSERT_GE(seeded->best, 1);  // an alternative's plan
  const double best = seeded->candidates[static_cast<size_t>(seeded->best)].simulated.throughput_samples_per_second;
  EXPECT_NEAR(best, kiwi_alone.simulated.throughput_samples_per_second, 1e-9 * best);  // a tie
  EXPECT_FALSE(kiwi.found);
  EXPECT_TRUE(kiwi.none_faster);
  EXPECT_FALSE(kiwi.timed_out);
  EXPECT_EQ(kiwi.smallest_peak_bytes, 0);
}

// A configuration to compare to is one more candidate, last, simulated as given; kiwi's search only
// looks for plans faster than it, so the best is never slower; a plan at another batch, or one the
// simulator refuses, is bad input naming it.
TEST(PlanAll, ComparesToTheUsersConfiguration) {
  const std::optional<Built> b = Build("gpt", {.layers = 4}, "v100-nvlink-8");
  ASSERT_TRUE(b);
  const int64_t budget = b->cluster.device.memory_bytes;
  plan::LayerPlan mine;
  mine.layers.assign(4, plan::LayerStrategy{.tp = 8, .dp = 1});  // TP over every device: slow, small
  mine.global_batch = 8;
  mine.micro_batches = 8;
  Result<PlanAllResult> r = PlanAll(b->model, b->cluster, b->cost_model,
                                    {.memory_budget_bytes = budget, .global_batch = 8, .compare_to = &mine,
                                     .compare_name = "yours"});
  ASSERT_TRUE(r) << r.error().message;
  const PlanCandidate& yours = r->candidates.back();
  EXPECT_EQ(r->candidates.size(), LayerPlanners().size() + 1);
  EXPECT_EQ(yours.name, "yours");
  ASSERT_TRUE(yours.found);
  Result<sim::LayerSimResult> direct = sim::SimulateLayerPlan(b->model, mine, b->cluster, b->cost_model);
  ASSERT_TRUE(direct);
  EXPECT_DOUBLE_EQ(yours.simulated.throughput_samples_per_second, direct->throughput_samples_per_second);
  ASSERT_GE(r->best, 0);
  EXPECT_NE(r->best, static_cast<int>(r->candidates.size()) - 1);
  EXPECT_GT(r->candidates[static_cast<size_t>(r->best)].simulated.throughput_samples_per_second,
            yours.simulated.throughput_samples_per_second);
  // Within less memory than it needs: listed, not found, with its peak.
  Result<PlanAllResult> tight = PlanAll(b->model, b->cluster, b->cost_model,
                                        {.memory_budget_bytes = direct->summary.peak_memory_bytes - 1, .global_batch = 8,
                                         .compare_to = &mine});
  ASSERT_TRUE(tight) << tight.error().message;
  EXPECT_FALSE(tight->candidates.back().found);
  EXPECT_EQ(tight->candidates.back().smallest_peak_bytes, direct->summary.peak_memory_bytes);
  plan::LayerPlan other_batch = mine;
  other_batch.global_batch = 16;
  plan::LayerPlan three_layers = mine;
  three_layers.layers.pop_back();
  for (const plan::LayerPlan* bad : {&other_batch, &three_layers}) {
    Result<PlanAllResult> refused = PlanAll(b->model, b->cluster, b->cost_model,
                                            {.memory_budget_bytes = budget, .global_batch = 8, .compare_to = bad,
                                             .compare_name = "yours (mine.sh)"});
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::kBadInput);
    EXPECT_EQ(refused.error().message.rfind("yours (mine.sh): ", 0), 0u) << refused.error().message;
  }
}

// A batch that no data-parallel degree divides is bad input naming it; a budget nothing fits leaves
// best at -1 with the smallest peaks known.
TEST(PlanAll, BadBatchAndImpossibleBudget) {
  const std::optional<Built> b = Build("gpt", {.layers = 2}, "dgx-a100-80gb:35");
  ASSERT_TRUE(b);
  Result<PlanAllResult> bad =
      PlanAll(b->model, b->cluster, b->cost_model, {.memory_budget_bytes = int64_t{1} << 36, .global_batch = 8});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kBadInput);
  EXPECT_NE(bad.error().message.find("--batch 8"), std::string::npos) << bad.error().message;
  Result<cost::Cluster> v100 = cost::ClusterPreset("v100-nvlink-8");
  ASSERT_TRUE(v100);
  Result<PlanAllResult> none = PlanAll(b->model, *v100, cost::CostModel(v100->device),
                                       {.memory_budget_bytes = 1 << 20, .global_batch = 8});
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_EQ(none->best, -1);
  int64_t smallest = 0;
  for (const PlanCandidate& c : none->candidates) {
    EXPECT_FALSE(c.found) << c.name;
    if (c.smallest_peak_bytes > 0 && (smallest == 0 || c.smallest_peak_bytes < smallest)) smallest = c.smallest_peak_bytes;
  }
  EXPECT_GT(smallest, 1 << 20);
}


// The registry names each planner once, kiwi's own first; the driver refuses a planner whose plan the
// simulator does not confirm (a claim off by a byte or a second, or a plan over the budget).
Result<PlanCandidate> Honest(const PlanRequest& r) {
  PlanCandidate c;
  c.found = true;
  c.plan.layers.assign(r.model.layers.size(), plan::LayerStrategy{.dp = r.cluster.NumDevices()});
  c.plan.global_batch = r.global_batch;
  Result<sim::LayerSimResult> s = sim::SimulateLayerPlan(r.model, c.plan, r.cluster, r.cost_model);
  if (!s) return s.error();
  c.simulated = *s;
  return c;
}
Result<PlanCandidate> ClaimsAByteLess(const PlanRequest& r) {
  Result<PlanCandidate> c = Honest(r);
  if (c) c->simulated.summary.peak_memory_bytes -= 1;
  return c;
}
Result<PlanCandidate> ClaimsFaster(const PlanRequest& r) {
  Result<PlanCandidate> c = Honest(r);
  if (c) c->simulated.summary.iteration_seconds *= 0.5;
  return c;
}

TEST(LayerPlanners, RegistryAndTheVerifyingDriver) {
  std::set<std::string> names;
  for (const LayerPlanner& p : LayerPlanners()) EXPECT_TRUE(names.insert(p.name).second) << p.name;
  EXPECT_EQ(names.size(), 7u);
  EXPECT_EQ(std::string(LayerPlanners().front().name), "kiwi (per-layer)");
  const std::optional<Built> b = Build("gpt", {.layers = 2, .hidden = 64, .heads = 4, .seq = 16}, "v100-nvlink-8");
  ASSERT_TRUE(b);
  PlanRequest request{.model = b->model, .cluster = b->cluster, .cost_model = b->cost_model,
                      .memory_budget_bytes = b->cluster.device.memory_bytes, .global_batch = 8};
  Result<PlanCandidate> honest = RunVerified({"honest", "DP", Honest}, request);
  ASSERT_TRUE(honest) << honest.error().message;
  EXPECT_EQ(honest->name, "honest");
  for (auto* liar : {ClaimsAByteLess, ClaimsFaster}) {
    Result<PlanCandidate> r = RunVerified({"liar", "DP", liar}, request);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kInternal) << r.error().message;
  }
  request.memory_budget_bytes = honest->simulated.summary.peak_memory_bytes - 1;  // its plan no longer fits
  Result<PlanCandidate> over = RunVerified({"honest", "DP", Honest}, request);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::kInternal);
}

}  // namespace
}  // namespace kiwi::solve::hybrid
