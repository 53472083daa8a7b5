// `kiwi hybrid|plan|joint --out`: the plan names its cluster so that it can be loaded back. A cluster file is
// recorded by its absolute path (not by the file's "name" field, which no reader can find), a preset by
// its name; `kiwi simulate PLAN` then replays the plan on that cluster with the same numbers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "run_kiwi.h"

namespace kiwi {
namespace {

namespace fs = std::filesystem;
using testing::RunKiwi;
using testing::Slurp;
using testing::TempDir;

// A 4-device cluster whose "name" is not a file anyone can open.
fs::path WriteClusterFile(const fs::path& dir) {
  const fs::path path = dir / "tiny4.json";
  std::ofstream(path) << R"({"kiwi_cluster_version": 1, "name": "tiny4-label", "num_nodes": 1, "devices_per_node": 4,
    "device": {"name": "d", "memory": "1GiB", "memory_bandwidth_gbps": 10, "peak_tflops": {"f32": 0.02}},
    "intra_node": {"name": "link", "bandwidth_gbps": 1, "latency_us": 50}})";
  return path;
}

const std::string kTiny = "hybrid --model gpt --layers 4 --hidden 32 --heads 4 --seq 8 --batch 8 --memory 16MiB --quiet --json ";

// The plan's cluster field, and `kiwi simulate PLAN` (no --cluster) agreeing with the search.
void ExpectReplays(const std::string& plan_path, const testing::RunResult& hybrid, const std::string& cluster) {
  const nlohmann::json plan = nlohmann::json::parse(Slurp(plan_path));
  EXPECT_EQ(plan["cluster"].get<std::string>(), cluster);
  auto sim = RunKiwi("simulate " + plan_path + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_EQ(sim.Json()["peak_memory_bytes"], hybrid.Json()["peak_memory_bytes"]);
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>());
}

TEST(HybridOut, ClusterFileIsRecordedByItsPathAndLoadsBack) {
  const fs::path dir = TempDir() / "hybrid_out_abs";
  fs::create_directories(dir);
  const fs::path cluster = WriteClusterFile(dir);
  const std::string plan = (dir / "plan.json").string();
  auto r = RunKiwi(kTiny + "--cluster " + cluster.string() + " --out " + plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectReplays(plan, r, cluster.string());
}

TEST(HybridOut, RelativeClusterPathBecomesAbsolute) {
  const fs::path dir = TempDir() / "hybrid_out_rel";
  fs::create_directories(dir);
  const fs::path cluster = WriteClusterFile(dir);
  const fs::path before = fs::current_path();
  fs::current_path(dir);  // `--cluster tiny4.json` relative to the working directory
  auto r = RunKiwi(kTiny + "--cluster tiny4.json --out plan.json");
  fs::current_path(before);  // the plan must load from elsewhere too
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectReplays((dir / "plan.json").string(), r, fs::absolute(cluster).lexically_normal().string());
}

TEST(HybridOut, PresetIsRecordedByName) {
  const std::string plan = (TempDir() / "hybrid_out_preset.json").string();
  auto r = RunKiwi("hybrid --model bert --layers 2 --cluster rtx-titan-pcie-8 --memory 4GiB --batch 8 --quiet --json --out " +
                   plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectReplays(plan, r, "rtx-titan-pcie-8");
}

// The same for `kiwi plan` and `kiwi joint` (same helper, common.h ClusterReference): run `command`
// (which writes plan.json with --cluster tiny4.json) inside a fresh directory, then replay the plan from
// elsewhere; the peak must agree with the command's own.
void ExpectRelativeClusterLoadsBack(const std::string& name, const std::string& command) {
  const fs::path dir = TempDir() / name;
  fs::create_directories(dir);
  const fs::path cluster = WriteClusterFile(dir);
  const fs::path before = fs::current_path();
  fs::current_path(dir);
  auto r = RunKiwi(command + " --cluster tiny4.json --json --out plan.json");
  fs::current_path(before);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json plan = nlohmann::json::parse(Slurp((dir / "plan.json").string()));
  EXPECT_EQ(plan["cluster"].get<std::string>(), fs::absolute(cluster).lexically_normal().string());
  auto sim = RunKiwi("simulate " + (dir / "plan.json").string() + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>());
}

TEST(PlanOut, RelativeClusterPathBecomesAbsoluteAndLoadsBack) {
  ExpectRelativeClusterLoadsBack("plan_out_rel",
                                 "plan --model gpt --layers 2 --hidden 32 --heads 4 --seq 8 --batch 8 --memory 64MiB");
}

TEST(JointOut, RelativeClusterPathBecomesAbsoluteAndLoadsBack) {
  ExpectRelativeClusterLoadsBack("joint_out_rel", "joint --model gpt --layers 1 --hidden 32 --heads 4 --seq 8 --batch 8 "
                                                  "--mesh 1x4 --method alpa --quiet");
}

}  // namespace
}  // namespace kiwi
