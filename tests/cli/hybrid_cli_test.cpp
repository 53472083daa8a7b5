// `kiwi hybrid` against CONTRACT.md: the JSON fields, a plan that `kiwi simulate` replays with the
// same numbers, exit code 3 with the smallest memory that works, exit code 2 on bad flags.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "run_kiwi.h"

namespace kiwi {
namespace {

using testing::RunKiwi;
using testing::Slurp;
using testing::TempDir;

const std::string kSmall = "hybrid --model bert --layers 4 --cluster rtx-titan-pcie-8 ";

TEST(HybridCli, JsonHasTheContractFields) {
  auto r = RunKiwi(kSmall + "--memory 4GiB --batch 16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  for (const char* field : {"feasible", "throughput_samples_per_second", "global_batch", "micro_batches", "pp_degree",
                            "pp_partition", "layers", "peak_memory_bytes", "search_seconds"})
    EXPECT_TRUE(j.contains(field)) << field;
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_EQ(j["global_batch"].get<int64_t>(), 16);
  EXPECT_LE(j["peak_memory_bytes"].get<int64_t>(), int64_t{4} << 30);
  EXPECT_GT(j["throughput_samples_per_second"].get<double>(), 0.0);
  const int pp = j["pp_degree"].get<int>();
  int covered = 0;
  for (const auto& n : j["pp_partition"]) covered += n.get<int>();
  EXPECT_EQ(covered, 4);
  EXPECT_EQ(static_cast<int>(j["pp_partition"].size()), pp * j["virtual_stages"].get<int>());  // chunks
  ASSERT_EQ(j["layers"].size(), 4u);
  for (const auto& l : j["layers"]) {
    EXPECT_EQ(l["tp"].get<int>() * l["dp"].get<int>() * pp, 8);
    EXPECT_TRUE(l.contains("sdp") && l.contains("zero") && l.contains("checkpoint"));
    EXPECT_EQ(l["sdp"].get<bool>(), l["zero"].get<int>() == 3);
  }
  EXPECT_EQ(16 % (j["micro_batches"].get<int>()), 0);
}

TEST(HybridCli, PlanReplaysInSimulateWithTheSameNumbers) {
  const std::string plan = (TempDir() / "hybrid_plan.json").string();
  auto r = RunKiwi(kSmall + "--memory 3GiB --max-batch 64 --quiet --json --out " + plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;  // --quiet
  auto sim = RunKiwi("simulate " + plan + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  auto s = sim.Json();
  EXPECT_EQ(s["peak_memory_bytes"], r.Json()["peak_memory_bytes"]);
  EXPECT_NEAR(s["throughput_samples_per_second"].get<double>(), r.Json()["throughput_samples_per_second"].get<double>(),
              1e-9 * s["throughput_samples_per_second"].get<double>());
  EXPECT_TRUE(s["claims"]["iteration_seconds_matches"].get<bool>());
  EXPECT_TRUE(s["claims"]["peak_memory_bytes_matches"].get<bool>());
  double by_kind = 0.0;  // the communication split by kind adds up to the communication bucket
  for (const auto& [kind, seconds] : s["communication_seconds"].items()) by_kind += seconds.get<double>();
  EXPECT_NEAR(by_kind, s["time"]["communication_seconds"].get<double>(), 1e-12 + 1e-9 * by_kind);
}

// --runtime fsdp2 plans what kiwi.torch.parallelize runs, in kiwi hybrid as in kiwi plan
// (SearchHybridPlan on a model FSDP2 runs): one TP degree with stages, no offloading, CP or EP; recompute sets,
// which it runs (python/kiwi/torch/parallel/recompute_sets.py), where memory is short.
TEST(HybridCli, Fsdp2RuntimePlansWhatParallelizeRuns) {
  auto r = RunKiwi("hybrid --model llama --layers 4 --hidden 1024 --heads 8 --seq 512 --cluster dgx-a100-80gb:2 "
                   "--memory 4GiB --batch 16 --runtime fsdp2 --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto layers = r.Json()["layers"];
  ASSERT_EQ(layers.size(), 4u);
  const bool staged = r.Json()["pp_degree"].get<int>() > 1;  // TP free per layer without stages only
  for (const auto& l : layers) {
    if (staged) {
      EXPECT_EQ(l["tp"], layers[0]["tp"]);
    }
    EXPECT_FALSE(l.value("offload", false)) << l;
    EXPECT_EQ(l.value("cp", 1), 1) << l;
    EXPECT_EQ(l.value("ep", 1), 1) << l;
  }
  // A 4-layer, hidden-64 Llama on 4 CPU processes (test_parallelize.py's) at 1040 KiB: a set on the first stage.
  const std::string cluster = (TempDir() / "fsdp2_cpu4.json").string();
  std::ofstream(cluster) << R"({"kiwi_cluster_version": 1, "name": "cpu4", "num_nodes": 1, "devices_per_node": 4,
      "device": {"name": "cpu", "memory": "1GiB", "memory_bandwidth_gbps": 10, "peak_tflops": {"f32": 0.02}},
      "intra_node": {"name": "loopback", "bandwidth_gbps": 1, "latency_us": 50}})";
  auto small = RunKiwi("hybrid --model llama --layers 4 --hidden 64 --heads 4 --ffn 128 --seq 16 --vocab 128 --batch 8 "
                       "--dtype fp32 --optimizer sgd --memory 1040KiB --runtime fsdp2 --quiet --json --cluster " + cluster);
  ASSERT_EQ(small.exit_code, 0) << small.err;
  int with_sets = 0;
  const auto small_layers = small.Json()["layers"];
  for (const auto& l : small_layers) {
    EXPECT_EQ(l["tp"], 1) << l;
    with_sets += l.contains("recompute") && !l["recompute"].empty() && !l.value("checkpoint", false);
  }
  EXPECT_GT(with_sets, 0) << small.out;
}

// GPT-3 175B on 64 A100s at batch 64 (Korthikanti et al. 2023, Table 3): the search interleaves, its
// plan replays with the same numbers, and it is no slower than Megatron-LM's configuration of that run
// (TP 8 + SP + selective recomputation, 8 stages of 4 chunks, micro-batches of one sample).
TEST(HybridCli, GptThreeInterleavesAndMatchesMegatronsConfiguration) {
  const std::string model = "--model gpt --layers 96 --hidden 12288 --heads 96 --seq 2048 --vocab 51200 --dtype bf16 "
                            "--attention materialized --cluster dgx-a100-80gb:8 --batch 64 ";
  const std::string plan = (TempDir() / "hybrid_gpt3_plan.json").string();
  auto r = RunKiwi("hybrid " + model + "--quiet --time-limit 600 --out " + plan);  // a complete search, under ASan too
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("interleaved 1F1B"), std::string::npos) << r.out;
  auto sim = RunKiwi("simulate " + plan + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>());
  std::string layers;
  for (int i = 0; i < 96; ++i)
    layers += std::string(i ? ", " : "") + R"({"tp": 8, "sequence_parallel": true, "selective_recompute": true})";
  std::string partition;
  for (int c = 0; c < 32; ++c) partition += std::string(c ? ", " : "") + "3";
  const std::string megatron = (TempDir() / "megatron_gpt3_plan.json").string();
  std::ofstream(megatron) << R"({"kiwi_plan_version": 1, "model": "gpt", "model_flags": {"layers": 96, "hidden": 12288,
      "heads": 96, "seq": 2048, "vocab": 51200, "dtype": "bf16", "attention": "materialized"},
      "cluster": "dgx-a100-80gb:8", "layer": {"layers": [)" << layers << R"(], "pp_degree": 8, "virtual_stages": 4,
      "pp_partition": [)" << partition << R"(], "global_batch": 64, "micro_batches": 64}})";
  auto theirs = RunKiwi("simulate " + megatron + " --json");
  ASSERT_EQ(theirs.exit_code, 0) << theirs.err;
  EXPECT_GE(sim.Json()["throughput_samples_per_second"].get<double>(),
            theirs.Json()["throughput_samples_per_second"].get<double>());
}

