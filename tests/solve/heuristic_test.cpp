#include "kiwi/solve/remat/heuristic.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>

#include "kiwi/io/graph_json.h"
#include "remat_test_util.h"
#include "kiwi/solve/remat/baselines.h"
#include "kiwi/solve/remat/keep_set_schedule.h"

namespace kiwi::solve::remat {
namespace {

using test_util::AddOpaque;

cost::CostModel TestCostModel() { return cost::CostModel(cost::DeviceSpec{}); }

constexpr double kBudgets[] = {0.95, 0.9, 0.85, 0.8, 0.7};

std::filesystem::path BenchmarkDir() { return std::filesystem::path(KIWI_SHARED_DIR) / "benchmarks" / "remat"; }

ir::Graph ReadBenchmark(const std::string& file) {
  Result<ir::Graph> g = io::ReadGraphFile((BenchmarkDir() / file).string());
  EXPECT_TRUE(g.ok()) << file << ": " << (g.ok() ? "" : g.error().message);
  return g.ok() ? std::move(*g) : ir::Graph();
}

RematProblem ProblemAt(const ir::Graph& g, double fraction) {
  Result<RematProblem> p = MakeRematProblem(g, TestCostModel(), 0);
  EXPECT_TRUE(p.ok());
  p->budget = static_cast<int64_t>(fraction * static_cast<double>(p->checkpoint_all_peak));
  return std::move(*p);
}


// A random training graph: forward nodes read 1-3 earlier ones; each has a gradient node reading it,
// the gradients of its consumers and some of its inputs.
ir::Graph RandomTrainingGraph(std::mt19937& rng, int forward) {
  ir::Graph g("random");
  std::vector<std::vector<ir::NodeId>> consumers(static_cast<size_t>(forward));
  for (int i = 0; i < forward; ++i) {
    std::vector<ir::NodeId> in;
    const int fan = i == 0 ? 0 : 1 + static_cast<int>(rng() % 2);
    for (int k = 0; k < fan; ++k) {
      const auto from = static_cast<ir::NodeId>(i - 1 - static_cast<int>(rng() % std::min(i, 4)));
      if (std::find(in.begin(), in.end(), from) == in.end()) in.push_back(from);
    }
    for (ir::NodeId x : in) consumers[static_cast<size_t>(x)].push_back(i);
    AddOpaque(g, "f" + std::to_string(i), 1 + static_cast<int64_t>(rng() % 50), 1.0 + rng() % 9, in);
  }
  std::vector<ir::NodeId> grad(static_cast<size_t>(forward), ir::kNoNode);
  for (int i = forward - 1; i >= 0; --i) {
    std::vector<ir::NodeId> in = {i};
    for (ir::NodeId c : consumers[static_cast<size_t>(i)]) in.push_back(grad[static_cast<size_t>(c)]);
    grad[static_cast<size_t>(i)] =
        AddOpaque(g, "g" + std::to_string(i), 1 + static_cast<int64_t>(rng() % 50), 1.0 + rng() % 9, in,
                  ir::Pass::kBackward);
  }
  return g;
}

RematOptions FastOptions() {
  RematOptions o;
  o.time_limit_seconds = 5.0;
  return o;
}

void ExpectReplaysWithinBudget(const RematProblem& p, const RematResult& r, const std::string& what) {
  ASSERT_TRUE(r.feasible) << what << ": " << r.note;
  EXPECT_LE(r.peak_memory, p.budget) << what;
  // FinishResult measured cost and peak by replaying: replay once more from the returned schedule.
  Result<RematResult> again = FinishResult(p, TestCostModel(), r.schedule, RematResult{});
  ASSERT_TRUE(again.ok()) << what;
  EXPECT_EQ(again->peak_memory, r.peak_memory) << what;
  EXPECT_DOUBLE_EQ(again->cost, r.cost) << what;
}

TEST(Heuristic, KeepAllWhenCheckpointAllFits) {
  std::mt19937 rng(1);
  const ir::Graph g = RandomTrainingGraph(rng, 20);
  const RematProblem p = ProblemAt(g, 1.0);
  Result<RematResult> r = SolveHeuristic(p, TestCostModel(), FastOptions());
  ASSERT_TRUE(r.ok());
  ExpectReplaysWithinBudget(p, *r, "fits");
  EXPECT_DOUBLE_EQ(r->cost, p.baseline_cost);
  EXPECT_EQ(r->peak_memory, p.checkpoint_all_peak);
}

TEST(Heuristic, RandomTrainingGraphsReplayWithinTheBudget) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 30; ++trial) {
    const ir::Graph g = RandomTrainingGraph(rng, 8 + trial);
    for (double f : kBudgets) {
      const RematProblem p = ProblemAt(g, f);
      Result<RematResult> r = SolveHeuristic(p, TestCostModel(), FastOptions());
      ASSERT_TRUE(r.ok()) << r.error().message;
      const std::string what = fmt::format("trial {} budget {}", trial, f);
      if (!r->feasible) {
        // Then no keep set the search knows fits: the smallest peak it reports is above the budget.
        EXPECT_GT(MinimumFeasiblePeak(p), p.budget) << what;
        EXPECT_TRUE(r->schedule.empty());
        continue;
      }
      ExpectReplaysWithinBudget(p, *r, what);
      EXPECT_GE(r->cost, p.baseline_cost);
    }
  }
}

