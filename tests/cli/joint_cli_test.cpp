// `kiwi joint` against CONTRACT.md: output fields, the plan replayed by `kiwi simulate`, graph files,
// bandwidth scaling, exit codes 2 and 3.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "kiwi/io/file_io.h"
#include "kiwi/io/graph_json.h"
#include "kiwi/models/presets.h"
#include "run_kiwi.h"

namespace kiwi {
namespace {

using testing::CountLines;
using testing::RunKiwi;
using testing::TempDir;

const std::string kTinyGpt = "--model gpt --layers 1 --hidden 64 --heads 4 --seq 16 --batch 8";

// A one-layer decoder without embeddings (the KIWI paper's setting) as a kiwi graph file.
std::string LayerGraphFile() {
  const std::string path = (TempDir() / "gpt_layer.json").string();
  models::ModelOverrides o;
  o.layers = 1, o.hidden = 64, o.heads = 4, o.seq = 16, o.batch = 8;
  Result<models::ModelSpec> spec = models::LoadModel("gpt", o);
  EXPECT_TRUE(spec.ok());
  std::get<models::TransformerConfig>(spec->config).embeddings = false;
  Result<ir::Graph> g = models::BuildTrainingGraph(*spec);
  EXPECT_TRUE(g.ok());
  EXPECT_TRUE(io::WriteFileAtomically(path, io::WriteGraphJson(*g)).ok());
  return path;
}

// The number in "... is known to meet is 12.4 MiB (13000000 bytes) ..." of an exit-3 message.
int64_t SmallestBudget(const std::string& err) {
  const size_t at = err.find("known to meet is");
  const size_t open = err.find('(', at);
  return at == std::string::npos || open == std::string::npos ? -1 : std::stoll(err.substr(open + 1));
}

TEST(JointCli, ContractFieldsAndThePlanReplays) {
  const std::string plan = (TempDir() / "joint_alpa.json").string();
  auto r = RunKiwi("joint " + kTinyGpt + " --mesh 2x4 --memory 64MiB --method alpa --threads 1 --quiet --json --out " + plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  for (const char* field : {"feasible", "latency_seconds", "compute_seconds", "communication_seconds",
                            "recompute_seconds", "peak_memory_bytes", "solve_seconds", "optimal", "ops"})
    EXPECT_TRUE(j.contains(field)) << field;
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_EQ(j["ops"].get<int>(), 155);
  EXPECT_EQ(j["recompute_seconds"].get<double>(), 0.0);
  EXPECT_NEAR(j["latency_seconds"].get<double>(),
              j["compute_seconds"].get<double>() + j["communication_seconds"].get<double>(), 1e-12);
  EXPECT_LE(j["peak_memory_bytes"].get<int64_t>(), int64_t{64} << 20);
  auto sim = RunKiwi("simulate " + plan + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_EQ(sim.Json()["peak_memory_bytes"], j["peak_memory_bytes"]);
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>());
}

// At the least budget KIWI knows, on a graph file: a plan that recomputes, no slower than any baseline.
TEST(JointCli, KiwiOnAGraphFileAtItsSmallestBudget) {
  const std::string graph = LayerGraphFile();
  auto none = RunKiwi("joint " + graph + " --mesh 4 --memory 1KiB --threads 1 --quiet");
  ASSERT_EQ(none.exit_code, 3) << none.err;
  const int64_t least = SmallestBudget(none.err);
  ASSERT_GT(least, 1024) << none.err;
  const std::string plan = (TempDir() / "joint_kiwi.json").string();
  auto r = RunKiwi("joint " + graph + " --mesh 4 --memory " + std::to_string(least) +
                   " --threads 1 --quiet --json --out " + plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_LE(j["peak_memory_bytes"].get<int64_t>(), least);
  EXPECT_GT(j["recompute_seconds"].get<double>(), 0.0);
  for (const auto& [method, other] : j["portfolio"].items()) {
    if (!other["feasible"].get<bool>()) continue;
    EXPECT_LE(j["latency_seconds"].get<double>(), other["latency_seconds"].get<double>() * (1 + 1e-9)) << method;
  }
  auto sim = RunKiwi("simulate " + plan + " " + graph + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
}

TEST(JointCli, ScaledBandwidthPlansReplayOnTheScaledCluster) {
  const std::string plan = (TempDir() / "joint_slow.json").string();
  auto fast = RunKiwi("joint " + kTinyGpt + " --mesh 4 --method alpa --threads 1 --quiet --json");
  auto slow = RunKiwi("joint " + kTinyGpt + " --mesh 4 --method alpa --bandwidth-scale 0.01 --threads 1 --quiet --json --out " + plan);
  ASSERT_EQ(fast.exit_code, 0) << fast.err;
  ASSERT_EQ(slow.exit_code, 0) << slow.err;
  EXPECT_GT(slow.Json()["communication_seconds"].get<double>(), 0.0);
  EXPECT_GT(slow.Json()["latency_seconds"].get<double>(), fast.Json()["latency_seconds"].get<double>());
  EXPECT_TRUE(std::filesystem::exists(plan + ".cluster.json"));
  auto sim = RunKiwi("simulate " + plan + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
}

TEST(JointCli, ImpossibleBudgetExitsThreeWithTheSmallestBudget) {
  auto r = RunKiwi("joint " + kTinyGpt + " --mesh 2x4 --memory 1MiB --method alpa --quiet");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_GT(SmallestBudget(r.err), int64_t{1} << 20) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(JointCli, UsageErrorsExitTwoWithOneLine) {
  for (const std::string& args : {kTinyGpt + " --method checkmate", kTinyGpt + " --mesh 3x3",
                                  kTinyGpt + " --bandwidth-scale 0", kTinyGpt + " --memory lots",
                                  std::string("--mesh 2x4"), std::string("/nonexistent/graph.json")}) {
    auto r = RunKiwi("joint " + args + " --quiet");
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_EQ(CountLines(r.err), 1) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace kiwi
