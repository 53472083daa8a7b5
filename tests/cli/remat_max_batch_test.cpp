// `kiwi remat --max-batch`: the answer fits and the next batch does not (checked by running plain
// `kiwi remat` at both batches), hand-computed checkpoint-all answers, JSON fields, exit codes.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "kiwi/io/file_io.h"
#include "kiwi/io/graph_json.h"
#include "kiwi/solve/remat/max_batch.h"
#include "run_kiwi.h"

namespace kiwi {
namespace {

using testing::CountLines;
using testing::RunKiwi;
using testing::TempDir;

const std::string kBench = std::string(KIWI_SHARED_DIR) + "/benchmarks/remat/";
const std::string kVgg = kBench + "vgg16_b256_train.json";
const std::string kMobileNet = kBench + "mobilenet_b512_train.json";
const std::string kRandom = kBench + "random_layered_n100.json";
// Activation-dominated (long sequence, SGD) so that the batch matters.
const std::string kGpt = "--model gpt --layers 2 --hidden 64 --heads 4 --seq 256 --optimizer sgd";

// The graph file rescaled from batch b0 to `batch`, written as kiwi graph JSON (what --max-batch solves).
std::string WriteScaled(const std::string& file, int64_t b0, int64_t batch) {
  Result<ir::Graph> g = io::ReadGraphFile(file);
  if (!g.ok()) return ADD_FAILURE() << g.error().message, "";
  Result<ir::Graph> scaled = solve::remat::ScaleOpaqueGraph(*g, b0, batch);
  if (!scaled.ok()) return ADD_FAILURE() << scaled.error().message, "";
  const std::string path = (TempDir() / ("scaled_" + std::to_string(batch) + ".json")).string();
  EXPECT_TRUE(io::WriteFileAtomically(path, io::WriteGraphJson(*scaled)).ok());
  return path;
}

TEST(RematMaxBatchCli, CheckpointAllIsTheBudgetOverThePeakPerSample) {
  if (!std::filesystem::exists(kVgg)) GTEST_SKIP() << "no ../shared/benchmarks";
  // VGG16 at batch 256 peaks at 15825108992 bytes (`kiwi graph`), every tensor a multiple of 256 bytes:
  // 61816832 bytes per sample, so 16 GiB holds floor(17179869184 / 61816832) = 277 samples.
  auto r = RunKiwi("remat " + kVgg + " --max-batch --budget 16GiB --solver checkpoint-all --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  EXPECT_EQ(j["max_batch"], 277);
  EXPECT_EQ(j["graph_batch"], 256);
  EXPECT_EQ(j["peak_memory_bytes"].get<int64_t>(), int64_t{61816832} * 277);
  EXPECT_EQ(j["budget_bytes"].get<int64_t>(), int64_t{17179869184});
  EXPECT_FALSE(j["search_limit_reached"].get<bool>());
  // --budget-fraction is relative to the graph's own batch: the whole checkpoint-all peak holds 256.
  auto whole = RunKiwi("remat " + kVgg + " --max-batch --budget-fraction 1 --solver checkpoint-all --quiet --json");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(whole.Json()["max_batch"], 256);
  // --batch-of-file overrides the name: calling the same file batch 128 doubles the per-sample bytes.
  auto half = RunKiwi("remat " + kVgg + " --max-batch --budget 16GiB --batch-of-file 128 --solver checkpoint-all "
                      "--quiet --json");
  ASSERT_EQ(half.exit_code, 0) << half.err;
  EXPECT_EQ(half.Json()["max_batch"], 138);  // floor(17179869184 / 123633664)
}

TEST(RematMaxBatchCli, HeuristicAnswerFitsAndTheNextBatchDoesNot) {
  if (!std::filesystem::exists(kMobileNet)) GTEST_SKIP() << "no ../shared/benchmarks";
  auto r = RunKiwi("remat " + kMobileNet + " --max-batch --budget 4GiB --solver heuristic --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  const int64_t batch = j["max_batch"].get<int64_t>();
  ASSERT_GT(batch, 1);
  EXPECT_EQ(j["graph_batch"], 512);
  EXPECT_LE(j["peak_memory_bytes"].get<int64_t>(), j["budget_bytes"].get<int64_t>());
  // The probes end with the answer's neighbours: batch fits, batch + 1 does not.
  bool saw_fit = false, saw_next = false;
  for (const auto& p : j["probes"]) {
    if (p["batch"] == batch) saw_fit = p["fits"].get<bool>();
    if (p["batch"] == batch + 1) saw_next = !p["fits"].get<bool>();
  }
  EXPECT_TRUE(saw_fit && saw_next) << j["probes"].dump();
  // Plain `kiwi remat` at those batches agrees: the same plan fits at `batch`, nothing at batch + 1.
  auto at = RunKiwi("remat " + WriteScaled(kMobileNet, 512, batch) + " --budget 4GiB --solver heuristic --quiet --json");
  ASSERT_EQ(at.exit_code, 0) << at.err;
  EXPECT_EQ(at.Json()["peak_memory_bytes"], j["peak_memory_bytes"]);
  EXPECT_DOUBLE_EQ(at.Json()["compute_cost"].get<double>(), j["compute_cost"].get<double>());
  EXPECT_EQ(at.Json()["schedule"], j["schedule"]);
  auto next = RunKiwi("remat " + WriteScaled(kMobileNet, 512, batch + 1) + " --budget 4GiB --solver heuristic --quiet");
  EXPECT_EQ(next.exit_code, 3) << next.err;
}

TEST(RematMaxBatchCli, ModelGraphsAreRebuiltAtEachBatch) {
  const std::string plan = (TempDir() / "max_batch_plan.json").string();
  auto r = RunKiwi("remat " + kGpt + " --batch 8 --max-batch --budget 1GiB --solver heuristic --quiet --json --out " +
                   plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  const int64_t batch = j["max_batch"].get<int64_t>();
  ASSERT_GT(batch, 1);
  EXPECT_EQ(j["graph_batch"], 8);
  auto at = RunKiwi("remat " + kGpt + " --batch " + std::to_string(batch) +
                    " --budget 1GiB --solver heuristic --quiet --json");
  ASSERT_EQ(at.exit_code, 0) << at.err;
  EXPECT_EQ(at.Json()["peak_memory_bytes"], j["peak_memory_bytes"]);
  EXPECT_DOUBLE_EQ(at.Json()["compute_cost"].get<double>(), j["compute_cost"].get<double>());
  auto next = RunKiwi("remat " + kGpt + " --batch " + std::to_string(batch + 1) +
                      " --budget 1GiB --solver heuristic --quiet");
  EXPECT_EQ(next.exit_code, 3) << next.err;
  // The plan records the batch it was made for, so `kiwi simulate` replays it on that model.
  auto sim = RunKiwi("simulate " + plan + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_EQ(sim.Json()["peak_memory_bytes"], j["peak_memory_bytes"]);
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
}

TEST(RematMaxBatchCli, AutoSearchesWithTheHeuristicAndImprovesTheFinalPlan) {
  if (!std::filesystem::exists(kVgg)) GTEST_SKIP() << "no ../shared/benchmarks";
  auto h = RunKiwi("remat " + kVgg + " --max-batch --budget 8GiB --solver heuristic --quiet --json");
  auto a = RunKiwi("remat " + kVgg + " --max-batch --budget 8GiB --solver auto --quiet --json");
  ASSERT_EQ(h.exit_code, 0) << h.err;
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.Json()["max_batch"], h.Json()["max_batch"]);
  EXPECT_EQ(a.Json()["probes"], h.Json()["probes"]);
  EXPECT_EQ(a.Json()["solver"], "auto");
  EXPECT_TRUE(a.Json()["optimal"].get<bool>());  // VGG16 is a chain: auto's exact DP
  EXPECT_LE(a.Json()["compute_cost"].get<double>(), h.Json()["compute_cost"].get<double>() * (1 + 1e-12));
  EXPECT_LE(a.Json()["peak_memory_bytes"].get<int64_t>(), a.Json()["budget_bytes"].get<int64_t>());
}

TEST(RematMaxBatchCli, OneProgressLinePerProbeUnlessQuiet) {
  if (!std::filesystem::exists(kVgg)) GTEST_SKIP() << "no ../shared/benchmarks";
  auto loud = RunKiwi("remat " + kVgg + " --max-batch --budget 16GiB --solver sqrtn --json");
  ASSERT_EQ(loud.exit_code, 0) << loud.err;
  const auto probes = loud.Json()["probes"].size();
  EXPECT_EQ(static_cast<size_t>(CountLines(loud.err)), probes) << loud.err;
  EXPECT_NE(loud.err.find("batch 1: fits"), std::string::npos) << loud.err;
  auto quiet = RunKiwi("remat " + kVgg + " --max-batch --budget 16GiB --solver sqrtn --json --quiet");
  EXPECT_TRUE(quiet.err.empty()) << quiet.err;
  auto text = RunKiwi("remat " + kVgg + " --max-batch --budget 16GiB --solver sqrtn --quiet");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("max batch " + std::to_string(loud.Json()["max_batch"].get<int64_t>())), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("read from the file name"), std::string::npos) << text.out;
}

TEST(RematMaxBatchCli, NotEvenBatchOneFitsExitsThreeWithABudgetThatWorks) {
  if (!std::filesystem::exists(kVgg)) GTEST_SKIP() << "no ../shared/benchmarks";
  auto r = RunKiwi("remat " + kVgg + " --max-batch --budget 16MiB --solver heuristic --quiet");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_TRUE(r.out.empty());
  const std::string marker = "use --budget ";
  const size_t at = r.err.find(marker);
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string budget = r.err.substr(at + marker.size(), r.err.find(' ', at + marker.size()) - at - marker.size());
  auto enough = RunKiwi("remat " + kVgg + " --max-batch --budget " + budget + " --solver heuristic --quiet --json");
  ASSERT_EQ(enough.exit_code, 0) << enough.err;
  EXPECT_GE(enough.Json()["max_batch"].get<int64_t>(), 1);
}

TEST(RematMaxBatchCli, BadFlagsExitTwoWithOneLine) {
  if (!std::filesystem::exists(kVgg)) GTEST_SKIP() << "no ../shared/benchmarks";
  for (const std::string& args : {
           kVgg + " --max-batch --quiet",                                        // no budget
           kVgg + " --max-batch --budget 16GiB --solver bogus --quiet",          // unknown solver
           kVgg + " --max-batch --budget 16GiB --batch 4 --quiet",               // --batch is for --model
           kVgg + " --max-batch --budget 16GiB --batch-of-file 0 --quiet",       // not a batch
           kVgg + " --budget 16GiB --batch-of-file 256 --quiet",                 // only with --max-batch
           kVgg + " --max-batch --budget 16GiB --out /tmp/kiwi_never.json --quiet",  // files cannot replay
           kRandom + " --max-batch --budget 16GiB --quiet",                      // no batch in its name
           kGpt + " --max-batch --budget 1GiB --batch-of-file 8 --quiet",        // models know their batch
       }) {
    auto r = RunKiwi("remat " + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_EQ(CountLines(r.err), 1) << args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << args;
  }
  auto random = RunKiwi("remat " + kRandom + " --max-batch --budget 16GiB --quiet");
  EXPECT_NE(random.err.find("--batch-of-file"), std::string::npos) << random.err;
  auto with_batch = RunKiwi("remat " + kRandom + " --max-batch --budget 1MiB --batch-of-file 1 --solver heuristic "
                            "--quiet --json");
  EXPECT_EQ(with_batch.exit_code, 0) << with_batch.err;
}

}  // namespace
}  // namespace kiwi