TEST(Heuristic, InfeasibleBudgetGivesFeasibleFalse) {
  std::mt19937 rng(2);
  const ir::Graph g = RandomTrainingGraph(rng, 12);
  RematProblem p = ProblemAt(g, 1.0);
  p.budget = MemoryLowerBound(p) - 1;  // below what any schedule can reach
  Result<RematResult> r = SolveHeuristic(p, TestCostModel(), FastOptions());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->feasible);
  EXPECT_TRUE(r->schedule.empty());
  EXPECT_GE(r->peak_memory, MemoryLowerBound(p));
  EXPECT_GE(MinimumFeasiblePeak(p), MemoryLowerBound(p));
}

TEST(Heuristic, MinimumFeasiblePeakIsReachable) {
  std::mt19937 rng(9);
  const ir::Graph g = RandomTrainingGraph(rng, 25);
  RematProblem p = ProblemAt(g, 1.0);
  const int64_t smallest = MinimumFeasiblePeak(p);
  EXPECT_LT(smallest, p.checkpoint_all_peak);
  p.budget = smallest;
  Result<RematResult> r = SolveHeuristic(p, TestCostModel(), FastOptions());
  ASSERT_TRUE(r.ok());
  ExpectReplaysWithinBudget(p, *r, "at the minimum peak");
}

// A start handed in (where phase 1 stopped when its time ran out) counts: with no time to descend, the
// smallest peak is the lowest start's, and a descended schedule given as a start is that low.
TEST(Heuristic, MinimumPeakKeepSetStartsFromExtraStarts) {
  std::mt19937 rng(9);
  const ir::Graph g = RandomTrainingGraph(rng, 25);
  const RematProblem p = ProblemAt(g, 1.0);
  KeepSetScheduler ks(p);
  const KeepSetSolution descended = MinimumPeakKeepSet(ks, 5.0);
  const KeepSetSolution undescended = MinimumPeakKeepSet(ks, 0.0);
  ASSERT_LT(descended.eval.peak, undescended.eval.peak) << "the descent must matter on this graph";
  const KeepSetSolution from_extra = MinimumPeakKeepSet(ks, 0.0, {{"handed in", descended.policy}});
  EXPECT_EQ(from_extra.eval.peak, descended.eval.peak);
  EXPECT_TRUE(from_extra.variant.starts_with("handed in")) << from_extra.variant;
}

// Issue 18: after a heuristic that spent the limit, auto searched 5 s more for the smallest budget it
// can meet; now the heuristic's own smallest peak is that budget. Whatever a solver says, kiwi must
// then meet it.
TEST(SolveRemat, AnInfeasibleAnswerNamesABudgetKiwiMeets) {
  std::mt19937 rng(4);
  const ir::Graph g = RandomTrainingGraph(rng, 25);
  RematProblem p = ProblemAt(g, 1.0);
  p.budget = MemoryLowerBound(p) - 1;
  for (SolverKind kind : {SolverKind::kAuto, SolverKind::kHeuristic, SolverKind::kIlp}) {
    Result<RematResult> r = SolveRemat(p, TestCostModel(), kind, FastOptions());
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_FALSE(r->feasible);
    ASSERT_GT(r->smallest_known_budget, p.budget) << SolverName(kind);
    if (kind != SolverKind::kIlp) {
      EXPECT_EQ(r->smallest_known_budget, r->peak_memory) << SolverName(kind);
    }
    RematProblem at = p;
    at.budget = r->smallest_known_budget;
    Result<RematResult> met = SolveRemat(at, TestCostModel(), SolverKind::kHeuristic, FastOptions());
    ASSERT_TRUE(met.ok());
    EXPECT_TRUE(met->feasible) << SolverName(kind);
  }
}