// Mixtral 8x7B on 8 DGX H100s: the search splits the experts (EP), its plan replays with the same
// numbers, and the same plan without expert parallelism is slower and needs more memory per device
// (every rank then holds every expert's states).
TEST(HybridCli, MixtralSplitsItsExpertsAndReplays) {
  const std::string plan = (TempDir() / "hybrid_mixtral_plan.json").string();
  // the limit: a complete search under ASan too (2-3 s here, 15-20 times that sanitized)
  auto r = RunKiwi("hybrid --model mixtral-8x7b --cluster dgx-h100:8 --batch 512 --time-limit 600 --quiet --json --out " +
                   plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = r.Json();
  int max_ep = 1;
  for (const nlohmann::json& layer : j["layers"]) max_ep = std::max(max_ep, layer.value("ep", 1));
  EXPECT_GT(max_ep, 1) << r.out;
  auto sim = RunKiwi("simulate " + plan + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>());
  nlohmann::json without = nlohmann::json::parse(Slurp(plan));
  for (nlohmann::json& layer : without["layer"]["layers"]) layer.erase("ep");
  const std::string no_ep = (TempDir() / "hybrid_mixtral_no_ep.json").string();
  std::ofstream(no_ep) << without.dump();
  auto theirs = RunKiwi("simulate " + no_ep + " --json");
  ASSERT_EQ(theirs.exit_code, 0) << theirs.err;
  EXPECT_GT(sim.Json()["throughput_samples_per_second"].get<double>(),
            theirs.Json()["throughput_samples_per_second"].get<double>());
  EXPECT_LT(sim.Json()["peak_memory_bytes"].get<int64_t>(), theirs.Json()["peak_memory_bytes"].get<int64_t>());
  const std::string config = (TempDir() / "galvatron_mixtral.json").string();
  std::filesystem::remove(config);
  auto g = RunKiwi("hybrid --model mixtral-8x7b --cluster dgx-h100:8 --batch 512 --time-limit 600 --quiet "
                   "--galvatron-out " + config + " --method kiwi");
  EXPECT_EQ(g.exit_code, 2) << g.err;
  EXPECT_NE(g.err.find("uses expert parallelism"), std::string::npos) << g.err;
  EXPECT_FALSE(std::filesystem::exists(config));
}

// Llama 3 8B at 128k tokens on 8 H100s, 8 samples: one sample's activations outgrow a device, so the
// search splits each sample's sequence over a CP group of 8 (ring attention); its plan replays to its
// claims and beats Galvatron-BMW's space (no CP). Galvatron's config cannot express it (exit 2).
TEST(HybridCli, LongContextLlamaSplitsTheSequenceAndReplays) {
  const std::string plan = (TempDir() / "hybrid_long_context_plan.json").string();
  const std::string flags = "hybrid --model llama3-8b --cluster dgx-h100:1 --seq 131072 --batch 8 --quiet --json ";
  auto r = RunKiwi(flags + "--out " + plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = r.Json();
  int max_cp = 1;
  for (const nlohmann::json& layer : j["layers"]) max_cp = std::max(max_cp, layer.value("cp", 1));
  EXPECT_GT(max_cp, 1) << r.out;
  auto sim = RunKiwi("simulate " + plan + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>());
  auto without = RunKiwi(flags + "--no-context-parallel");  // a plan kiwi.torch.distributed could run
  ASSERT_EQ(without.exit_code, 0) << without.err;
  const nlohmann::json without_json = without.Json();  // kept: the loop reads into it
  for (const nlohmann::json& layer : without_json["layers"]) EXPECT_EQ(layer.value("cp", 1), 1);
  EXPECT_GT(j["throughput_samples_per_second"].get<double>(), without.Json()["throughput_samples_per_second"].get<double>());
  auto bmw = RunKiwi(flags + "--method bmw");
  ASSERT_EQ(bmw.exit_code, 0) << bmw.err;
  EXPECT_GT(j["throughput_samples_per_second"].get<double>(), bmw.Json()["throughput_samples_per_second"].get<double>());
  const std::string config = (TempDir() / "galvatron_long_context.json").string();
  std::filesystem::remove(config);
  auto g = RunKiwi(flags + "--galvatron-out " + config + " --method kiwi");
  EXPECT_EQ(g.exit_code, 2) << g.err;
  EXPECT_NE(g.err.find("which Galvatron's config cannot express"), std::string::npos) << g.err;
  EXPECT_FALSE(std::filesystem::exists(config));
}

// Llama 3 8B on 8 H100s within 24 GiB, --offload: the search moves optimizer states to the host (ZeRO-Offload);
// the plan replays to its claims; --galvatron-out refuses it.
TEST(HybridCli, TightBudgetOffloadsTheOptimizerAndReplays) {
  const std::string plan = (TempDir() / "hybrid_offload_plan.json").string();
  auto r = RunKiwi("hybrid --model llama3-8b --cluster dgx-h100:1 --batch 64 --memory 24GiB --offload --recompute-sets 0 "
                   "--quiet --json --out " + plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = r.Json();  // kept: the loop reads into it
  bool offloads = false;
  for (const nlohmann::json& layer : j["layers"]) offloads |= layer.value("offload", false);
  EXPECT_TRUE(offloads) << r.out;
  auto sim = RunKiwi("simulate " + plan + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>());
  const std::string config = (TempDir() / "galvatron_offload.json").string();
  std::filesystem::remove(config);
  auto g = RunKiwi("hybrid --model llama3-8b --cluster dgx-h100:1 --batch 64 --memory 24GiB --offload --recompute-sets 0 "
                   "--quiet --method kiwi "
                   "--no-context-parallel --galvatron-out " + config);
  EXPECT_EQ(g.exit_code, 2) << g.err;
  EXPECT_NE(g.err.find("which Galvatron's config cannot express"), std::string::npos) << g.err;
  EXPECT_FALSE(std::filesystem::exists(config));
}

// Under a tight budget kiwi recomputes sets of ops (its layer type's frontier) and beats its own space
// without them; the plan names the ops, replays to its claims in kiwi simulate, and
// --no-recompute-sets leaves them out.
TEST(HybridCli, TightBudgetRecomputesSetsAndReplays) {
  const std::string plan = (TempDir() / "hybrid_recompute_plan.json").string();
  const std::string flags =  // the limit: an ASan build searches 15-20 times slower
      "hybrid --model llama3-8b --cluster dgx-h100:1 --batch 16 --memory 24GiB --time-limit 600 --quiet --json ";
  auto r = RunKiwi(flags + "--out " + plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = r.Json();  // kept: the loop reads into it
  bool sets = false;
  for (const nlohmann::json& layer : j["layers"]) sets |= layer.contains("recompute");
  EXPECT_TRUE(sets) << r.out;
  auto sim = RunKiwi("simulate " + plan + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>());
  auto without = RunKiwi(flags + "--no-recompute-sets");
  ASSERT_EQ(without.exit_code, 0) << without.err;
  const nlohmann::json w = without.Json();
  for (const nlohmann::json& layer : w["layers"]) EXPECT_FALSE(layer.contains("recompute"));
  EXPECT_LT(j["iteration_seconds"].get<double>(), w["iteration_seconds"].get<double>());
}

// A fused Adam keeps Adam's states (the same memory) and steps faster; the plan file records it, so
// `kiwi simulate` prices the same step.
TEST(HybridCli, FusedAdamIsFasterWithTheSameMemoryAndReplays) {
  const std::string flags = kSmall + "--memory 4GiB --batch 16 --quiet --json ";
  auto adam = RunKiwi(flags + "--optimizer adam");
  const std::string plan = (TempDir() / "fused_adam_plan.json").string();
  auto fused = RunKiwi(flags + "--optimizer fused_adam --out " + plan);
  ASSERT_EQ(adam.exit_code, 0) << adam.err;
  ASSERT_EQ(fused.exit_code, 0) << fused.err;
  EXPECT_EQ(fused.Json()["layers"], adam.Json()["layers"]);
  EXPECT_EQ(fused.Json()["peak_memory_bytes"], adam.Json()["peak_memory_bytes"]);
  EXPECT_GT(fused.Json()["throughput_samples_per_second"].get<double>(),
            adam.Json()["throughput_samples_per_second"].get<double>());
  auto sim = RunKiwi("simulate " + plan + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
}

TEST(HybridCli, ProgressGoesToStderrAndOneObjectToStdout) {
  auto r = RunKiwi(kSmall + "--memory 4GiB --max-batch 32 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("kiwi hybrid:"), std::string::npos);
  EXPECT_NO_THROW(r.Json());
  auto text = RunKiwi(kSmall + "--memory 4GiB --max-batch 32 --quiet");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("samples/s"), std::string::npos);
}

TEST(HybridCli, InfeasibleExitsThreeWithTheSmallestMemoryThatWorks) {
  auto r = RunKiwi(kSmall + "--memory 1MiB --json");
  ASSERT_EQ(r.exit_code, 3) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("use --memory ([0-9]+) or more"))) << r.err;
  EXPECT_NE(r.err.find("at batch 1"), std::string::npos) << r.err;
  const std::string smallest = m[1];
  auto just = RunKiwi(kSmall + "--batch 1 --json --memory " + smallest);
  ASSERT_EQ(just.exit_code, 0) << just.err;
  EXPECT_EQ(std::to_string(just.Json()["peak_memory_bytes"].get<int64_t>()), smallest);
  auto below = RunKiwi(kSmall + "--batch 1 --json --memory " + std::to_string(std::stoll(smallest) - 1));
  EXPECT_EQ(below.exit_code, 3) << below.err;
  // No memory at all is the same kind of answer, as for kiwi plan, remat and joint (it was exit 2).
  auto zero = RunKiwi(kSmall + "--json --memory 0");
  EXPECT_EQ(zero.exit_code, 3) << zero.err;
  EXPECT_NE(zero.err.find("use --memory"), std::string::npos) << zero.err;
}

TEST(HybridCli, BadFlagsExitTwo) {
  for (const char* flags : {"--method zero", "--batch 0", "--batch many", "--memory -1", "--memory lots",
                                   "--cluster nowhere", "--model nothing", "--max-batch 0", "--max-batch 1000000"}) {
    auto r = RunKiwi(kSmall + "--json " + std::string(flags));
    EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.err;
    EXPECT_EQ(testing::CountLines(r.err), 1) << flags << ": " << r.err;
  }
}

TEST(HybridCli, EveryMethodRuns) {
  for (const char* method : {"kiwi", "bmw", "base", "galvatron", "dp", "sdp", "tp", "pp", "3d", "dp+tp", "dp+pp"}) {
    auto r = RunKiwi(kSmall + "--memory 6GiB --max-batch 64 --no-accumulation --quiet --json --method " + std::string(method));
    ASSERT_EQ(r.exit_code, 0) << method << ": " << r.err;
    EXPECT_EQ(r.Json()["method"], method);
  }
}

TEST(HybridCli, TimeLimitWithoutAnswerExitsFour) {
  auto r = RunKiwi(kSmall + "--memory 4GiB --time-limit 0.000001 --quiet --json");
  EXPECT_EQ(r.exit_code, 4) << r.err;
}

}  // namespace
}  // namespace kiwi

namespace kiwi {
namespace {

const std::string kGalvatron = std::string(KIWI_TEST_DATA_DIR) + "/galvatron/";

TEST(HybridCli, PlansFromGalvatronProfilesAndExportsGalvatronConfig) {
  const std::string config = (testing::TempDir() / "galvatron_config.json").string();
  auto r = testing::RunKiwi("hybrid --cluster rtx-titan-pcie-8 --memory 8GiB --max-batch 64 --quiet --json "
                            "--galvatron-profiles " + kGalvatron + "computation_profiling_fp32_test.json," + kGalvatron +
                            "memory_profiling_fp32_test.json --galvatron-layers 8,8 --galvatron-hardware " + kGalvatron +
                            "allreduce_bandwidth_1nodes_8gpus_per_node.json --galvatron-out " + config);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  ASSERT_EQ(j["layers"].size(), 16u);
  auto g = nlohmann::json::parse(testing::Slurp(config));
  EXPECT_EQ(g["pp_deg"], j["pp_degree"]);
  EXPECT_EQ(g["global_bsz"], j["global_batch"]);
  EXPECT_EQ(g["chunks"], j["micro_batches"]);
  std::string tp;
  for (const auto& l : j["layers"]) tp += (tp.empty() ? "" : ",") + std::to_string(l["tp"].get<int>());
  EXPECT_EQ(g["tp_sizes_enc"], tp);
  EXPECT_EQ(j["method"], "bmw");  // --galvatron-out searches the space Galvatron's configs express
}

// A plan made from Galvatron's profiles records them (plan "galvatron"), and both it (kiwi simulate
// PLAN) and its Galvatron config (kiwi simulate --galvatron-config) replay with the search's numbers:
// the profiles read the same way, the same hardware, the same 20% + 1 GiB reserve of the budget.
TEST(HybridCli, GalvatronPlansReplayFromThePlanFileAndTheGalvatronConfig) {
  const std::string plan = (testing::TempDir() / "galvatron_plan.json").string();
  const std::string config = (testing::TempDir() / "galvatron_replay_config.json").string();
  const std::string profiles = "--galvatron-profiles " + kGalvatron + "computation_profiling_fp32_test.json," +
                               kGalvatron + "memory_profiling_fp32_test.json --galvatron-layers 8,8 --galvatron-hardware " +
                               kGalvatron + "allreduce_bandwidth_1nodes_8gpus_per_node.json," + kGalvatron +
                               "p2p_bandwidth_1nodes_8gpus_per_node.json," + kGalvatron +
                               "overlap_coefficient.json --galvatron-sp-time " + kGalvatron +
                               "sp_time_1nodes_8gpus_per_node.json ";
  auto r = testing::RunKiwi("hybrid --cluster rtx-titan-pcie-8 --memory 24GiB --max-batch 64 --quiet --json " + profiles +
                            "--out " + plan + " --galvatron-out " + config);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = r.Json();
  EXPECT_LE(j["peak_memory_bytes"].get<int64_t>(), int64_t{24} << 30);
  const auto recorded = nlohmann::json::parse(testing::Slurp(plan))["galvatron"];
  EXPECT_EQ(recorded["layers"], nlohmann::json::parse("[8, 8]"));
  EXPECT_EQ(recorded["memory_budget_bytes"].get<int64_t>(), int64_t{24} << 30);
  EXPECT_EQ(recorded["hardware"].size(), 4u);  // all-reduce, p2p, overlap, sp_time
  auto sim = testing::RunKiwi("simulate " + plan + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>()) << sim.out;
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>()) << sim.out;
  auto replay = testing::RunKiwi("simulate --cluster rtx-titan-pcie-8 --memory 24GiB --json --galvatron-config " + config +
                                 " " + profiles);
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_EQ(replay.Json()["peak_memory_bytes"], j["peak_memory_bytes"]);
  EXPECT_NEAR(replay.Json()["throughput_samples_per_second"].get<double>(), j["throughput_samples_per_second"].get<double>(),
              1e-9 * j["throughput_samples_per_second"].get<double>());
  // The reserve is Galvatron's: at 24 GiB, 20% of it and 1 GiB of context on every device
  EXPECT_GE(j["peak_memory_bytes"].get<int64_t>(), int64_t{4915 + 1024} << 20);
  // Misuse is refused in one line naming what is wrong
  auto both = testing::RunKiwi("simulate " + plan + " --galvatron-config " + config + " " + profiles);
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--galvatron-config"), std::string::npos) << both.err;
  auto profiles_on_plan = testing::RunKiwi("simulate " + plan + " " + profiles);
  EXPECT_EQ(profiles_on_plan.exit_code, 2);
  auto model_on_plan = testing::RunKiwi("simulate " + plan + " --model gpt");
  EXPECT_EQ(model_on_plan.exit_code, 2);
  EXPECT_NE(model_on_plan.err.find("Galvatron's profiles"), std::string::npos) << model_on_plan.err;
  auto wrong_layers = testing::RunKiwi("simulate --cluster rtx-titan-pcie-8 --galvatron-config " + config +
                                       " --galvatron-profiles " + kGalvatron + "computation_profiling_fp32_test.json," +
                                       kGalvatron + "memory_profiling_fp32_test.json --galvatron-layers 4,4");
  EXPECT_EQ(wrong_layers.exit_code, 2);
  EXPECT_NE(wrong_layers.err.find(config + ": tp_sizes_enc: has 16 layers, the model 8"), std::string::npos) << wrong_layers.err;
  // A run with Galvatron's sequence_parallel: every TP layer is SP-TP, and the config replays the same
  r = testing::RunKiwi("hybrid --cluster rtx-titan-pcie-8 --memory 24GiB --max-batch 64 --quiet --json --galvatron-sp " +
                       profiles + "--method bmw --galvatron-out " + config);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto sp_plan = r.Json();  // held: a range-for over a temporary's member would outlive it
  for (const auto& l : sp_plan["layers"]) EXPECT_EQ(l["sequence_parallel"].get<bool>(), l["tp"].get<int>() > 1);
  replay = testing::RunKiwi("simulate --cluster rtx-titan-pcie-8 --memory 24GiB --json --galvatron-sp --galvatron-config " +
                            config + " " + profiles);
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_EQ(replay.Json()["peak_memory_bytes"], r.Json()["peak_memory_bytes"]);
  EXPECT_NEAR(replay.Json()["iteration_seconds"].get<double>(), r.Json()["iteration_seconds"].get<double>(),
              1e-9 * r.Json()["iteration_seconds"].get<double>());
  auto no_plan = testing::RunKiwi("simulate");
  EXPECT_EQ(no_plan.exit_code, 2);
  EXPECT_NE(no_plan.err.find("PLAN"), std::string::npos) << no_plan.err;
}

// A Galvatron config with Ulysses layers (use_sp 1) is scored: their all-to-alls are kiwi's context
// parallelism, and they take the place of the TP collectives of the same degree.
TEST(HybridCli, GalvatronUlyssesConfigsAreScored) {
  const std::string config = (testing::TempDir() / "galvatron_ulysses.json").string();
  const std::string profiles = "--galvatron-profiles " + kGalvatron + "computation_profiling_fp32_test.json," +
                               kGalvatron + "memory_profiling_fp32_test.json --galvatron-layers 2,2 ";
  const auto score = [&](const std::string& use_sp) {
    std::ofstream(config) << R"({"pp_deg": 1, "tp_sizes_enc": "4,4,4,4", "use_sp": ")" << use_sp
                          << R"(", "global_bsz": 16, "default_dp_type": "zero2"})";
    return testing::RunKiwi("simulate --cluster rtx-titan-pcie-8 --json --galvatron-config " + config + " " + profiles);
  };
  auto ulysses = score("1,1,1,1");
  ASSERT_EQ(ulysses.exit_code, 0) << ulysses.err;
  EXPECT_GT(ulysses.Json()["communication_seconds"]["context_parallel"].get<double>(), 0.0);
  EXPECT_EQ(ulysses.Json()["communication_seconds"]["tensor_parallel"].get<double>(), 0.0);
  auto tp = score("0,0,0,0");
  ASSERT_EQ(tp.exit_code, 0) << tp.err;
  EXPECT_EQ(tp.Json()["communication_seconds"]["context_parallel"].get<double>(), 0.0);
  EXPECT_GT(tp.Json()["communication_seconds"]["tensor_parallel"].get<double>(), 0.0);
}

