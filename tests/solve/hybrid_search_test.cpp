// The whole Galvatron-BMW search: exhaustive partitions equal brute force over every (PP degree,
// partition, micro-batches, per-layer strategy) on small models; every method's plan re-simulates to
// its claims; BMW is never predicted slower than a baseline; infeasible requests report the smallest
// budget that works.
#include "kiwi/solve/hybrid/search.h"

#include <gtest/gtest.h>

#include <limits>
#include <optional>

#include "hybrid_test_util.h"
#include "kiwi/models/presets.h"
#include "kiwi/solve/hybrid/partition.h"
#include "kiwi/solve/hybrid/uniform_plans.h"
#include "kiwi/solve/remat/recompute_frontier.h"

namespace kiwi::solve::hybrid {
namespace {

using testing::AllOutcomes;
using testing::Outcome;
using testing::TestCluster;
using testing::TestCostModel;
using testing::InterestingBudgets;
using testing::TwoTypeModel;

constexpr int64_t kMiB = int64_t{1} << 20;

HybridSearchResult Search(const cost::LayerModel& model, const cost::Cluster& cluster, HybridSearchOptions o) {
  Result<HybridSearchResult> r = SearchHybridPlan(model, cluster, TestCostModel(cluster), o);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : HybridSearchResult{};
}

// Every (pp, partition, m, assignment) of a batch in the search's space (TP within a node), simulated.
std::vector<Outcome> EverythingAtBatch(const cost::LayerModel& model, const cost::Cluster& cluster, int64_t batch,
                                       bool offload = false, std::vector<std::vector<std::string>> recompute_sets = {}) {
  std::vector<Outcome> all;
  StrategySpaceOptions space = SpaceOf(Method::kKiwi, cluster.NumDevices(), static_cast<int>(model.layers.size())).strategies;
  if (cluster.num_nodes > 1) space.max_tp = cluster.devices_per_node;
  space.allow_selective_recompute &= model.HasAttentionCore();  // as the search does
  space.experts = model.MaxExperts();
  space.context_sequence = model.ContextParallelSequence();
  space.allow_offload = offload && cluster.device.HasHost() && !model.optimizer.empty();  // as the search does
  space.recompute_sets = std::move(recompute_sets);
  const int layers = static_cast<int>(model.layers.size());
  for (int pp : PowerOfTwoDivisors(cluster.NumDevices())) {
    if (pp > layers) continue;
    for (int m = 1; m <= batch; m *= 2) {
      if (batch % m != 0) continue;
      for (const Partition& partition : AllPartitions(layers, pp)) {
        plan::LayerPlan shape;
        shape.pp_degree = pp;
        shape.pp_partition = partition;
        shape.global_batch = batch;
        shape.micro_batches = m;
        std::vector<Outcome> some = AllOutcomes(model, cluster, shape, space);
        all.insert(all.end(), some.begin(), some.end());
      }
    }
  }
  return all;
}

double BestThroughput(const std::vector<Outcome>& outcomes, int64_t budget) {
  double best = 0.0;
  for (const Outcome& o : outcomes)
    if (o.peak <= budget) best = std::max(best, static_cast<double>(o.plan.global_batch) / o.seconds);
  return best;
}

void ExpectSimulatorAgrees(const HybridSearchResult& r) {
  ASSERT_TRUE(r.feasible);
  EXPECT_EQ(r.simulated.summary.peak_memory_bytes, r.claimed_peak_memory_bytes);
  EXPECT_NEAR(r.simulated.summary.iteration_seconds, r.claimed_iteration_seconds, 1e-9 * r.claimed_iteration_seconds);
}

// The exhaustive-partition search within `budget` (the batch fixed, or swept up to max_batch): its
// plan replays to its claims and is as fast as the best of `all`.
HybridSearchResult ExpectBruteForceBest(const cost::LayerModel& model, const cost::Cluster& cluster,
                                        const std::vector<Outcome>& all, int64_t budget,
                                        std::optional<int64_t> batch, int64_t max_batch = 512, bool offload = false) {
  HybridSearchOptions o;
  o.offload = offload;
  o.memory_budget_bytes = budget;
  o.global_batch = batch;
  o.max_batch = max_batch;
  o.partitions = PartitionMode::kExhaustive;
  const HybridSearchResult r = Search(model, cluster, o);
  ExpectSimulatorAgrees(r);
  EXPECT_NEAR(r.simulated.throughput_samples_per_second, BestThroughput(all, budget), 1e-9 * BestThroughput(all, budget))
      << "budget " << budget;
  return r;
}

TEST(SearchHybridPlan, ExhaustivePartitionsEqualBruteForce) {
  const cost::Cluster cluster = TestCluster(2, 2);
  const cost::LayerModel model = TwoTypeModel(2, 1);
  std::vector<Outcome> all = EverythingAtBatch(model, cluster, 8);
  int64_t smallest = INT64_MAX, largest = 0;
  for (const Outcome& o : all) smallest = std::min(smallest, o.peak), largest = std::max(largest, o.peak);
  for (int64_t budget : {smallest, smallest + (largest - smallest) / 8, smallest + (largest - smallest) / 3, largest}) {
    const HybridSearchResult r = ExpectBruteForceBest(model, cluster, all, budget, 8);
    EXPECT_TRUE(r.proven);
    for (const plan::LayerStrategy& l : r.plan.layers) EXPECT_LE(l.tp, cluster.devices_per_node);  // TP within a node
  }
}

// Selective recomputation (the encoder type's attention core) is one more choice per layer, between
// keeping everything and checkpointing the layer: the search finds the brute-force best with it at
// budgets from the smallest to an eighth of the way to the fastest plan's, and between them (where
// "TP2+CKPT" and "TP2" part) the best plan uses it.
TEST(SearchHybridPlan, SelectiveRecomputationEqualsBruteForce) {
  const cost::Cluster cluster = TestCluster(1, 2);
  cost::LayerModel model = TwoTypeModel(2, 1);
  for (cost::LayerProfile& p : model.layers) {
    if (p.name != "enc") continue;
    p.activation_bytes_per_sample = 300'000'000;  // long sequences: activations outweigh the model states
    p.replicated_activation_bytes_per_sample = 60'000'000;
    p.attention_core_bytes_per_sample = 200'000'000;  // most of them, at a tenth of the forward's time
    p.attention_core_seconds_per_sample = 2e-4;
  }
  ASSERT_TRUE(model.HasAttentionCore());
  std::vector<Outcome> all = EverythingAtBatch(model, cluster, 8);
  bool selective_wins = false;
  const std::vector<int64_t> ends = InterestingBudgets(all);
  for (int i = 0; i <= 8; ++i) {
    const int64_t budget = ends.front() + (ends.back() - ends.front()) * i / 64;
    const HybridSearchResult r = ExpectBruteForceBest(model, cluster, all, budget, 8);
    for (const plan::LayerStrategy& l : r.plan.layers) selective_wins |= l.SelectiveRecompute();
  }
  EXPECT_TRUE(selective_wins);
}

// Interleaved 1F1B is one more choice of kiwi's search: on a model whose layers repeat, 2 stages of 2
// chunks, one round's strategies and partition in both chunks. The search finds the brute-force best
// over those and every plan without interleaving, at budgets from the smallest to the fastest plan's;
// at some of them the best plan interleaves. (The embeddings and the head keep no activations here, so
// that every chunk keeps the same and the DP's memory is the schedule's; otherwise it is a bound.)
TEST(SearchHybridPlan, InterleavedOneFOneBEqualsBruteForce) {
  const cost::Cluster cluster = TestCluster(2, 1);
  cost::LayerModel model = TwoTypeModel(4, 0);
  for (cost::LayerProfile& p : model.layers) p.boundary_bytes_per_sample = 100'000;  // sends cheaper than the bubble
  model.embedding.activation_bytes_per_sample = model.head.activation_bytes_per_sample = 0;
  std::vector<Outcome> all = EverythingAtBatch(model, cluster, 8);
  for (int m : {2, 4, 8}) {
    plan::LayerPlan shape;
    shape.pp_degree = 2;
    shape.virtual_stages = 2;
    shape.pp_partition = {1, 1, 1, 1};
    shape.global_batch = 8;
    shape.micro_batches = m;
    StrategySpaceOptions space = SpaceOf(Method::kKiwi, cluster.NumDevices(), 4).strategies;
    space.allow_selective_recompute = false;  // the test model has no attention core
    for (const Outcome& o : AllOutcomes(model, cluster, shape, space))
      if (o.plan.layers[2] == o.plan.layers[0] && o.plan.layers[3] == o.plan.layers[1]) all.push_back(o);
  }
  bool interleaving_wins = false;
  const std::vector<int64_t> ends = InterestingBudgets(all);
  for (int i = 0; i <= 8; ++i) {
    const int64_t budget = ends.front() + (ends.back() - ends.front()) * i / 8;
    const HybridSearchResult r = ExpectBruteForceBest(model, cluster, all, budget, 8);
    interleaving_wins |= r.plan.virtual_stages > 1;
  }
  EXPECT_TRUE(interleaving_wins);
}

// Expert parallelism is one more choice per mixture-of-experts layer: on 4 devices of one node, the
// encoder type made of 4 experts (most of its weights) routes 2 copies of each token; the search finds
// the brute-force best over every plan with and without EP at budgets from the smallest to the
// fastest plan's, and at some of them the best plan splits the experts.
TEST(SearchHybridPlan, ExpertParallelismEqualsBruteForce) {
  const cost::Cluster cluster = TestCluster(1, 4);
  cost::LayerModel model = TwoTypeModel(2, 1);
  for (cost::LayerProfile& p : model.layers) {
    if (p.name != "enc") continue;
    p.parameter_bytes = 400'000'000;
    p.experts = 4;
    p.expert_parameter_bytes = 360'000'000;
    p.routed_bytes_per_sample = 2 * p.boundary_bytes_per_sample;
  }
  ASSERT_EQ(model.MaxExperts(), 4);
  std::vector<Outcome> all = EverythingAtBatch(model, cluster, 8);
  bool expert_parallel_wins = false;
  const std::vector<int64_t> ends = InterestingBudgets(all);
  for (int i = 0; i <= 8; ++i) {
    const int64_t budget = ends.front() + (ends.back() - ends.front()) * i / 8;
    const HybridSearchResult r = ExpectBruteForceBest(model, cluster, all, budget, 8);
    for (size_t k = 0; k < r.plan.layers.size(); ++k) {
      expert_parallel_wins |= r.plan.layers[k].ep > 1;
      if (model.layers[k].experts == 0) {
        EXPECT_EQ(r.plan.layers[k].ep, 1);  // EP splits only experts
      }
    }
  }
  EXPECT_TRUE(expert_parallel_wins);
}

// Context parallelism is one more choice per layer whose attention a ring splits: on 4 devices of one
// node, 8 samples in up to 8 micro-batches, CP lets a micro-batch of fewer samples than DP ranks split
// each sample's sequence. The search (which keeps each table's least useful CP degree only: a larger
// one, or CP where every rank can take whole samples, does the same work with more ring) finds the
// brute-force best over every plan with every CP degree, and at some budget the best plan uses CP.
TEST(SearchHybridPlan, ContextParallelismEqualsBruteForce) {
  const cost::Cluster cluster = TestCluster(1, 4);
  cost::LayerModel model = TwoTypeModel(2, 1);
  for (cost::LayerProfile& p : model.layers) {  // long sequences: activations outweigh the weights
    p.parameter_bytes /= 10;
    p.replicated_parameter_bytes /= 10;
    p.attention_sequence = 64;
    p.attention_kv_bytes_per_sample = p.boundary_bytes_per_sample / 2;
    p.attention_forward_seconds_per_sample = p.forward_seconds_per_sample / 4;
    p.attention_backward_seconds_per_sample = p.backward_seconds_per_sample / 4;
  }
  ASSERT_EQ(model.ContextParallelSequence(), 64);
  std::vector<Outcome> all = EverythingAtBatch(model, cluster, 8);
  bool context_parallel_wins = false;
  const std::vector<int64_t> ends = InterestingBudgets(all);
  for (int i = 0; i <= 8; ++i) {
    const int64_t budget = ends.front() + (ends.back() - ends.front()) * i / 8;
    const HybridSearchResult r = ExpectBruteForceBest(model, cluster, all, budget, 8);
    for (const plan::LayerStrategy& l : r.plan.layers) context_parallel_wins |= l.cp > 1;
  }
  EXPECT_TRUE(context_parallel_wins);
}

// Offloading (asked for) is one more choice per layer on a cluster whose devices reach a host: the search equals
// brute force over every plan with and without it, and at the smallest budgets the best plan offloads.
TEST(SearchHybridPlan, OffloadEqualsBruteForce) {
  cost::Cluster cluster = TestCluster(1, 2);
  cluster.device.host_link_bandwidth = 1e10;
  cluster.device.host_memory_bandwidth = 5e10;
  cost::LayerModel model = TwoTypeModel(2, 1);
  model.optimizer = "adam";
  model.state_bytes_per_parameter_byte = 7.0;  // mixed precision: most of the states are the optimizer's
  std::vector<Outcome> all = EverythingAtBatch(model, cluster, 4, /*offload=*/true);
  bool offload_wins = false;
  const std::vector<int64_t> ends = InterestingBudgets(all);
  for (int i = 0; i <= 6; ++i) {
    const int64_t budget = ends.front() + (ends.back() - ends.front()) * i / 6;
    const HybridSearchResult r = ExpectBruteForceBest(model, cluster, all, budget, 4, 512, /*offload=*/true);
    for (const plan::LayerStrategy& l : r.plan.layers) offload_wins |= l.offload;
  }
  EXPECT_TRUE(offload_wins);
}

// Recompute sets are more choices per layer: with every layer's menu offering two cheap ops to recompute
// (an activation function's output, most of the activations, and a norm's), the search equals brute
// force over every plan with each set of the frontier, and at some budget the best plan uses one.
TEST(SearchHybridPlan, RecomputeSetsEqualBruteForce) {
  const cost::Cluster cluster = TestCluster(1, 2);
  cost::LayerModel model = TwoTypeModel(2, 1);
  for (cost::LayerProfile& p : model.layers) {  // long sequences: activations outweigh the model states
    p.activation_bytes_per_sample = 300'000'000;
    p.replicated_activation_bytes_per_sample = 60'000'000;
  }
  const int64_t least = 300'000'000;
  auto menu = std::make_shared<cost::RecomputeMenu>();
  const double seconds = model.layers.front().forward_seconds_per_sample;
  menu->ops = {{.name = "input0", .bytes_per_sample = least / 8, .saved = true, .replicated = true},
               {.name = "act", .inputs = {0}, .bytes_per_sample = least / 2, .saved = true, .recomputable = true,
                .seconds_per_sample = seconds / 20, .kernels = 1},
               {.name = "norm", .inputs = {0}, .bytes_per_sample = least / 4, .saved = true, .replicated = true,
                .recomputable = true, .seconds_per_sample = seconds / 8, .kernels = 1}};
  for (cost::LayerProfile& p : model.layers) p.recompute_menu.menu = menu;
  const std::vector<remat::FrontierSet> frontier = remat::RecomputeFrontier(*menu);
  ASSERT_EQ(frontier.size(), 2u);  // {act}, then {act, norm}
  std::vector<std::vector<std::string>> sets;
  for (const remat::FrontierSet& f : frontier) sets.push_back(f.ops);
  std::vector<Outcome> all = EverythingAtBatch(model, cluster, 8, false, sets);
  bool set_wins = false;
  const std::vector<int64_t> ends = InterestingBudgets(all);
  for (int i = 0; i <= 8; ++i) {
    const int64_t budget = ends.front() + (ends.back() - ends.front()) * i / 64;
    const HybridSearchResult r = ExpectBruteForceBest(model, cluster, all, budget, 8);
    for (const plan::LayerStrategy& l : r.plan.layers) set_wins |= l.RecomputesSet();
  }
  EXPECT_TRUE(set_wins);
}

// Recompute sets beside expert parallelism: a set that recomputes the MoE layer's dispatch runs its
// all-to-all again under EP. On 4 devices, the search equals brute force over every plan with every EP
// degree and the two sets the search offers.
TEST(SearchHybridPlan, RecomputeSetsBesideExpertParallelismEqualBruteForce) {
  const cost::Cluster cluster = TestCluster(1, 4);
  cost::LayerModel model = TwoTypeModel(1, 1);
  const double seconds = model.layers.front().forward_seconds_per_sample;
  auto menu = std::make_shared<cost::RecomputeMenu>();
  menu->ops = {{.name = "input0", .bytes_per_sample = 20'000'000, .saved = true, .replicated = true},
               {.name = "dispatch", .inputs = {0}, .bytes_per_sample = 80'000'000, .saved = true, .recomputable = true,
                .routed = true, .seconds_per_sample = seconds / 50, .kernels = 1},
               {.name = "act", .inputs = {1}, .bytes_per_sample = 150'000'000, .saved = true, .recomputable = true,
                .seconds_per_sample = seconds / 20, .kernels = 1}};
  for (cost::LayerProfile& p : model.layers) {
    p.activation_bytes_per_sample = 300'000'000;
    p.replicated_activation_bytes_per_sample = 60'000'000;
    p.recompute_menu.menu = menu;
    if (p.name != "enc") continue;
    p.parameter_bytes = 400'000'000;
    p.experts = 4;
    p.expert_parameter_bytes = 360'000'000;
    p.routed_bytes_per_sample = 2 * p.boundary_bytes_per_sample;
  }
  // The sets the search offers (2 of the menu's frontier), and one of them recomputes the dispatch.
  const std::vector<std::vector<std::string>> sets = remat::CommonRecomputeSets(model.layers, 2);
  ASSERT_EQ(sets.size(), 2u);
  ASSERT_TRUE(std::any_of(sets.begin(), sets.end(), [](const std::vector<std::string>& set) {
    return std::find(set.begin(), set.end(), "dispatch") != set.end();
  }));
  std::vector<Outcome> all = EverythingAtBatch(model, cluster, 8, false, sets);
  bool both = false;
  const std::vector<int64_t> ends = InterestingBudgets(all);
  for (int i = 0; i <= 6; ++i) {
    const int64_t budget = ends.front() + (ends.back() - ends.front()) * i / 6;
    HybridSearchOptions o;
    o.offload = false;
    o.memory_budget_bytes = budget;
    o.global_batch = 8;
    o.partitions = PartitionMode::kExhaustive;
    o.recompute_sets = 2;
    const HybridSearchResult r = Search(model, cluster, o);
    ExpectSimulatorAgrees(r);
    EXPECT_NEAR(r.simulated.throughput_samples_per_second, BestThroughput(all, budget), 1e-9 * BestThroughput(all, budget))
        << "budget " << budget;
    for (const plan::LayerStrategy& l : r.plan.layers) both |= l.ep > 1 && l.RecomputesSet();
  }
  EXPECT_TRUE(both);
}

TEST(SearchHybridPlan, BatchSweepEqualsBruteForce) {
  const cost::Cluster cluster = TestCluster(2, 2);
  const cost::LayerModel model = TwoTypeModel(1, 1);
  std::vector<Outcome> all;
  for (int64_t batch : {1, 2, 4, 8}) {
    std::vector<Outcome> some = EverythingAtBatch(model, cluster, batch);
    all.insert(all.end(), some.begin(), some.end());
  }
  for (int64_t budget : {300 * kMiB, 600 * kMiB, 2000 * kMiB}) ExpectBruteForceBest(model, cluster, all, budget, std::nullopt, 8);
}

TEST(SearchHybridPlan, KiwiIsNeverSlowerThanAnotherMethod) {  // its space contains theirs
  const cost::Cluster cluster = TestCluster(2, 4);
  const cost::LayerModel model = TwoTypeModel(6, 6);
  for (int64_t budget : {600 * kMiB, 1200 * kMiB, 3000 * kMiB, 12000 * kMiB}) {
    HybridSearchOptions o;
    o.memory_budget_bytes = budget;
    o.max_batch = 128;
    const HybridSearchResult bmw = Search(model, cluster, o);
    ASSERT_TRUE(bmw.feasible) << budget;
    ExpectSimulatorAgrees(bmw);
    for (Method m : AllMethods()) {
      o.method = m;
      const HybridSearchResult r = Search(model, cluster, o);
      if (!r.feasible) continue;
      ExpectSimulatorAgrees(r);
      EXPECT_GE(bmw.simulated.throughput_samples_per_second, r.simulated.throughput_samples_per_second * (1 - 1e-9))
          << MethodName(m) << " at " << budget;
    }
  }
}

TEST(SearchHybridPlan, MoreMemoryIsNeverSlower) {
  const cost::Cluster cluster = TestCluster(2, 2);
  const cost::LayerModel model = TwoTypeModel(3, 3);
  double previous = 0.0;
  for (int64_t budget = 200 * kMiB; budget <= 3000 * kMiB; budget += 200 * kMiB) {
    HybridSearchOptions o;
    o.method = Method::kBase;  // even partitions: the space grows with the budget
    o.memory_budget_bytes = budget;
    o.max_batch = 32;
    const HybridSearchResult r = Search(model, cluster, o);
    if (!r.feasible) {
      EXPECT_EQ(previous, 0.0);
      continue;
    }
    EXPECT_TRUE(r.proven);
    EXPECT_GE(r.simulated.throughput_samples_per_second, previous * (1 - 1e-12)) << budget;
    previous = r.simulated.throughput_samples_per_second;
  }
  EXPECT_GT(previous, 0.0);
}

TEST(SearchHybridPlan, InfeasibleReportsTheSmallestBudgetThatWorks) {
  const cost::Cluster cluster = TestCluster(2, 2);
  const cost::LayerModel model = TwoTypeModel(3, 3);
  for (Method m : {Method::kBmw, Method::kBase, Method::kDp, Method::k3d}) {
    HybridSearchOptions o;
    o.method = m;
    o.memory_budget_bytes = 1000;
    const HybridSearchResult none = Search(model, cluster, o);
    ASSERT_FALSE(none.feasible);
    ASSERT_GT(none.smallest_feasible_memory, 0);
    EXPECT_EQ(none.smallest_batch, m == Method::kDp ? 4 : 1) << MethodName(m);
    o.memory_budget_bytes = none.smallest_feasible_memory;
    o.global_batch = none.smallest_batch;
    const HybridSearchResult just = Search(model, cluster, o);
    ASSERT_TRUE(just.feasible) << MethodName(m);
    EXPECT_EQ(just.simulated.summary.peak_memory_bytes, none.smallest_feasible_memory) << MethodName(m);
    o.memory_budget_bytes = none.smallest_feasible_memory - 1;
    EXPECT_FALSE(Search(model, cluster, o).feasible) << MethodName(m);
  }
}

TEST(SearchHybridPlan, MethodsStayInTheirSpaces) {
  const cost::Cluster cluster = TestCluster(2, 4);
  const cost::LayerModel model = TwoTypeModel(4, 4);
  HybridSearchOptions o;
  o.memory_budget_bytes = 8000 * kMiB;
  o.max_batch = 64;
  auto run = [&](Method m) {
    o.method = m;
    HybridSearchResult r = Search(model, cluster, o);
    EXPECT_TRUE(r.feasible) << MethodName(m);
    EXPECT_EQ(r.plan.layers.size(), 8u);
    return r;
  };
  const HybridSearchResult dp = run(Method::kDp), tp = run(Method::kTp), pp = run(Method::kPp), d3 = run(Method::k3d);
  const HybridSearchResult gal = run(Method::kGalvatron), dptp = run(Method::kDpTp);
  for (const plan::LayerStrategy& s : dp.plan.layers) EXPECT_EQ(s, (plan::LayerStrategy{1, 8, plan::Zero::kNone, false}));
  for (const plan::LayerStrategy& s : tp.plan.layers) EXPECT_EQ(s.tp, 8);
  EXPECT_EQ(dp.plan.micro_batches, 1);
  EXPECT_EQ(pp.plan.pp_degree, 8);
  EXPECT_EQ(pp.plan.pipeline, plan::PipelineSchedule::kGPipe);
  EXPECT_EQ(d3.plan.pp_degree, 2);
  for (const plan::LayerStrategy& s : d3.plan.layers) EXPECT_EQ(s, (plan::LayerStrategy{2, 2, plan::Zero::kNone, false}));
  for (const plan::LayerStrategy& s : gal.plan.layers) EXPECT_FALSE(s.checkpoint);
  EXPECT_EQ(dptp.plan.pp_degree, 1);
  for (const plan::LayerStrategy& s : dptp.plan.layers) EXPECT_FALSE(s.ZeroStage() != plan::Zero::kNone || s.checkpoint);
  EXPECT_EQ(gal.plan.pp_partition, EvenPartition(8, gal.plan.pp_degree));
}

TEST(SearchHybridPlan, FixedBatchAndTimeLimit) {
  const cost::Cluster cluster = TestCluster(2, 4);
  const cost::LayerModel model = TwoTypeModel(4, 4);
  HybridSearchOptions o;
  o.memory_budget_bytes = 4000 * kMiB;
  o.global_batch = 24;
  const HybridSearchResult r = Search(model, cluster, o);
  ExpectSimulatorAgrees(r);
  EXPECT_EQ(r.plan.global_batch, 24);
  o.time_limit_seconds = 1e-12;
  const HybridSearchResult late = Search(model, cluster, o);
  EXPECT_TRUE(late.timed_out);
  EXPECT_FALSE(late.proven);
}

TEST(SearchHybridPlan, SkipsPipelineDegreesWhoseStagesDoNotTileNodes) {
  // 3 nodes of 4: 2 stages of 6 devices or 4 stages of 3 would split nodes unevenly (was: the search
  // stopped with "--mesh ... would straddle a node boundary"); 1 stage, 3 stages of a node and 6 of half
  // a node are laid out, and here 3 stages are the fastest.
  const cost::Cluster cluster = TestCluster(3, 4);
  const cost::LayerModel model = TwoTypeModel(4, 4);
  HybridSearchOptions o;
  o.memory_budget_bytes = 16000 * kMiB;
  o.global_batch = 24;
  std::vector<std::string> lines;
  o.progress = [&](const std::string& line) { lines.push_back(line); };
  const HybridSearchResult r = Search(model, cluster, o);
  ASSERT_TRUE(r.feasible);
  ExpectSimulatorAgrees(r);
  EXPECT_EQ(r.plan.pp_degree, 3);
  int skipped = 0;
  for (const std::string& line : lines) {
    if (line.rfind("pp 2 skipped: stages of 6 devices do not tile nodes of 4", 0) == 0) ++skipped;
    if (line.rfind("pp 4 skipped: stages of 3 devices", 0) == 0) ++skipped;
  }
  EXPECT_EQ(skipped, 2);
}

TEST(SearchHybridPlan, PlansTheTensorsWithinWhatTheReserveLeaves) {
  cost::Cluster cluster = TestCluster(2, 4);
  const cost::LayerModel model = TwoTypeModel(4, 4);
  HybridSearchOptions o;
  o.memory_budget_bytes = 3000 * kMiB;
  o.global_batch = 16;
  const HybridSearchResult free = Search(model, cluster, o);
  ASSERT_TRUE(free.feasible);
  cluster.device.reserved_bytes = 1000 * kMiB;
  const HybridSearchResult reserved = Search(model, cluster, o);
  ASSERT_TRUE(reserved.feasible);
  ExpectSimulatorAgrees(reserved);  // the claim counts the reserve as the simulator does
  EXPECT_LE(reserved.simulated.summary.peak_memory_bytes, o.memory_budget_bytes);
  EXPECT_LE(reserved.simulated.throughput_samples_per_second, free.simulated.throughput_samples_per_second + 1e-9);
  // Exactly the old budget plus the reserve gives the old plan's speed back.
  o.memory_budget_bytes += 1000 * kMiB;
  EXPECT_NEAR(Search(model, cluster, o).simulated.throughput_samples_per_second,
              free.simulated.throughput_samples_per_second, 1e-9);
  // Too small for anything: the smallest budget named counts the reserve too.
  o.memory_budget_bytes = 1000 * kMiB + 1;
  const HybridSearchResult none = Search(model, cluster, o);
  ASSERT_FALSE(none.feasible);
  EXPECT_GT(none.smallest_feasible_memory, 1000 * kMiB);
  o.memory_budget_bytes = none.smallest_feasible_memory;
  EXPECT_TRUE(Search(model, cluster, o).feasible);
}

// A throughput to beat (another planner's) is a bound the search starts with: just below the
// brute-force best it finds that best, in fewer configurations; at or above it, no plan, said as such
// (not as a lack of memory), and proven so (nothing timed out).
TEST(SearchHybridPlan, ThroughputToBeatCutsWhatCannotBeatIt) {
  const cost::Cluster cluster = TestCluster(2, 2);
  const cost::LayerModel model = TwoTypeModel(2, 1);
  const std::vector<Outcome> all = EverythingAtBatch(model, cluster, 8);
  int64_t largest = 0;
  for (const Outcome& o : all) largest = std::max(largest, o.peak);
  const double best = BestThroughput(all, largest);
  HybridSearchOptions o;
  o.memory_budget_bytes = largest;
  o.global_batch = 8;
  o.partitions = PartitionMode::kExhaustive;
  const HybridSearchResult alone = Search(model, cluster, o);
  o.beat_throughput = best * (1 - 1e-6);
  const HybridSearchResult below = Search(model, cluster, o);
  ExpectSimulatorAgrees(below);
  EXPECT_NEAR(below.simulated.throughput_samples_per_second, best, 1e-9 * best);
  EXPECT_FALSE(below.none_faster);
  EXPECT_LE(below.evaluated, alone.evaluated);
  EXPECT_LE(below.partitions, alone.partitions);
  for (double factor : {1.0, 1.5}) {
    o.beat_throughput = best * factor;
    const HybridSearchResult none = Search(model, cluster, o);
    EXPECT_FALSE(none.feasible) << factor;
    EXPECT_TRUE(none.none_faster) << factor;
    EXPECT_FALSE(none.timed_out) << factor;
  }
  o.beat_throughput = best * 1e6;  // beyond every configuration's bound: none is searched
  EXPECT_EQ(Search(model, cluster, o).evaluated, 0);
}

TEST(SearchHybridPlan, RejectsBadOptions) {
  const cost::Cluster cluster = TestCluster(1, 4);
  HybridSearchOptions o;
  o.memory_budget_bytes = -1;
  EXPECT_FALSE(SearchHybridPlan(TwoTypeModel(1, 1), cluster, TestCostModel(cluster), o).ok());
  // 0 is a request nothing meets: infeasible, with the smallest memory that works (exit 3 in the CLI).
  o.memory_budget_bytes = 0;
  Result<HybridSearchResult> zero = SearchHybridPlan(TwoTypeModel(1, 1), cluster, TestCostModel(cluster), o);
  ASSERT_TRUE(zero.ok()) << zero.error().message;
  EXPECT_FALSE(zero->feasible);
  EXPECT_GT(zero->smallest_feasible_memory, 0);
  o.memory_budget_bytes = 1 << 30;
  o.global_batch = 0;
  EXPECT_FALSE(SearchHybridPlan(TwoTypeModel(1, 1), cluster, TestCostModel(cluster), o).ok());
  o.global_batch.reset();
  EXPECT_FALSE(SearchHybridPlan(cost::LayerModel{}, cluster, TestCostModel(cluster), o).ok());
  for (double beat : {-1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    o.beat_throughput = beat;
    EXPECT_FALSE(SearchHybridPlan(TwoTypeModel(1, 1), cluster, TestCostModel(cluster), o).ok()) << beat;
  }
}

TEST(SearchHybridPlan, ModelZooBertOnTitans) {
  Result<cost::Cluster> cluster = cost::ClusterPreset("rtx-titan-pcie-8");
  ASSERT_TRUE(cluster.ok());
  const cost::CostModel cm(cluster->device);
  Result<models::ModelSpec> spec = models::LoadModel("bert", {.layers = 6});
  ASSERT_TRUE(spec.ok());
  Result<ir::Graph> graph = models::BuildTrainingGraph(*spec);
  ASSERT_TRUE(graph.ok());
  Result<cost::LayerModel> model = cost::BuildLayerModel(*graph, std::get<models::TransformerConfig>(spec->config).batch, cm);
  ASSERT_TRUE(model.ok());
  HybridSearchOptions o;
  o.memory_budget_bytes = int64_t{4} << 30;
  o.max_batch = 256;
  Result<HybridSearchResult> bmw = SearchHybridPlan(*model, *cluster, cm, o);
  ASSERT_TRUE(bmw.ok() && bmw->feasible);
  ExpectSimulatorAgrees(*bmw);
  for (Method m : AllMethods()) {
    o.method = m;
    Result<HybridSearchResult> r = SearchHybridPlan(*model, *cluster, cm, o);
    ASSERT_TRUE(r.ok());
    if (!r->feasible) continue;
    EXPECT_GE(bmw->simulated.throughput_samples_per_second, r->simulated.throughput_samples_per_second * (1 - 1e-9))
        << MethodName(m);
  }
}

TEST(Methods, NamesRoundTrip) {
  for (const std::string& name : MethodNames()) {
    ASSERT_TRUE(ParseMethod(name).has_value()) << name;
    EXPECT_EQ(MethodName(*ParseMethod(name)), name);
  }
  EXPECT_FALSE(ParseMethod("zero").has_value());
  EXPECT_EQ(MethodNames().size(), 11u);
  EXPECT_EQ(HybridSearchOptions().method, Method::kKiwi);
  EXPECT_EQ(SpaceOf(Method::k3d, 8, 32).tp, 2);
  EXPECT_EQ(SpaceOf(Method::kPp, 8, 4).pp_degrees, (std::vector<int>{4}));
}

}  // namespace
}  // namespace kiwi::solve::hybrid