// A random forward-only DAG with long skip edges (Moccasin-style).
ir::Graph RandomForwardGraph(std::mt19937& rng, int n) {
  ir::Graph g("forward");
  for (int i = 0; i < n; ++i) {
    std::vector<ir::NodeId> in;
    const int fan = i == 0 ? 0 : 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < fan; ++k) {
      const auto from = static_cast<ir::NodeId>(rng() % static_cast<unsigned>(i));
      if (std::find(in.begin(), in.end(), from) == in.end()) in.push_back(from);
    }
    AddOpaque(g, std::to_string(i), 1 + static_cast<int64_t>(rng() % 40), 1.0 + rng() % 10, in);
  }
  return g;
}

TEST(Heuristic, RandomForwardGraphsReplayWithinTheBudget) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 20; ++trial) {
    const ir::Graph g = RandomForwardGraph(rng, 10 + 2 * trial);
    for (double f : kBudgets) {
      const RematProblem p = ProblemAt(g, f);
      Result<RematResult> r = SolveHeuristic(p, TestCostModel(), FastOptions());
      ASSERT_TRUE(r.ok()) << r.error().message;
      if (r->feasible) {
        ExpectReplaysWithinBudget(p, *r, fmt::format("forward trial {} budget {}", trial, f));
      } else {
        EXPECT_GT(r->peak_memory, p.budget);
      }
    }
  }
}

TEST(Heuristic, ClaimsEqualTheSimulator) {
  std::mt19937 rng(23);
  const ir::Graph g = RandomTrainingGraph(rng, 40);
  const RematProblem p = ProblemAt(g, 0.8);
  KeepSetScheduler ks(p);
  const KeepSetSolution found = SearchKeepSet(ks, p.budget, HeuristicOptions{});
  ASSERT_TRUE(found.feasible);
  Result<RematResult> r = FinishKeepSet(ks, TestCostModel(), found.policy, RematResult{});
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->cost, found.eval.cost, 1e-6 * found.eval.cost);
  EXPECT_EQ(r->peak_memory, found.eval.peak);
  EXPECT_LE(found.eval.peak, p.budget);
}

// The acceptance test of the heuristic on the benchmark graphs: within the budget whenever the
// keep-set family can fit it, never worse than the baselines that fit, and fast.
TEST(Heuristic, BenchmarkGraphsBeatTheBaselines) {
  if (!std::filesystem::exists(BenchmarkDir())) GTEST_SKIP();
  for (const auto& entry : std::filesystem::directory_iterator(BenchmarkDir())) {
    const ir::Graph g = ReadBenchmark(entry.path().filename().string());
    for (double f : kBudgets) {
      const RematProblem p = ProblemAt(g, f);
      const std::string what = fmt::format("{} at {}", entry.path().filename().string(), f);
      const auto start = std::chrono::steady_clock::now();
      Result<RematResult> r = SolveHeuristic(p, TestCostModel(), FastOptions());
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ASSERT_TRUE(r.ok()) << what;
      RecordProperty(what, std::to_string(seconds));  // speed is measured by the bench, never asserted
      if (!r->feasible) {
        EXPECT_GT(r->peak_memory, p.budget) << what;
        EXPECT_GE(r->peak_memory, MemoryLowerBound(p)) << what;
      } else {
        ExpectReplaysWithinBudget(p, *r, what);
      }
      for (SolverKind k :
           {SolverKind::kSqrtN, SolverKind::kGreedy, SolverKind::kCkptDots, SolverKind::kMegatronSelective}) {
        Result<RematResult> b = SolveBaseline(p, TestCostModel(), k, FastOptions());
        ASSERT_TRUE(b.ok());
        if (!b->feasible) continue;
        EXPECT_TRUE(r->feasible) << what << ": " << SolverName(k) << " fits";
        EXPECT_LE(r->cost, b->cost * (1 + 1e-12)) << what << " vs " << SolverName(k);
      }
    }
  }
}

