// `kiwi remat` against CONTRACT.md: fields, schedule replay, exit codes.
#include <gtest/gtest.h>

#include <filesystem>

#include "run_kiwi.h"

namespace kiwi {
namespace {

using testing::CountLines;
using testing::RunKiwi;
using testing::TempDir;

const std::string kVgg = std::string(KIWI_SHARED_DIR) + "/benchmarks/remat/vgg16_b256_train.json";
const std::string kResnet = std::string(KIWI_SHARED_DIR) + "/benchmarks/remat/resnet50_b256_train.json";

TEST(RematCli, Vgg16AtNinetyPercentIsProvenOptimalAndReplays) {
  if (!std::filesystem::exists(kVgg)) GTEST_SKIP() << "no ../shared/benchmarks";
  const std::string plan = (TempDir() / "vgg_remat.json").string();
  auto r = RunKiwi("remat " + kVgg + " --budget-fraction 0.9 --quiet --json --out " + plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  for (const char* field : {"feasible", "compute_cost", "baseline_cost", "peak_memory_bytes", "budget_bytes",
                            "lower_bound", "optimal", "solve_seconds", "schedule"})
    EXPECT_TRUE(j.contains(field)) << field;
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_TRUE(j["optimal"].get<bool>());
  EXPECT_LE(j["peak_memory_bytes"].get<int64_t>(), j["budget_bytes"].get<int64_t>());
  EXPECT_GT(j["compute_cost"].get<double>(), j["baseline_cost"].get<double>());  // 0.9 needs recomputation
  EXPECT_LE(j["lower_bound"].get<double>(), j["compute_cost"].get<double>() + 1e-9);
  EXPECT_EQ(j["schedule"][0]["op"], "compute");
  auto sim = RunKiwi("simulate " + plan + " " + kVgg + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_EQ(sim.Json()["peak_memory_bytes"], j["peak_memory_bytes"]);
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
}

TEST(RematCli, EveryBaselineRunsThroughTheSameContract) {
  if (!std::filesystem::exists(kResnet)) GTEST_SKIP() << "no ../shared/benchmarks";
  for (const char* solver : {"checkpoint-all", "sqrtn", "greedy", "ckpt-dots", "megatron-selective", "heuristic"}) {
    auto r = RunKiwi(std::string("remat ") + kResnet + " --budget-fraction 1.0 --quiet --json --solver " + solver);
    ASSERT_EQ(r.exit_code, 0) << solver << ": " << r.err;
    auto j = r.Json();
    EXPECT_LE(j["peak_memory_bytes"].get<int64_t>(), j["budget_bytes"].get<int64_t>()) << solver;
  }
}

TEST(RematCli, ImpossibleBudgetExitsThreeWithTheSmallestBudget) {
  if (!std::filesystem::exists(kVgg)) GTEST_SKIP() << "no ../shared/benchmarks";
  auto r = RunKiwi("remat " + kVgg + " --budget-fraction 0.5 --quiet");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("smallest budget"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

// A 24-layer GPT's Checkmate MILP (42M nonzeros, ~9 GB) cannot load within a 5 s limit: it is not
// built (issue 18: it took 22 s and 9 GB). auto keeps the heuristic's schedule and says why (its
// binaries are past what auto gives the MILP at all); the ILP alone exits 4 (time limit) with the
// reason, not 1 or a late answer.
TEST(RematCli, MilpTooLargeForTheLimitIsNotBuilt) {
  auto r = RunKiwi("remat --model gpt --layers 24 --budget-fraction 0.5 --time-limit 5 --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  EXPECT_TRUE(j["feasible"].get<bool>());
  const std::string note = j["note"].get<std::string>();  // a slow build (sanitizers) spends the limit sooner
  EXPECT_TRUE(note.find("MILP not run (") != std::string::npos ||
              note.find("no time left for an exact search") != std::string::npos)
      << note;
  auto ilp = RunKiwi("remat --model gpt --layers 24 --budget-fraction 0.5 --time-limit 5 --solver ilp --quiet");
  EXPECT_EQ(ilp.exit_code, 4) << ilp.err;
  EXPECT_EQ(CountLines(ilp.err), 1) << ilp.err;
  EXPECT_NE(ilp.err.find("would take about"), std::string::npos) << ilp.err;
}

// auto gave its exact search at least 1 s whatever the limit (0.1 s took 1.2 s): with the heuristic
// past the limit it stops there and says so.
TEST(RematCli, AutoStopsAtTheHeuristicWhenTheLimitIsSpent) {
  auto r = RunKiwi("remat --model gpt --layers 4 --budget-fraction 0.5 --time-limit 0.001 --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_NE(j["note"].get<std::string>().find("no time left for an exact search"), std::string::npos) << j["note"];
}

TEST(RematCli, UsageErrorsExitTwo) {
  if (!std::filesystem::exists(kResnet)) GTEST_SKIP() << "no ../shared/benchmarks";
  EXPECT_EQ(RunKiwi("remat " + kResnet + " --quiet").exit_code, 2);  // no budget
  EXPECT_EQ(RunKiwi("remat " + kResnet + " --budget 1GiB --budget-fraction 0.9 --quiet").exit_code, 2);
  EXPECT_EQ(RunKiwi("remat " + kResnet + " --budget-fraction 0.9 --solver bogus --quiet").exit_code, 2);
  EXPECT_EQ(RunKiwi("remat " + kResnet + " --budget-fraction -1 --quiet").exit_code, 2);
  auto chain = RunKiwi("remat " + kResnet + " --budget-fraction 0.9 --solver chain-dp --quiet");
  EXPECT_EQ(chain.exit_code, 2);  // ResNet50 is not a linear chain
  EXPECT_NE(chain.err.find("chain"), std::string::npos) << chain.err;
}

TEST(RematCli, ModelZooGraphsWork) {
  // Activation-dominated (long sequence, SGD); the floor is the LM head's logits with the loss's dense
  // nll gradient and the logits' gradient (0.957 of the checkpoint-all peak).
  const std::string model = "remat --model gpt --layers 2 --hidden 64 --heads 4 --seq 256 --batch 8 --optimizer sgd "
                            "--budget-fraction 0.97 --quiet --json --solver ";
  auto megatron = RunKiwi(model + "megatron-selective");
  ASSERT_TRUE(megatron.exit_code == 0 || megatron.exit_code == 3) << megatron.err;  // fits, or names its floor
  auto h = RunKiwi(model + "heuristic");
  ASSERT_EQ(h.exit_code, 0) << h.err;
  auto j = h.Json();
  EXPECT_LE(j["peak_memory_bytes"].get<int64_t>(), j["budget_bytes"].get<int64_t>());
  EXPECT_GT(j["compute_cost"].get<double>(), j["baseline_cost"].get<double>());
  if (megatron.exit_code == 0) {
    EXPECT_LE(j["compute_cost"].get<double>(), megatron.Json()["compute_cost"].get<double>() * (1 + 1e-9));
  }
}

}  // namespace
}  // namespace kiwi
