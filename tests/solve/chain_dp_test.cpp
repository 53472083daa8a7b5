#include "kiwi/solve/remat/chain_dp.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kiwi/io/graph_json.h"
#include "kiwi/ir/verify.h"
#include "kiwi/sim/simulator.h"
#include "kiwi/solve/remat/chain.h"
#include "kiwi/solve/remat/checkmate_ilp.h"
#include "remat_brute_force.h"
#include "remat_test_util.h"

namespace kiwi::solve::remat {
namespace {

using test_util::Costs;
using test_util::Problem;

bool Near(double a, double b) { return std::fabs(a - b) <= 1e-6 * std::max(1.0, std::fabs(b)); }

std::string BenchmarkPath(const char* file) { return std::string(KIWI_SHARED_DIR) + "/benchmarks/remat/" + file; }

// Best-first search over Checkmate's stage schedules (frontier-advancing: stage t recomputes earlier
// nodes in order, each at most once, then computes order[t] for the first time), in the simulator's
// semantics: a compute needs its inputs resident and itself not resident, the peak is read right after
// each compute, any resident tensor may be freed at any time, persistent nodes are computed at their
// stage and never freed. State: (stage, next position of the stage, resident non-persistent set).
std::optional<double> BruteForceStageOptimum(const RematProblem& p) {
  const int n = p.size();
  std::vector<int> bit(static_cast<size_t>(n), -1);
  std::vector<int64_t> persistent_before(static_cast<size_t>(n) + 1, 0);
  int bits = 0;
  for (int k = 0; k < n; ++k) {
    const auto v = static_cast<size_t>(p.order[static_cast<size_t>(k)]);
    persistent_before[static_cast<size_t>(k) + 1] = persistent_before[static_cast<size_t>(k)] + (p.persistent[v] ? p.memory[v] : 0);
    if (!p.persistent[v]) bit[static_cast<size_t>(k)] = bits++;
  }
  std::vector<uint32_t> inputs(static_cast<size_t>(n), 0);
  std::vector<int64_t> bytes(static_cast<size_t>(bits), 0);
  for (int k = 0; k < n; ++k) {
    const ir::NodeId v = p.order[static_cast<size_t>(k)];
    if (bit[static_cast<size_t>(k)] >= 0) bytes[static_cast<size_t>(bit[static_cast<size_t>(k)])] = p.memory[static_cast<size_t>(v)];
    for (ir::NodeId in : p.graph->node(v).inputs) {
      const int b = bit[static_cast<size_t>(p.position[static_cast<size_t>(in)])];
      if (b >= 0) inputs[static_cast<size_t>(k)] |= 1u << b;
    }
  }
  auto resident_bytes = [&](uint32_t mask) {
    int64_t total = 0;
    for (int b = 0; b < bits; ++b)
      if (mask >> b & 1) total += bytes[static_cast<size_t>(b)];
    return total;
  };
  const uint64_t masks = uint64_t{1} << bits;
  auto index = [&](int t, int k, uint32_t mask) { return (static_cast<uint64_t>(t) * (n + 1) + k) * masks + mask; };
  std::vector<double> dist(static_cast<size_t>((static_cast<uint64_t>(n) + 1) * (n + 1) * masks), INFINITY);
  using Item = std::tuple<double, int, int, uint32_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
  auto relax = [&](double d, int t, int k, uint32_t mask) {
    double& at = dist[static_cast<size_t>(index(t, k, mask))];
    if (d < at) at = d, queue.emplace(d, t, k, mask);
  };
  relax(0.0, 0, 0, 0);
  while (!queue.empty()) {
    const auto [d, t, k, mask] = queue.top();
    queue.pop();
    if (d > dist[static_cast<size_t>(index(t, k, mask))]) continue;
    if (t == n) return d;
    for (int b = 0; b < bits; ++b)
      if (mask >> b & 1) relax(d, t, k, mask & ~(1u << b));
    if (k < t) relax(d, t, k + 1, mask);
    const int b = bit[static_cast<size_t>(k)];
    const uint32_t in = inputs[static_cast<size_t>(k)];
    if ((in & mask) != in || (b >= 0 && (mask >> b & 1)) || (b < 0 && k < t)) continue;
    const uint32_t after = b >= 0 ? mask | 1u << b : mask;
    const int64_t persistent = persistent_before[static_cast<size_t>(t) + (b < 0 ? 1 : 0)];
    if (resident_bytes(after) + persistent > p.budget) continue;
    const double cost = d + p.cost[static_cast<size_t>(p.order[static_cast<size_t>(k)])];
    if (k == t) relax(cost, t + 1, 0, after);
    else relax(cost, t, k + 1, after);
  }
  return std::nullopt;
}

// A seeded random chain of 1..max_layers layers: sizes 1..10 bytes, costs 1..5, with or without a
// loss, each backward op reading both, one or none of its forward neighbours, sometimes gradients
// as large as the activation below them, sometimes parameters.
TrainingChainSpec RandomChain(uint64_t seed, int max_layers, bool parameters) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
  TrainingChainSpec s;
  const int layers = uniform(1, max_layers);
  const bool mirrored = uniform(0, 1) == 1;
  for (int i = 0; i < layers; ++i) {
    s.forward_bytes.push_back(uniform(1, 10));
    s.forward_cost.push_back(uniform(1, 5));
  }
  for (int i = 0; i < layers; ++i) {
    s.backward_bytes.push_back(mirrored && i > 0 ? s.forward_bytes[static_cast<size_t>(i) - 1] : uniform(1, 10));
    s.backward_cost.push_back(uniform(1, 5));
  }
  s.loss = uniform(0, 1) == 1;
  s.loss_bytes = uniform(1, 3);
  s.loss_cost = uniform(1, 5);
  const int reads = uniform(0, 5);
  s.reads = reads < 3 ? (kReadsPrevious | kReadsSame) : reads == 3 ? kReadsPrevious : reads == 4 ? kReadsSame : 0;
  if (parameters && uniform(0, 1) == 1) s.parameter_bytes = uniform(1, 4);
  return s;
}

// Budgets from below the memory lower bound (infeasible) to the checkpoint-all peak.
std::vector<int64_t> Budgets(const RematProblem& p, int steps) {
  const int64_t lb = MemoryLowerBound(p);
  const int64_t all = p.checkpoint_all_peak;
  std::vector<int64_t> out{lb - 1};
  for (int s = 0; s <= steps; ++s) out.push_back(lb + (all - lb) * s / steps);
  return out;
}

// Solves and checks the schedule against the simulator: exactly the claimed cost, within the budget.
RematResult SolveAndReplay(const RematProblem& p) {
  Result<RematResult> r = SolveChainDp(p, Costs(), RematOptions{});
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  if (!r.ok()) return {};
  if (r->feasible) {
    plan::OperatorPlan op;
    op.schedule = r->schedule;
    Result<sim::SimResult> sim = sim::SimulateOperatorPlan(*p.graph, op, Costs(), ir::DeviceMesh{{ir::MeshAxis{}}});
    EXPECT_TRUE(sim.ok());
    if (sim.ok()) {
      EXPECT_TRUE(Near(sim->time.total(), r->cost));
      EXPECT_TRUE(Near(*r->lower_bound, r->cost));
      EXPECT_LE(sim->peak_memory_bytes, p.budget);
    }
  }
  return *r;
}

TEST(ChainExtraction, ReadsEveryShapeOfTrainingChain) {
  TrainingChainSpec s{.forward_bytes = {4, 5, 6}, .backward_bytes = {7, 8, 9}, .forward_cost = {1, 2, 3},
                      .backward_cost = {4, 5, 6}};
  for (bool loss : {true, false}) {
    for (int64_t params : {0, 3}) {
      s.loss = loss;
      s.parameter_bytes = params;
      const ir::Graph g = BuildTrainingChain(s);
      ASSERT_TRUE(ir::VerifyGraph(g).ok());
      std::string why;
      std::optional<Chain> c = ExtractChain(Problem(g, 100), &why);
      ASSERT_TRUE(c) << why;
      // The loss reads only f_3: it is b_4, the first backward op.
      EXPECT_EQ(c->n, 3);
      EXPECT_EQ(c->h, loss ? 4 : 3);
      EXPECT_EQ(c->l, 1);
      EXPECT_EQ(c->a[3], 6);
      EXPECT_EQ(c->d[3], 9);
      EXPECT_EQ(c->persistent_total, 3 * params);
      EXPECT_EQ(c->persistent_at_forward[2], 2 * params);  // w1, w2 precede f2
      EXPECT_EQ(c->reads[2], kReadsPrevious | kReadsSame);
      EXPECT_EQ(c->reads[1], kReadsSame);
      EXPECT_TRUE(Near(c->BaselineCost(), 21 + (loss ? 1 : 0)));
    }
  }
}

TEST(ChainExtraction, RejectsADiamondNamingTheNode) {
  ir::Graph g("diamond");
  auto add = [&](const char* name, std::vector<ir::NodeId> in) {
    ir::Node n;
    n.name = name;
    n.output = {ir::DType::kU8, {4}};
    n.measured_cost = 1;
    n.inputs = std::move(in);
    return g.Add(std::move(n));
  };
  const ir::NodeId a = add("a", {});
  const ir::NodeId b = add("b", {a});
  const ir::NodeId c = add("c", {a});
  add("d", {b, c});
  std::string why;
  EXPECT_FALSE(ExtractChain(Problem(g, 100), &why));
  // The split that explains the most nodes takes a, c as forward ops and d as b_1, which may not read b.
  EXPECT_EQ(why, "node 3 'd' reads node 1 'b', which is neither the incoming gradient nor forward op f_0 or f_1");
  Result<RematResult> r = SolveChainDp(Problem(g, 100), Costs(), RematOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  EXPECT_EQ(r.error().message.rfind("chain-dp: the graph is not a linear chain: ", 0), 0u) << r.error().message;
}

TEST(ChainExtraction, RejectsBenchmarksWithSkipConnections) {
  for (const char* file : {"resnet50_b256_train.json", "random_layered_n100.json", "random_layered_n250.json"}) {
    if (!std::filesystem::exists(BenchmarkPath(file))) GTEST_SKIP() << BenchmarkPath(file) << " absent";
    Result<ir::Graph> g = io::ReadGraphFile(BenchmarkPath(file));
    ASSERT_TRUE(g.ok());
    Result<RematResult> r = SolveChainDp(Problem(*g, 1), Costs(), RematOptions{});
    ASSERT_FALSE(r.ok()) << file;
    EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
    EXPECT_NE(r.error().message.find(" reads "), std::string::npos) << r.error().message;
  }
}

// The hand-over move rotor's recursion lacks. f = (2, 3, 10, 2) bytes, loss 2, b4..b1 = (6, 3, 8, 2);
// every op costs as listed below; budget 22. The optimum keeps f1 and f3 through the forward pass,
// recomputes f2 from f1 for b3 and frees f1 before b3 (b4's output 6 + f2 3 + f3 10 + b3 3 = 22),
// then recomputes f1 from nothing for b2: baseline 31 plus u2 + u1 = 2 + 4. Holding f1 through b3
// needs 24 bytes, so a schedule that keeps every checkpoint until its segment ends pays 41.
TEST(ChainDp, HandOverBeatsKeepingTheCheckpoint) {
  TrainingChainSpec s{.forward_bytes = {2, 3, 10, 2}, .backward_bytes = {2, 8, 3, 6},
                      .forward_cost = {4, 2, 4, 4}, .backward_cost = {4, 2, 5, 4}, .loss_bytes = 2, .loss_cost = 2};
  const ir::Graph g = BuildTrainingChain(s);
  const RematResult r = SolveAndReplay(Problem(g, 22));
  ASSERT_TRUE(r.feasible);
  EXPECT_TRUE(Near(r.cost, 37.0)) << r.cost;
  EXPECT_TRUE(Near(*BruteForceStageOptimum(Problem(g, 22)), 37.0));
  EXPECT_FALSE(SolveAndReplay(Problem(g, 21)).feasible);
}

TEST(ChainDp, EqualsStageBruteForceOnRandomChains) {
  int compared = 0, infeasible = 0;
  for (uint64_t seed = 1; seed <= 70; ++seed) {
    const ir::Graph g = BuildTrainingChain(RandomChain(seed, seed % 7 == 0 ? 6 : 5, seed % 3 == 0));
    for (int64_t budget : Budgets(Problem(g, 0), 5)) {
      const RematProblem p = Problem(g, budget);
      const std::optional<double> expected = BruteForceStageOptimum(p);
      const RematResult r = SolveAndReplay(p);
      ASSERT_EQ(r.feasible, expected.has_value()) << "seed " << seed << " budget " << budget;
      if (expected) {
        EXPECT_TRUE(Near(r.cost, *expected)) << "seed " << seed << " budget " << budget << ": " << r.cost << " vs "
                                             << *expected;
      }
      ++compared;
      infeasible += expected ? 0 : 1;
    }
  }
  EXPECT_GT(infeasible, 0);
  EXPECT_EQ(compared, 70 * 7);
}

// Beyond Checkmate's stage schedules: no schedule at all (recomputations in any order, any number of
// times; tests/solve/remat_brute_force.h) beats the DP on small chains.
TEST(ChainDp, NoScheduleBeatsItOnSmallChains) {
  for (uint64_t seed = 500; seed < 530; ++seed) {
    const ir::Graph g = BuildTrainingChain(RandomChain(seed, 4, seed % 3 == 0));
    for (int64_t budget : Budgets(Problem(g, 0), 4)) {
      const RematProblem p = Problem(g, budget);
      const testing::BruteForceResult any = testing::BruteForceAnySchedule(p);
      const RematResult r = SolveAndReplay(p);
      ASSERT_EQ(r.feasible, any.feasible) << "seed " << seed << " budget " << budget;
      if (any.feasible) {
        EXPECT_TRUE(Near(r.cost, any.cost)) << "seed " << seed << " budget " << budget;
      }
    }
  }
}

TEST(ChainDp, CheckpointAllBudgetGivesTheBaseline) {
  for (uint64_t seed = 100; seed < 110; ++seed) {
    const ir::Graph g = BuildTrainingChain(RandomChain(seed, 12, true));
    const RematProblem p = Problem(g, Problem(g, 0).checkpoint_all_peak);
    const RematResult r = SolveAndReplay(p);
    ASSERT_TRUE(r.feasible);
    EXPECT_TRUE(Near(r.cost, p.baseline_cost)) << "seed " << seed;
  }
}

TEST(ChainDp, MoreMemoryNeverCostsMore) {
  for (uint64_t seed = 200; seed < 206; ++seed) {
    const ir::Graph g = BuildTrainingChain(RandomChain(seed, 16, false));
    double previous = INFINITY;
    for (int64_t budget : Budgets(Problem(g, 0), 12)) {
      const RematResult r = SolveAndReplay(Problem(g, budget));
      if (!r.feasible) continue;
      EXPECT_LE(r.cost, previous + 1e-9) << "seed " << seed << " budget " << budget;
      previous = r.cost;
    }
  }
}

TEST(ChainDp, InfeasibleBudgetReportsTheLeastThatFits) {
  for (uint64_t seed = 300; seed < 306; ++seed) {
    const ir::Graph g = BuildTrainingChain(RandomChain(seed, 8, true));
    const int64_t lb = MemoryLowerBound(Problem(g, 0));
    std::string why;
    const Chain chain = *ExtractChain(Problem(g, 0), &why);
    const ChainDpSolution below = SolveChain(chain, lb - 1);
    ASSERT_FALSE(below.feasible);
    ASSERT_TRUE(below.min_budget_exact);
    EXPECT_GE(below.min_budget, lb);
    EXPECT_TRUE(SolveChain(chain, below.min_budget).feasible);
    EXPECT_FALSE(SolveChain(chain, below.min_budget - 1).feasible);
    EXPECT_FALSE(SolveAndReplay(Problem(g, lb - 1)).feasible);
  }
}

TEST(ChainDp, EqualsCheckmateIlpOnSmallChains) {
  RematOptions exact;
  exact.relative_gap = 1e-9;
  exact.threads = 1;
  exact.time_limit_seconds = 120;
  int compared = 0;
  for (uint64_t seed = 400; seed < 412; ++seed) {
    TrainingChainSpec s = RandomChain(seed, 6, seed % 4 == 0);
    for (uint64_t retry = seed + 1000; s.forward_bytes.size() < 4; retry += 1000) s = RandomChain(retry, 6, false);
    const ir::Graph g = BuildTrainingChain(s);
    for (int64_t budget : Budgets(Problem(g, 0), 3)) {
      const RematProblem p = Problem(g, budget);
      Result<RematResult> ilp = SolveCheckmateIlp(p, Costs(), exact);
      ASSERT_TRUE(ilp.ok()) << ilp.error().message;
      const RematResult dp = SolveAndReplay(p);
      ASSERT_EQ(dp.feasible, ilp->feasible) << "seed " << seed << " budget " << budget;
      if (dp.feasible) {
        ASSERT_TRUE(ilp->optimal);
        EXPECT_TRUE(Near(dp.cost, ilp->cost)) << "seed " << seed << " budget " << budget << ": " << dp.cost
                                               << " vs " << ilp->cost;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 12 * 5);
}

TEST(ChainDp, Vgg16IsAChainAndSolvesEveryBudget) {
  if (!std::filesystem::exists(BenchmarkPath("vgg16_b256_train.json"))) GTEST_SKIP() << "vgg16 absent";
  Result<ir::Graph> g = io::ReadGraphFile(BenchmarkPath("vgg16_b256_train.json"));
  ASSERT_TRUE(g.ok());
  const RematProblem all = Problem(*g, 0);
  std::string why;
  std::optional<Chain> chain = ExtractChain(all, &why);
  ASSERT_TRUE(chain) << why;
  EXPECT_EQ(chain->n, 23);  // 22 layers and the loss
  EXPECT_EQ(chain->l, 2);   // block1_conv1_backward is b_2: it reads f_1 and f_2
  double previous = 0.0;
  for (double fraction : {1.0, 0.95, 0.9, 0.85, 0.8, 0.7}) {
    const auto budget = static_cast<int64_t>(static_cast<double>(all.checkpoint_all_peak) * fraction);
    const auto start = std::chrono::steady_clock::now();
    const RematResult r = SolveAndReplay(Problem(*g, budget));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    // Below 0.83 of the peak, no schedule fits: the memory lower bound (a conv's input and output
    // with its gradients) is itself the least budget the DP reports.
    ASSERT_EQ(r.feasible, budget >= MemoryLowerBound(all)) << fraction;
    if (!r.feasible) {
      EXPECT_EQ(SolveChain(*chain, budget).min_budget, MemoryLowerBound(all));
      continue;
    }
    EXPECT_GE(r.cost, previous - 1e-9);
    if (fraction == 1.0) {
      EXPECT_TRUE(Near(r.cost, all.baseline_cost));
    }
    std::cout << "vgg16 at " << fraction << ": cost " << r.cost << " (baseline " << all.baseline_cost << "), "
              << ms << " ms\n";
    previous = r.cost;
  }
}

// MobileNet (v1) has no skip connections: Checkmate's export is a 93-op chain.
TEST(ChainDp, MobileNetIsAChain) {
  if (!std::filesystem::exists(BenchmarkPath("mobilenet_b512_train.json"))) GTEST_SKIP() << "mobilenet absent";
  Result<ir::Graph> g = io::ReadGraphFile(BenchmarkPath("mobilenet_b512_train.json"));
  ASSERT_TRUE(g.ok());
  const RematProblem all = Problem(*g, 0);
  const auto budget = static_cast<int64_t>(static_cast<double>(all.checkpoint_all_peak) * 0.9);
  const auto start = std::chrono::steady_clock::now();
  const RematResult r = SolveAndReplay(Problem(*g, budget));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.feasible);
  EXPECT_GT(r.cost, all.baseline_cost);
  std::cout << "mobilenet at 0.9: overhead " << r.cost / all.baseline_cost - 1.0 << ", " << ms << " ms\n";
}

// Timing of a long heterogeneous chain (reported, not asserted): sizes 1 kB..100 kB, gradients as
// large as the activation below them.
TEST(ChainDp, LongHeterogeneousChain) {
  std::mt19937_64 rng(7);
  TrainingChainSpec s;
  constexpr int kLayers = 30;
  for (int i = 0; i < kLayers; ++i) {
    s.forward_bytes.push_back(1000 + static_cast<int64_t>(rng() % 100000));
    s.forward_cost.push_back(1.0 + static_cast<double>(rng() % 100) / 10.0);
  }
  for (int i = 0; i < kLayers; ++i) {
    s.backward_bytes.push_back(i > 0 ? s.forward_bytes[static_cast<size_t>(i) - 1] : 500);
    s.backward_cost.push_back(2.0 * s.forward_cost[static_cast<size_t>(i)]);
  }
  const ir::Graph g = BuildTrainingChain(s);
  const RematProblem all = Problem(g, 0);
  for (double fraction : {0.5, 0.25}) {
    const auto budget = static_cast<int64_t>(static_cast<double>(all.checkpoint_all_peak) * fraction);
    const auto start = std::chrono::steady_clock::now();
    const RematResult r = SolveAndReplay(Problem(g, budget));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(r.feasible);
    EXPECT_GE(r.cost, all.baseline_cost - 1e-6);
    std::cout << kLayers << "-layer chain at " << fraction << " of checkpoint-all: overhead "
              << r.cost / all.baseline_cost - 1.0 << ", " << ms << " ms\n";
  }
}

TEST(ChainDp, TimeLimitGivesAnErrorNotAWrongAnswer) {
  TrainingChainSpec s = RandomChain(11, 1, false);
  for (int i = 0; i < 60; ++i) {
    s.forward_bytes.push_back(1000 + 37 * i % 9000), s.forward_cost.push_back(1 + i % 7);
    s.backward_bytes.push_back(1000 + 53 * i % 9000), s.backward_cost.push_back(2 + i % 5);
  }
  const ir::Graph g = BuildTrainingChain(s);
  const RematProblem p = Problem(g, Problem(g, 0).checkpoint_all_peak / 3);
  RematOptions quick;
  quick.time_limit_seconds = 0.0;
  Result<RematResult> r = SolveChainDp(p, Costs(), quick);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kTimeLimit) << r.error().message;
}

TEST(ChainDp, RefusesChainsBeyondTheSupportedLength) {
  TrainingChainSpec s;
  for (int i = 0; i <= kMaxChainDpLength; ++i) {
    s.forward_bytes.push_back(1), s.forward_cost.push_back(1);
    s.backward_bytes.push_back(1), s.backward_cost.push_back(1);
  }
  s.loss = false;
  const ir::Graph g = BuildTrainingChain(s);
  Result<RematResult> r = SolveChainDp(Problem(g, 1000), Costs(), RematOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
}

}  // namespace
}  // namespace kiwi::solve::remat