// Its cp_sizes_enc (ring attention) beside TP or Ulysses is scored too: a ring's sends, and under USP the
// all-to-alls as well; the profile-mode flags are checked as they are read.
TEST(HybridCli, GalvatronContextParallelConfigsAndProfileModes) {
  const std::string config = (testing::TempDir() / "galvatron_cp.json").string();
  const std::string profiles = "--galvatron-profiles " + kGalvatron + "computation_profiling_fp32_test.json," +
                               kGalvatron + "memory_profiling_fp32_test.json --galvatron-layers 2,2 ";
  const auto score = [&](const std::string& tp, const std::string& use_sp, const std::string& cp,
                         const std::string& flags = "") {
    std::ofstream(config) << R"({"pp_deg": 1, "tp_sizes_enc": ")" << tp << R"(", "use_sp": ")" << use_sp
                          << R"(", "cp_sizes_enc": ")" << cp << R"(", "global_bsz": 16, "default_dp_type": "zero2"})";
    return testing::RunKiwi("simulate --cluster rtx-titan-pcie-8 --json --galvatron-config " + config + " " + profiles +
                            flags);
  };
  auto none = score("2,2,2,2", "0,0,0,0", "1,1,1,1");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(none.Json()["communication_seconds"]["context_parallel"].get<double>(), 0.0);
  auto ring = score("2,2,2,2", "0,0,0,0", "2,2,2,2");
  ASSERT_EQ(ring.exit_code, 0) << ring.err;
  EXPECT_GT(ring.Json()["communication_seconds"]["context_parallel"].get<double>(), 0.0);
  auto ulysses = score("4,4,4,4", "1,1,1,1", "1,1,1,1");
  auto usp = score("2,2,2,2", "1,1,1,1", "2,2,2,2");
  ASSERT_EQ(ulysses.exit_code, 0) << ulysses.err;
  ASSERT_EQ(usp.exit_code, 0) << usp.err;
  EXPECT_GT(usp.Json()["communication_seconds"]["context_parallel"].get<double>(), 0.0);
  EXPECT_NE(usp.Json()["communication_seconds"]["context_parallel"].get<double>(),
            ulysses.Json()["communication_seconds"]["context_parallel"].get<double>());
  auto bad_cp = score("2,2,2,2", "0,0,0,0", "8,1,1,1");
  EXPECT_EQ(bad_cp.exit_code, 2);
  EXPECT_NE(bad_cp.err.find(config + ": cp_sizes_enc[0]: 8 does not divide"), std::string::npos) << bad_cp.err;
  auto bad_mode = score("1,1,1,1", "0,0,0,0", "1,1,1,1", " --galvatron-time-mode hybrid");
  EXPECT_EQ(bad_mode.exit_code, 2);
  EXPECT_NE(bad_mode.err.find("--galvatron-time-mode: 'hybrid' is not one of static, batch, sequence"),
            std::string::npos) << bad_mode.err;
  auto no_seq = score("1,1,1,1", "0,0,0,0", "1,1,1,1", " --galvatron-memory-mode sequence");
  EXPECT_EQ(no_seq.exit_code, 2);
  EXPECT_NE(no_seq.err.find("--galvatron-seq"), std::string::npos) << no_seq.err;
  auto static_time = score("1,1,1,1", "0,0,0,0", "1,1,1,1", " --galvatron-time-mode static");
  auto batch_time = score("1,1,1,1", "0,0,0,0", "1,1,1,1", " --galvatron-time-mode batch");
  ASSERT_EQ(static_time.exit_code, 0) << static_time.err;
  ASSERT_EQ(batch_time.exit_code, 0) << batch_time.err;
  EXPECT_NE(static_time.Json()["iteration_seconds"].get<double>(), batch_time.Json()["iteration_seconds"].get<double>());
}