// One cell of the report: overhead over no rematerialization and seconds, or the peak when infeasible.
std::string Cell(const RematProblem& p, SolverKind kind) {
  const auto start = std::chrono::steady_clock::now();
  Result<RematResult> r = kind == SolverKind::kHeuristic ? SolveHeuristic(p, TestCostModel(), FastOptions())
                                                         : SolveBaseline(p, TestCostModel(), kind, FastOptions());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!r.ok()) return "error";
  const double peak = static_cast<double>(r->peak_memory) / static_cast<double>(p.checkpoint_all_peak);
  if (!r->feasible) return fmt::format("- (peak {:.2f})", peak);
  const double overhead = 100 * (r->cost / p.baseline_cost - 1);
  return kind == SolverKind::kHeuristic ? fmt::format("{:+.3f}% | {:.3f}", overhead, seconds)
                                        : fmt::format("{:+.2f}%", overhead);
}

// Kicks (an iterated local search from the best schedule) never return a costlier schedule, and on
// random_layered_n250 at 0.8, where remove-and-repair stops at +4.47%, a fixed number of them (so that
// the result does not depend on this machine's speed) finds a cheaper one that replays within the budget.
TEST(Heuristic, KicksImproveALocalOptimum) {
  const ir::Graph g = ReadBenchmark("random_layered_n250.json");
  const RematProblem p = ProblemAt(g, 0.8);
  RematOptions o;
  o.time_limit_seconds = 600;
  Result<RematResult> plain = SolveHeuristic(p, TestCostModel(), o);
  HeuristicOptions kicked;
  kicked.kick_seconds = 600;
  kicked.max_kicks = 40;
  Result<RematResult> r = SolveHeuristic(p, TestCostModel(), o, kicked);
  ASSERT_TRUE(plain.ok() && r.ok());
  ASSERT_TRUE(plain->feasible && r->feasible);
  EXPECT_LT(r->cost, plain->cost * (1 - 1e-4)) << r->note;
  EXPECT_LE(r->peak_memory, p.budget);
  EXPECT_NE(r->note.find("40 kicks"), std::string::npos) << r->note;
  // The same kicks every run.
  Result<RematResult> again = SolveHeuristic(p, TestCostModel(), o, kicked);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->cost, r->cost);
}

// Prints the report's table (markdown): run with --gtest_also_run_disabled_tests.
TEST(Heuristic, DISABLED_BenchmarkTable) {
  if (!std::filesystem::exists(BenchmarkDir())) GTEST_SKIP();
  fmt::print("| graph | budget | heuristic | s | sqrtn | greedy | ckpt-dots | megatron-sel |\n");
  fmt::print("|---|---|---|---|---|---|---|---|\n");
  for (const char* file : {"vgg16_b256_train.json", "mobilenet_b512_train.json", "resnet50_b256_train.json",
                           "random_layered_n100.json", "random_layered_n250.json"}) {
    const ir::Graph g = ReadBenchmark(file);
    for (double f : kBudgets) {
      const RematProblem p = ProblemAt(g, f);
      fmt::print("| {} | {:.2f} | {} | {} | {} | {} | {} |\n", file, f, Cell(p, SolverKind::kHeuristic),
                 Cell(p, SolverKind::kSqrtN), Cell(p, SolverKind::kGreedy), Cell(p, SolverKind::kCkptDots),
                 Cell(p, SolverKind::kMegatronSelective));
    }
    const RematProblem p = ProblemAt(g, 1.0);
    const auto start = std::chrono::steady_clock::now();
    const int64_t smallest = MinimumFeasiblePeak(p);
    fmt::print("|   smallest peak {:.3f} ({:.3f} s), MemoryLowerBound {:.3f} | | | | | | | |\n",
               static_cast<double>(smallest) / static_cast<double>(p.checkpoint_all_peak),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
               static_cast<double>(MemoryLowerBound(p)) / static_cast<double>(p.checkpoint_all_peak));
  }
}

}  // namespace
}  // namespace kiwi::solve::remat