// kiwi's own space asked for with --galvatron-out: a plan Galvatron cannot express is refused naming the
// file and the layer, and nothing is written; one it can (ZeRO-1 under accumulation: its zero2) is written.
TEST(HybridCli, GalvatronOutRefusesWhatGalvatronCannotExpress) {
  const std::string config = (testing::TempDir() / "galvatron_kiwi.json").string();
  std::filesystem::remove(config);
  // T5-Large-32 at 12 GiB: kiwi's plan mixes plain DP8 and ZeRO-1 over 8 (docs/hybrid.md)
  auto r = testing::RunKiwi("hybrid --model t5-large-32 --cluster rtx-titan-pcie-8 --memory 12GiB --time-limit 600 "
                            "--quiet --method kiwi --galvatron-out " + config);  // the limit: as searched unsanitized
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--galvatron-out " + config + ": layer "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("where an earlier layer uses"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(config));
  // BERT-Huge-32 at 8 GiB: recompute sets beside ZeRO-1 over 8, refused; without them, selective
  // recomputation of its attention cores, refused
  r = testing::RunKiwi("hybrid --model bert-huge-32 --cluster rtx-titan-pcie-8 --memory 8GiB --quiet --method kiwi "
                       "--galvatron-out " + config);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("recomputes a set of its ops (ZeRO1-DP8+RC["), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(config));
  r = testing::RunKiwi("hybrid --model bert-huge-32 --cluster rtx-titan-pcie-8 --memory 8GiB --quiet --method kiwi "
                       "--no-recompute-sets --galvatron-out " + config);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("uses selective recomputation (ZeRO1-DP8+SEL)"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(config));
  // With fused attention (no scores to recompute): ZeRO-1 over 8 in 64 micro-batches, Galvatron's zero2
  r = testing::RunKiwi("hybrid --model bert-huge-32 --attention fused --cluster rtx-titan-pcie-8 --memory 8GiB --quiet "
                       "--method kiwi --galvatron-out " + config);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(testing::Slurp(config))["default_dp_type"], "zero2");
}

TEST(HybridCli, GalvatronProfileFlagsAreChecked) {
  const std::string profiles = "--galvatron-profiles " + kGalvatron + "computation_profiling_fp32_test.json," +
                               kGalvatron + "memory_profiling_fp32_test.json ";
  auto no_layers = testing::RunKiwi("hybrid --json " + profiles);
  EXPECT_EQ(no_layers.exit_code, 2);  // the refusal names the flag it needs, not "galvatron profiles"
  EXPECT_NE(no_layers.err.find("--galvatron-layers"), std::string::npos) << no_layers.err;
  EXPECT_EQ(testing::RunKiwi("hybrid --json --galvatron-layers 2,2 --galvatron-profiles only_one.json").exit_code, 2);
  // Contradictory or out-of-range flags are refused in one line, not silently ignored (issue 18, item 13).
  for (const std::string& bad : {std::string("hybrid --json --galvatron-layers 2,2"),  // without the profiles
                                 std::string("hybrid --json --galvatron-seq 512"),
                                 "hybrid --json --galvatron-layers 2,2 --galvatron-seq -1 " + profiles,
                                 "hybrid --json --galvatron-layers 0,2 " + profiles,
                                 "hybrid --json --model bert-huge-32 --galvatron-layers 2,2 " + profiles}) {
    auto r = testing::RunKiwi(bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_EQ(testing::CountLines(r.err), 1) << bad << ": " << r.err;
  }
}

}  // namespace
}  // namespace kiwi

namespace kiwi {
namespace {

TEST(HybridCli, PlansAHuggingFaceConfig) {
  const std::string config = (testing::TempDir() / "config.json").string();
  {
    std::ofstream out(config);
    out << R"({"model_type": "gpt2", "n_layer": 6, "n_embd": 768, "n_head": 12, "n_positions": 1024,
               "vocab_size": 50257})";
  }
  auto r = testing::RunKiwi("hybrid --hf-config " + config + " --memory 4GiB --max-batch 64 --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.Json()["layers"].size(), 6u);
  const std::string plan = (testing::TempDir() / "hf_hybrid_plan.json").string();
  auto written = testing::RunKiwi("hybrid --hf-config " + config + " --memory 4GiB --max-batch 64 --quiet --out " + plan);
  ASSERT_EQ(written.exit_code, 0) << written.err;
  auto replay = testing::RunKiwi("simulate " + plan + " --json");
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_TRUE(replay.Json()["claims"]["peak_memory_bytes_matches"].get<bool>()) << replay.out;
  EXPECT_TRUE(replay.Json()["claims"]["iteration_seconds_matches"].get<bool>()) << replay.out;
  EXPECT_EQ(testing::RunKiwi("hybrid --hf-config /nonexistent/config.json --json").exit_code, 2);
  // A directory (the model's folder, not its config.json) is named as such (issue 18, item 14).
  auto dir = testing::RunKiwi("hybrid --hf-config " + testing::TempDir().string() + " --json");
  EXPECT_EQ(dir.exit_code, 2);
  EXPECT_NE(dir.err.find("is a directory"), std::string::npos) << dir.err;
  // A config and a preset are two models: refused, not the config silently preferred (issue 18, item 13).
  auto both = testing::RunKiwi("hybrid --hf-config " + config + " --model llama2-70b --json");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--hf-config"), std::string::npos) << both.err;
}

}  // namespace
}  // namespace kiwi
