// End-to-end tests of the `kiwi` command against CONTRACT.md: outputs, exit codes, error lines.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "kiwi/cli/common.h"
#include "run_kiwi.h"

namespace kiwi {
namespace {

using testing::CountLines;
using testing::RunKiwi;
using testing::TempDir;

const std::string kRemat = std::string(KIWI_SHARED_DIR) + "/benchmarks/remat/";

std::string WriteTemp(const std::string& name, const std::string& contents) {
  const auto path = TempDir() / name;
  std::ofstream(path, std::ios::binary) << contents;
  return path.string();
}

TEST(Cli, VersionAndHelp) {
  auto v = RunKiwi("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.out.find("kiwi "), std::string::npos);
  auto root = RunKiwi("--help");
  EXPECT_EQ(root.exit_code, 0);
  for (const char* sub : {"plan", "graph", "simulate"}) EXPECT_NE(root.out.find(sub), std::string::npos) << sub;
  for (const char* sub : {"graph --help", "simulate --help", "plan --help"}) {
    auto h = RunKiwi(sub);
    EXPECT_EQ(h.exit_code, 0) << sub;
    EXPECT_NE(h.out.find("--json"), std::string::npos) << sub;
  }
}

TEST(Cli, EverySubcommandAcceptsThreadsAndSearchesAcceptATimeLimit) {
  EXPECT_EQ(RunKiwi("plan --threads 2 --time-limit 30 --json").exit_code, 0);
  EXPECT_EQ(RunKiwi("graph --model gpt --layers 1 --hidden 64 --heads 4 --seq 8 --threads 2").exit_code, 0);
  EXPECT_EQ(RunKiwi("plan --time-limit -1").exit_code, 2);
  // Issue 18, item 6: NaN was accepted and acted as zero; 1e10 overflowed the deadline (exit 4 at once).
  const auto nan = RunKiwi("plan --time-limit nan");
  EXPECT_EQ(nan.exit_code, 2);
  EXPECT_NE(nan.err.find("must be a positive number of seconds (got nan)"), std::string::npos) << nan.err;
  EXPECT_EQ(RunKiwi("hybrid --model gpt --layers 2 --hidden 64 --heads 4 --seq 8 --batch 8 --time-limit 1e10").exit_code,
            0);
  EXPECT_EQ(RunKiwi("plan --time-limit inf --json").exit_code, 0);
  EXPECT_EQ(RunKiwi("plan --threads many").exit_code, 2);
}

// `kiwi solvers` lists the registry: every family, each solver's name as its subcommand takes it.
TEST(Cli, SolversListsTheRegistry) {
  const auto all = RunKiwi("solvers");
  ASSERT_EQ(all.exit_code, 0) << all.err;
  for (const char* line : {"layers (kiwi plan", "remat (kiwi remat --solver NAME)", "sharding (kiwi iopddl",
                           "joint (kiwi joint --method NAME)", "hybrid (kiwi hybrid --method NAME)", "kiwi (per-layer)", "Megatron-LM", "chain-dp", "kiwi-full"})
    EXPECT_NE(all.out.find(line), std::string::npos) << line;
  const auto remat = RunKiwi("solvers --family remat --json");
  ASSERT_EQ(remat.exit_code, 0) << remat.err;
  const nlohmann::json j = nlohmann::json::parse(remat.out);
  ASSERT_EQ(j.size(), 10u);
  for (const nlohmann::json& s : j) {
    EXPECT_EQ(s["family"], "remat");
    // each name is one `kiwi remat --solver` takes (chain-dp refuses a graph that is not a chain, by name)
    const std::string name = s["name"].get<std::string>();
    const auto run = RunKiwi("remat --model gpt --layers 1 --hidden 64 --heads 4 --seq 8 --budget-fraction 1 --quiet --solver " + name);
    EXPECT_EQ(run.err.find("is not one of"), std::string::npos) << name << ": " << run.err;
    EXPECT_EQ(run.exit_code, name == "chain-dp" ? 2 : 0) << name << ": " << run.err;
  }
  const auto bad = RunKiwi("solvers --family milp");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--family: 'milp' is not one of layers, hybrid, remat, sharding, joint"), std::string::npos) << bad.err;
}

TEST(Cli, UnknownFlagIsUsageErrorOnOneLine) {
  auto r = RunKiwi("graph --no-such-flag");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
}

TEST(Cli, GraphVgg16MatchesTheContract) {
  if (!std::filesystem::exists(kRemat + "vgg16_b256_train.json")) GTEST_SKIP() << "no ../shared/benchmarks";
  auto r = RunKiwi("graph " + kRemat + "vgg16_b256_train.json --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  EXPECT_EQ(j["nodes"], 45);
  EXPECT_EQ(j["edges"], 87);
  EXPECT_EQ(j["forward_nodes"].get<int>() + j["backward_nodes"].get<int>(), 45);
  EXPECT_GT(j["checkpoint_all_peak_bytes"].get<int64_t>(), 0);
  EXPECT_GT(j["compute_cost"].get<double>(), 0);
}

// A preset's parameter count is the released checkpoint's (tests/models/parameter_count_test.cpp);
// the graph of the full-size model is metadata only.
TEST(Cli, GraphReportsTheModelsParameters) {
  auto r = RunKiwi("graph --model llama3-8b --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.Json()["parameters"].get<int64_t>(), int64_t{8'030'261'248});
  auto text = RunKiwi("graph --model llama3-8b");
  EXPECT_NE(text.out.find("parameters              8030261248 (8.03 billion)"), std::string::npos) << text.out;
}

TEST(Cli, GraphWorksOnEveryBenchmarkFile) {
  if (!std::filesystem::exists(kRemat)) GTEST_SKIP() << "no ../shared/benchmarks";
  for (const auto& entry : std::filesystem::directory_iterator(kRemat)) {
    auto r = RunKiwi("graph " + entry.path().string() + " --json");
    ASSERT_EQ(r.exit_code, 0) << entry.path() << ": " << r.err;
    auto j = r.Json();
    EXPECT_GT(j["nodes"].get<int>(), 0);
    EXPECT_GT(j["checkpoint_all_peak_bytes"].get<int64_t>(), 0);
  }
}

TEST(Cli, MalformedGraphsExitTwoWithOneLineNamingTheFile) {
  std::mt19937 rng(42);
  std::string noise(1 << 20, '\0');
  for (char& c : noise) c = static_cast<char>(rng() & 0xff);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"truncated.json", R"({"directed": true, "nodes": [{"id": 0, "cost_ram": 4)"},
      {"cycle.json", R"({"nodes": [{"id": 0, "name": "a", "backward": false, "cost_cpu": 1, "cost_ram": 4},
                                  {"id": 1, "name": "b", "backward": false, "cost_cpu": 1, "cost_ram": 4}],
                       "links": [{"source": 0, "target": 1}, {"source": 1, "target": 0}]})"},
      {"missing.json", R"({"nodes": [{"id": 0, "name": "a", "backward": false, "cost_cpu": 1}], "links": []})"},
      {"negative.json", R"({"nodes": [{"id": 0, "name": "a", "backward": false, "cost_cpu": 1, "cost_ram": -4}],
                          "links": []})"},
      {"unknown_kind.json", R"({"kiwi_graph_version": 1, "nodes": [{"id": 0, "name": "a", "kind": "frobnicate",
                               "dtype": "f32", "shape": [4]}]})"},
      {"noise.json", noise},
      {"empty.json", ""},
  };
  for (const auto& [name, contents] : cases) {
    const std::string path = WriteTemp(name, contents);
    auto r = RunKiwi("graph " + path + " --json");
    EXPECT_EQ(r.exit_code, 2) << name << ": " << r.err;
    EXPECT_EQ(CountLines(r.err), 1) << name << ": " << r.err;
    EXPECT_NE(r.err.find(name), std::string::npos) << name << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << name;
  }
  auto missing = RunKiwi("graph /nonexistent/graph.json");
  EXPECT_EQ(missing.exit_code, 2);
}

TEST(Cli, GraphFromModelZooAndExportRoundTrips) {
  const std::string exported = (TempDir() / "gpt2l.json").string();
  auto r = RunKiwi("graph --model gpt --layers 2 --hidden 64 --heads 4 --seq 16 --batch 2 --json --export " + exported);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto zoo = r.Json();
  EXPECT_EQ(zoo["layers"], 2);
  EXPECT_GT(zoo["backward_nodes"].get<int>(), 0);
  auto again = RunKiwi("graph " + exported + " --json");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  auto file = again.Json();
  for (const char* field : {"nodes", "edges", "forward_nodes", "backward_nodes", "checkpoint_all_peak_bytes"})
    EXPECT_EQ(zoo[field], file[field]) << field;
  EXPECT_DOUBLE_EQ(zoo["compute_cost"].get<double>(), file["compute_cost"].get<double>());
}

// --hf-config: a HuggingFace config's training graph, as the planners build it: a Llama's RMSNorms are
// HuggingFace's eager module (the normalized input, then its product with the weight); beside --model or a
// GRAPH file, refused.
TEST(Cli, GraphTakesAHuggingFaceConfig) {
  const std::string config = std::string(KIWI_TEST_DATA_DIR) + "/hf/llama.json";
  const std::string exported = (TempDir() / "hf_llama_graph.json").string();
  auto r = RunKiwi("graph --hf-config " + config + " --seq 16 --batch 1 --json --export " + exported);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(exported);
  const nlohmann::json graph = nlohmann::json::parse(in);
  std::set<std::string> names;
  for (const auto& node : graph["nodes"]) names.insert(node["name"].get<std::string>());
  for (const char* op : {"layer0.attn.norm_normalized", "layer0.attn.norm", "layer0.mlp.norm_normalized", "layer0.mlp.norm"})
    EXPECT_TRUE(names.count(op)) << op;
  EXPECT_EQ(RunKiwi("graph --hf-config " + config + " --model gpt").exit_code, 2);
  EXPECT_EQ(RunKiwi("graph " + exported + " --hf-config " + config).exit_code, 2);
  auto missing = RunKiwi("graph --hf-config " + (TempDir() / "no_such_config.json").string());
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(CountLines(missing.err), 1) << missing.err;
}

TEST(Cli, BadModelFlagsExitTwo) {
  EXPECT_EQ(RunKiwi("graph --model gpt --heads 7 --hidden 64").exit_code, 2);
  // Sizes whose products would overflow int64 are rejected, never computed with.
  EXPECT_EQ(RunKiwi("graph --model gpt --hidden 4000000000 --heads 1 --seq 4000000000").exit_code, 2);
  EXPECT_EQ(RunKiwi("graph --model gpt --batch 9223372036854775807").exit_code, 2);
  EXPECT_EQ(RunKiwi("graph --model gpt --batch 16000000 --seq 16000000 --layers 1").exit_code, 2);
  EXPECT_EQ(RunKiwi("graph --model gpt --layers 2000000").exit_code, 2);
  EXPECT_EQ(RunKiwi("graph --model no-such-model").exit_code, 2);
  EXPECT_EQ(RunKiwi("plan --cluster no-such-cluster").exit_code, 2);
  EXPECT_EQ(RunKiwi("plan --memory 12parsecs").exit_code, 2);
}

// The main job: kiwi's plan, the alternatives beside it and why it wins (time, traffic, memory).
TEST(Cli, MainJobPrintsTheBestPlanBesideTheAlternatives) {
  auto r = RunKiwi("");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("v100-nvlink-8"), std::string::npos);
  EXPECT_NE(r.out.find("Best plan, found by "), std::string::npos) << r.out;
  for (const char* row : {"Megatron-LM", "FSDP (ZeRO-3) + CKPT", "Galvatron-BMW", "DeepSpeed 3D", "uniform",
                          "Why: ", "pipeline bubble", "optimizer states", "MFU", "    tensor / sequence parallel"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  EXPECT_EQ(r.err, "") << "no progress lines when stderr is not a terminal";
  auto progress = RunKiwi("plan --progress");
  EXPECT_NE(progress.err.find("kiwi plan: Megatron-LM: "), std::string::npos) << progress.err;
  EXPECT_EQ(RunKiwi("plan --progress --quiet").err, "");
}

// --report: one self-contained HTML page with its four figures (python/tests/test_plan_report.py
// screenshots it); a place it cannot be written is refused before any search.
TEST(Cli, PlanReportIsOneSelfContainedPage) {
  const std::string path = (TempDir() / "plan_report.html").string();
  auto r = RunKiwi("plan --model gpt --layers 4 --report " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = testing::Slurp(path);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  size_t figures = 0;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) ++figures;
  EXPECT_EQ(figures, 4u);
  for (const char* section : {"Planners", "Why it wins", "Pipeline timeline", "Memory per stage", "Layers' strategies",
                              "Throughput against the memory budget", "Megatron-LM", "Operator-level refinement"})
    EXPECT_NE(html.find(section), std::string::npos) << section;
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  auto bad = RunKiwi("plan --report " + (TempDir() / "no_such_dir" / "plan.html").string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(CountLines(bad.err), 1) << bad.err;
}

// --hf-config: a HuggingFace model planned at the given batch; --out records the config file by its
// absolute path and kiwi simulate replays the plan on it to its claims; a config beside --model refused.
TEST(Cli, PlanTakesAHuggingFaceConfig) {
  const std::string config = std::string(KIWI_TEST_DATA_DIR) + "/hf/llama.json";
  auto r = RunKiwi("plan --hf-config " + config + " --batch 16 --cluster dgx-a100-80gb:1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = r.Json();
  EXPECT_EQ(j["global_batch"].get<int64_t>(), 16);
  EXPECT_NE(j["model"].get<std::string>().find("batch 16"), std::string::npos) << j["model"];
  const std::string path = (TempDir() / "hf_plan.json").string();
  auto out = RunKiwi("plan --hf-config " + config + " --batch 16 --cluster dgx-a100-80gb:1 --no-refine --quiet --out " + path);
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_NE(out.out.find("python -m kiwi.torch.parallel --plan " + path), std::string::npos) << out.out;
  const nlohmann::json file = nlohmann::json::parse(testing::Slurp(path));
  EXPECT_EQ(file["model"], "");
  EXPECT_EQ(std::filesystem::path(file["hf_config"].get<std::string>()), std::filesystem::absolute(config).lexically_normal());
  auto sim = RunKiwi("simulate " + path + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>()) << sim.out;
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>()) << sim.out;
  // a plan whose config is gone: one line naming the file, exit 2
  nlohmann::json moved = file;
  moved["hf_config"] = (TempDir() / "no_such_config.json").string();
  const std::string moved_path = (TempDir() / "hf_plan_moved.json").string();
  std::ofstream(moved_path) << moved.dump();
  auto gone = RunKiwi("simulate " + moved_path);
  EXPECT_EQ(gone.exit_code, 2);
  EXPECT_EQ(CountLines(gone.err), 1) << gone.err;
  EXPECT_NE(gone.err.find("no_such_config.json"), std::string::npos) << gone.err;
  EXPECT_EQ(RunKiwi("plan --hf-config " + config + " --model gpt").exit_code, 2);
}

// --batch auto (opt-in): the batch kiwi hybrid's sweep is fastest at, then every planner at it; the
// default keeps the model's batch; a batch that is neither a number nor auto is refused.
TEST(Cli, PlanSearchesTheBatchOnlyWhenAsked) {
  const std::string model = "plan --model gpt --layers 2 --hidden 256 --heads 4 --seq 128 --memory 2GiB --json ";
  auto kept = RunKiwi(model);
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_EQ(kept.Json()["global_batch"].get<int64_t>(), 8);  // the preset's
  auto searched = RunKiwi(model + "--batch auto --max-batch 64");
  ASSERT_EQ(searched.exit_code, 0) << searched.err;
  auto hybrid = RunKiwi("hybrid --model gpt --layers 2 --hidden 256 --heads 4 --seq 128 --memory 2GiB --batch auto "
                        "--max-batch 64 --quiet --json");
  ASSERT_EQ(hybrid.exit_code, 0) << hybrid.err;
  EXPECT_EQ(searched.Json()["global_batch"], hybrid.Json()["global_batch"]);
  EXPECT_GE(searched.Json()["best"]["throughput_samples_per_second"].get<double>(),
            hybrid.Json()["throughput_samples_per_second"].get<double>());
  for (const char* bad : {"--batch 0", "--batch many", "--batch auto --max-batch 0"}) {
    auto r = RunKiwi(model + bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_EQ(CountLines(r.err), 1) << bad << ": " << r.err;
  }
}

TEST(Cli, PlanJsonPicksTheFastestFittingPlan) {
  auto r = RunKiwi("plan --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  const double best = j["best"]["throughput_samples_per_second"];
  EXPECT_EQ(j["candidates"].size(), 7u);
  for (const auto& c : j["candidates"]) {
    if (!c["fits"].get<bool>()) continue;
    EXPECT_LE(c["throughput_samples_per_second"].get<double>(), best) << c["name"];
    EXPECT_LE(c["peak_memory_bytes"].get<int64_t>(), j["memory_budget_bytes"].get<int64_t>()) << c["name"];
  }
  // the explanation's buckets add up to the iteration and its memory kinds to the peak
  for (const auto& e : j["explained"]) {
    const auto& t = e["breakdown"]["time_seconds"];
    EXPECT_NEAR(t["compute"].get<double>() + t["recompute"].get<double>() + t["communication"].get<double>() +
                    t["resharding"].get<double>(),
                t["iteration"].get<double>(), 1e-12);
    double by_kind = 0.0;  // and the communication's kinds to the communication
    for (const auto& [kind, seconds] : e["breakdown"]["communication_seconds"].items()) by_kind += seconds.get<double>();
    EXPECT_NEAR(by_kind, t["communication"].get<double>(), 1e-12);
    const auto& m = e["breakdown"]["memory_bytes"];
    EXPECT_EQ(m["parameters"].get<int64_t>() + m["gradients"].get<int64_t>() + m["optimizer_states"].get<int64_t>() +
                  m["activations"].get<int64_t>() + m["buffers"].get<int64_t>() + m["reserved"].get<int64_t>(),
              m["peak"].get<int64_t>());
  }
  auto uniform = RunKiwi("plan --uniform --json");
  ASSERT_EQ(uniform.exit_code, 0) << uniform.err;
  const auto u = uniform.Json();
  const double best_uniform = u["best"]["throughput_samples_per_second"];
  for (const auto& p : u["plans"]) {
    if (p["fits"].get<bool>()) {
      EXPECT_LE(p["throughput_samples_per_second"].get<double>(), best_uniform + 1e-9);
    }
    EXPECT_EQ(p["fits"].get<bool>(), p["peak_memory_bytes"].get<int64_t>() <= u["memory_budget_bytes"].get<int64_t>());
  }
  EXPECT_LE(best_uniform, best);  // the uniform plans are one of kiwi plan's alternatives
}

TEST(Cli, PlanOnNodesThatStagesCannotTile) {
  // 35 DGX nodes: 280 GPUs. Batch 8 divides by no data-parallel degree (35 at least): exit 2, naming
  // the batch; batch 280 plans, leaving out the pipelines whose stages would split nodes.
  auto bad = RunKiwi("plan --cluster dgx-a100-80gb:35 --layers 2");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(CountLines(bad.err), 1) << bad.err;
  EXPECT_NE(bad.err.find("--batch 8"), std::string::npos) << bad.err;
  auto r = RunKiwi("plan --cluster dgx-a100-80gb:35 --layers 2 --batch 280 --uniform --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = r.Json();  // kept: a range-for over a temporary's member would read freed memory
  for (const auto& p : j["plans"]) EXPECT_EQ(p["pp_degree"].get<int>(), 1);  // 140 and 70 split nodes
}

// --profile: measured per-operator times replace the roofline for the operators they name, in every
// planning subcommand; a bad profile is bad input.
TEST(Cli, ProfileTimesChangePredictions) {
  const std::string path = (TempDir() / "slow_qkv.json").string();
  std::ofstream(path) << R"({"kiwi_profile_version": 1, "unit": "s", "ops": {"layer0.attn.q": 2.0}})";
  const std::string model = " --model gpt --layers 1 --json";
  auto base = RunKiwi("plan" + model);
  auto slow = RunKiwi("plan" + model + " --profile " + path);
  ASSERT_EQ(base.exit_code, 0) << base.err;
  ASSERT_EQ(slow.exit_code, 0) << slow.err;
  // One q projection of 2 s per pass over the whole graph batch: at least 2 s / 8 devices of forward.
  EXPECT_GT(slow.Json()["best"]["iteration_seconds"].get<double>(),
            base.Json()["best"]["iteration_seconds"].get<double>() + 0.2);
  auto graph_base = RunKiwi("graph" + model);
  auto graph_slow = RunKiwi("graph" + model + " --profile " + path);
  ASSERT_EQ(graph_slow.exit_code, 0) << graph_slow.err;
  EXPECT_NEAR(graph_slow.Json()["compute_cost"].get<double>() - graph_base.Json()["compute_cost"].get<double>(),
              2.0, 0.1);
  for (const std::string command : {"hybrid --time-limit 10", "remat --budget-fraction 0.9 --time-limit 1", "joint --time-limit 1"}) {
    auto r = RunKiwi(command + model + " --profile " + path);
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.err;
  }
  const std::string bad = (TempDir() / "bad_profile.json").string();
  std::ofstream(bad) << R"({"kiwi_profile_version": 1, "ops": {}})";
  auto r = RunKiwi("plan" + model + " --profile " + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("unit"), std::string::npos) << r.err;
}

// A CPU profile's reference training pass sets the per-op time every op pays (cli/cost_model_loader.h):
// the longer the pass took, the more each op costs; a reference kiwi cannot build is bad input.
TEST(Cli, AProfilesReferencePassCalibratesThePerOpTime) {
  const auto profile = [](const std::string& name, const std::string& reference) {
    const std::string path = (TempDir() / name).string();
    std::ofstream(path) << R"({"kiwi_profile_version": 1, "unit": "s", "device": {"kernel_time": 1e-6, )"
                        << R"("memory_bandwidth_gbps": 10)" << reference << "}}";
    return path;
  };
  const std::string sizes = R"("model": "gpt", "layers": 2, "hidden": 8, "seq": 4, "batch": 2, "vocab": 64, )";
  const std::string chain = profile("chain.json", "");
  const std::string fast = profile("fast_pass.json", R"(, "reference_step": {)" + sizes + R"("heads": 2, "time": 1e-3})");
  const std::string slow = profile("slow_pass.json", R"(, "reference_step": {)" + sizes + R"("heads": 2, "time": 2e-3})");
  const std::string model = "graph --model gpt --layers 4 --hidden 16 --heads 2 --seq 8 --batch 4 --json --profile ";
  struct Priced {
    double compute = 0.0, per_op = 0.0;
  };
  const auto priced = [&](const std::string& path) {
    auto r = RunKiwi(model + path);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto j = r.Json();
    return Priced{j["compute_cost"].get<double>(), j["per_op_seconds"].get<double>()};
  };
  const Priced at_chain = priced(chain), at_fast = priced(fast), at_slow = priced(slow);
  EXPECT_DOUBLE_EQ(at_chain.per_op, 1e-6);  // no reference pass: the chain's kernel time
  // The reference's ops pay what its pass took beyond their work: 1 ms more pass time is 1 ms / ops more
  // per op (a few hundred ops), and the model's compute grows by that times its own ops.
  EXPECT_GT(at_fast.per_op, at_chain.per_op);
  const double ops_in_reference = 1e-3 / (at_slow.per_op - at_fast.per_op);
  EXPECT_GT(ops_in_reference, 100.0);
  EXPECT_LT(ops_in_reference, 400.0);
  EXPECT_GT(at_fast.compute, at_chain.compute);
  EXPECT_GT(at_slow.compute - at_fast.compute, 1e-3);  // the model has more ops than the reference
  // A per-op time given outright (op_time, as kiwi.torch gives its runner's) replaces the calibration.
  const std::string given =
      profile("given.json", R"(, "op_time": 2.5e-5, "reference_step": {)" + sizes + R"("heads": 2, "time": 1e-3})");
  EXPECT_DOUBLE_EQ(priced(given).per_op, 2.5e-5);
  const std::string bad = profile("bad_pass.json", R"(, "reference_step": {)" + sizes + R"("heads": 3, "time": 1e-3})");
  auto r = RunKiwi(model + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(bad + ": device.reference_step: "), std::string::npos) << r.err;
}

TEST(Cli, ImpossibleBudgetExitsThreeWithTheSmallestKnownBudget) {
  auto r = RunKiwi("plan --memory 1MiB");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--memory"), std::string::npos) << r.err;
}

TEST(Cli, PlanWrittenByPlanReplaysWithTheSamePrediction) {
  const std::string path = (TempDir() / "best_plan.json").string();
  auto planned = RunKiwi("plan --json --out " + path);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  auto sim = RunKiwi("simulate " + path + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  auto j = sim.Json();
  EXPECT_EQ(j["level"], "layer");
  EXPECT_EQ(j["peak_memory_bytes"], planned.Json()["best"]["peak_memory_bytes"]);
  EXPECT_TRUE(j["claims"]["peak_memory_bytes_matches"].get<bool>());
  EXPECT_TRUE(j["claims"]["iteration_seconds_matches"].get<bool>());
}

// At 1.7 GiB the default GPT's fastest uniform plan (`kiwi plan --uniform`) recomputes a set of each layer's ops (its frontier:
// norms, GeLU, dropout masks); the plan file names them and replays to its claims; the table counts them.
TEST(Cli, PlanWithARecomputeSetReplays) {
  const std::string path = (TempDir() / "best_set_plan.json").string();
  auto planned = RunKiwi("plan --uniform --memory 1.7GiB --json --out " + path);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const nlohmann::json best = planned.Json()["best"];
  ASSERT_TRUE(best.contains("recompute")) << best;
  EXPECT_NE(best["name"].get<std::string>().find("+RC[attn.norm,"), std::string::npos);
  auto sim = RunKiwi("simulate " + path + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>());
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
  const nlohmann::json file = nlohmann::json::parse(testing::Slurp(path));
  ASSERT_EQ(file["layer"]["layers"].size(), 4u);
  for (const nlohmann::json& layer : file["layer"]["layers"]) EXPECT_EQ(layer["recompute"], best["recompute"]);
  auto table = RunKiwi("plan --uniform --memory 1.7GiB");
  EXPECT_NE(table.out.find("+RC" + std::to_string(best["recompute"].size()) + " "), std::string::npos) << table.out;
}

// The operator-level refinement (on by default): one row per strategy of the best plan, KIWI never
// slower than the layer as planned within its memory; --refine-out writes each layer's graph and KIWI's
// plan, which `kiwi simulate` replays to the numbers shown; --no-refine turns it off.
TEST(Cli, PlanRefinesEachStrategyAndItsPlansReplay) {
  const std::string dir = (TempDir() / "refined").string();
  auto r = RunKiwi("plan --memory 1.7GiB --json --refine-out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = r.Json();
  ASSERT_TRUE(j["refinement"].is_array()) << j["refinement"];
  ASSERT_FALSE(j["refinement"].empty());
  int layers = 0;
  for (const nlohmann::json& x : j["refinement"]) {
    layers += x["layers"].get<int>();
    ASSERT_TRUE(x["refined"].get<bool>()) << x;
    EXPECT_LE(x["kiwi"]["seconds"].get<double>(), x["baseline"]["seconds"].get<double>() * (1 + 1e-9)) << x;
    EXPECT_LE(x["kiwi"]["peak_memory_bytes"].get<int64_t>(), x["baseline"]["peak_memory_bytes"].get<int64_t>()) << x;
    const std::string stem = dir + "/layer" + std::to_string(x["first_layer"].get<int>());
    auto sim = RunKiwi("simulate " + stem + ".plan.json " + stem + ".graph.json --json");
    ASSERT_EQ(sim.exit_code, 0) << sim.err;
    const nlohmann::json replay = sim.Json();
    EXPECT_TRUE(replay["claims"]["peak_memory_bytes_matches"].get<bool>()) << replay;
    EXPECT_TRUE(replay["claims"]["iteration_seconds_matches"].get<bool>()) << replay;
    EXPECT_EQ(replay["peak_memory_bytes"], x["kiwi"]["peak_memory_bytes"]);
  }
  EXPECT_EQ(layers, 4);  // every layer of the default model has its strategy's row
  auto text = RunKiwi("plan --memory 1.7GiB");
  EXPECT_NE(text.out.find("Operator-level refinement (KIWI)"), std::string::npos) << text.out;
  auto off = RunKiwi("plan --no-refine --json");
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_TRUE(off.Json()["refinement"].is_null());
  for (const std::string& bad : std::vector<std::string>{"plan --no-refine --refine-out " + dir, "plan --refine-seconds 0",
                                                         "plan --refine-out " + dir + "/layer0.plan.json/below"}) {
    auto refused = RunKiwi(bad);
    EXPECT_EQ(refused.exit_code, 2) << bad;
    EXPECT_EQ(CountLines(refused.err), 1) << bad << ": " << refused.err;
  }
}

// --compare-to: the user's Megatron-LM arguments or torchtitan config simulated beside the planners, at
// their batch, and never faster than kiwi's best; --megatron-out and --torchtitan-out write the fastest
// plan each framework can run, which reads back through --compare-to to the same throughput.
TEST(Cli, PlanComparesToFrameworkConfigsAndWritesThem) {
  const std::string yours = std::string(KIWI_TEST_DATA_DIR) + "/megatron/gpt_4_layers_tp2.sh";
  const std::string args = (TempDir() / "megatron_args.txt").string();
  const std::string toml = (TempDir() / "torchtitan.toml").string();
  auto r = RunKiwi("plan --no-refine --json --compare-to " + yours + " --megatron-out " + args + " --torchtitan-out " + toml);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = r.Json();
  EXPECT_EQ(j["global_batch"].get<int64_t>(), 8);
  const nlohmann::json& mine = j["candidates"].back();
  EXPECT_EQ(mine["name"], "yours (gpt_4_layers_tp2.sh)");
  ASSERT_TRUE(mine["fits"].get<bool>());
  EXPECT_EQ(mine["layers"][0]["name"], "TP2xZeRO1-DP4+CKPT");
  EXPECT_LE(mine["throughput_samples_per_second"].get<double>(), j["best"]["throughput_samples_per_second"].get<double>());
  EXPECT_GT(j["candidates"][0]["throughput_samples_per_second"].get<double>(),
            mine["throughput_samples_per_second"].get<double>());  // kiwi's own search beats it
  // Each written file is the named planner's plan: read back, the same throughput.
  ASSERT_EQ(j["exports"].size(), 2u);
  for (const nlohmann::json& e : j["exports"]) {
    const std::string planner = e["planner"];
    double written = 0.0;
    for (const auto& c : j["candidates"])
      if (c["name"] == planner) written = c["throughput_samples_per_second"];
    EXPECT_GT(written, 0.0) << e;
    EXPECT_NE(e["best_not_expressible"].get<std::string>().find("runs one strategy in every layer"), std::string::npos) << e;
    auto back = RunKiwi("plan --no-refine --json --compare-to " + e["file"].get<std::string>());
    ASSERT_EQ(back.exit_code, 0) << back.err;
    EXPECT_DOUBLE_EQ(back.Json()["candidates"].back()["throughput_samples_per_second"].get<double>(), written) << e;
  }
  // Too little memory for it: its row says what it needs.
  auto tight = RunKiwi("plan --no-refine --json --memory 900MiB --compare-to " + yours);
  ASSERT_EQ(tight.exit_code, 0) << tight.err;
  EXPECT_FALSE(tight.Json()["candidates"].back()["fits"].get<bool>());
  EXPECT_GT(tight.Json()["candidates"].back()["smallest_peak_bytes"].get<int64_t>(), int64_t{900} << 20);
  // kiwi simulate replays a configuration on the same model and cluster to the numbers of its row, and
  // each written file to its planner's.
  auto replay = RunKiwi("simulate " + yours + " --json");
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_DOUBLE_EQ(replay.Json()["throughput_samples_per_second"].get<double>(),
                   mine["throughput_samples_per_second"].get<double>());
  EXPECT_EQ(replay.Json()["level"], "layer");
  for (const nlohmann::json& e : j["exports"]) {
    auto again = RunKiwi("simulate " + e["file"].get<std::string>() + " --json");
    ASSERT_EQ(again.exit_code, 0) << again.err;
    for (const auto& c : j["candidates"]) {
      if (c["name"] == e["planner"]) {
        EXPECT_DOUBLE_EQ(again.Json()["throughput_samples_per_second"].get<double>(),
                         c["throughput_samples_per_second"].get<double>()) << e;
      }
    }
  }
  const std::string three = (TempDir() / "tp3.sh").string();
  std::ofstream(three) << "--tensor-model-parallel-size 3 --micro-batch-size 1 --global-batch-size 8\n";
  for (const std::string& bad : std::vector<std::string>{"plan --compare-to " + yours + " --batch 16",
                                                         "plan --compare-to " + yours + " --batch auto",
                                                         "plan --compare-to " + three, "plan --compare-to /no/such.sh",
                                                         "simulate " + three, "simulate " + toml + " --cluster a100-nvlink-ib-16"}) {
    auto refused = RunKiwi(bad);
    EXPECT_EQ(refused.exit_code, 2) << bad;
    EXPECT_EQ(CountLines(refused.err), 1) << bad << ": " << refused.err;
  }
}

TEST(Cli, PlanReplaysOnTheModelItWasMadeFor) {
  const std::string path = (TempDir() / "bert_plan.json").string();
  auto planned = RunKiwi("plan --model bert --layers 6 --hidden 256 --heads 4 --seq 128 --batch 32 "
                         "--cluster rtx-titan-pcie-8 --json --out " + path);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  auto sim = RunKiwi("simulate " + path + " --json");  // no model flags: the plan's own are used
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  auto j = sim.Json();
  EXPECT_TRUE(j["claims"]["peak_memory_bytes_matches"].get<bool>());
  EXPECT_TRUE(j["claims"]["iteration_seconds_matches"].get<bool>());
  EXPECT_EQ(j["throughput_samples_per_second"], planned.Json()["best"]["throughput_samples_per_second"]);
}

// --attention is part of the model: a plan made with materialized attention records it and replays on
// the same model (the bf16 default would be fused, a different peak); bad values exit 2 in one line.
TEST(Cli, AttentionKernelIsRecordedInThePlanAndChecked) {
  const std::string path = (TempDir() / "materialized_plan.json").string();
  const std::string model = "--model gpt --layers 2 --hidden 256 --heads 4 --seq 512 --batch 8 --dtype bf16 ";
  auto materialized = RunKiwi("plan --uniform " + model + "--attention materialized --json --out " + path);
  ASSERT_EQ(materialized.exit_code, 0) << materialized.err;
  EXPECT_NE(testing::Slurp(path).find("\"attention\": \"materialized\""), std::string::npos) << testing::Slurp(path);
  auto sim = RunKiwi("simulate " + path + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_EQ(sim.Json()["peak_memory_bytes"], materialized.Json()["best"]["peak_memory_bytes"]);
  auto fused = RunKiwi("plan --uniform " + model + "--json");
  ASSERT_EQ(fused.exit_code, 0) << fused.err;
  // One layer's 5as^2b of scores per micro-batch: fused plans of the same shape need less.
  EXPECT_LT(fused.Json()["plans"][0]["peak_memory_bytes"].get<int64_t>(),
            materialized.Json()["plans"][0]["peak_memory_bytes"].get<int64_t>());
  for (const std::string bad : {"plan --attention flash", "plan --model t5 --attention fused", "plan --model mlp --attention fused"}) {
    auto r = RunKiwi(bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_EQ(CountLines(r.err), 1) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("attention"), std::string::npos) << bad << ": " << r.err;
  }
}

// --vocab is part of the model: a plan records it and replays on the same vocabulary (nanoGPT's 50,304
// against GPT-2's 50,257: two vocab x hidden matrices more); image models refuse it in one line.
constexpr const char* kSmallGpt = "--model gpt --layers 2 --hidden 256 --heads 4 --seq 128 --batch 8 ";

// A model flag a plan must record: `kiwi plan` with it writes `fragment` into the plan file, and the
// plan replays (`kiwi simulate`) on the same model, its claimed peak matching.
void ExpectRecordedAndReplayed(const std::string& flag, const std::string& fragment) {
  const std::string path = (TempDir() / "model_flag_plan.json").string();
  auto made = RunKiwi(std::string("plan ") + kSmallGpt + flag + " --json --out " + path);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_NE(testing::Slurp(path).find(fragment), std::string::npos) << testing::Slurp(path);
  auto sim = RunKiwi("simulate " + path + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>());
}

TEST(Cli, VocabularyIsRecordedInThePlan) {
  ExpectRecordedAndReplayed("--vocab 50304", "\"vocab\": 50304");
  const std::string model = kSmallGpt;
  auto plain = RunKiwi("graph " + model + "--json");
  auto wider = RunKiwi("graph " + model + "--vocab 50304 --json");
  ASSERT_EQ(wider.exit_code, 0) << wider.err;
  // fp32 weights and Adam's two moments: 12 bytes a parameter
  EXPECT_EQ(wider.Json()["persistent_bytes"].get<int64_t>() - plain.Json()["persistent_bytes"].get<int64_t>(),
            2 * 47 * 256 * 12);
  auto vit = RunKiwi("plan --model vit --vocab 10");
  EXPECT_EQ(vit.exit_code, 2);
  EXPECT_EQ(CountLines(vit.err), 1) << vit.err;
  EXPECT_NE(vit.err.find("--vocab"), std::string::npos) << vit.err;
}

// --dropout 0 (a model trained without dropout, as the distributed runtime and Llama-style recipes do):
// the plan records it, its replay prices the same model, and no dropout mask is saved for backward.
TEST(Cli, DropoutIsRecordedInThePlan) {
  ExpectRecordedAndReplayed("--dropout 0", "\"dropout\": 0");
  const std::string model = kSmallGpt;
  auto with = RunKiwi("graph " + model + "--json");
  auto without = RunKiwi("graph " + model + "--dropout 0 --json");
  ASSERT_EQ(without.exit_code, 0) << without.err;
  // Saved for backward with dropout: per layer 1-byte masks of [8, 128, 256] (the attention output's and
  // the MLP's) and of the [8, 4, 128, 128] probabilities, and the dropped probabilities in fp32 (the
  // context's batched matmul reads them, the softmax's backward its own output); the embeddings' mask.
  EXPECT_EQ(with.Json()["saved_activation_bytes"].get<int64_t>() - without.Json()["saved_activation_bytes"].get<int64_t>(),
            2 * (2 * 8 * 128 * 256 + 8 * 4 * 128 * 128 + 4 * 8 * 4 * 128 * 128) + 8 * 128 * 256);
  for (const std::string bad : {"--dropout 1", "--dropout -0.5"}) {
    auto r = RunKiwi("graph " + model + bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_EQ(CountLines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("--dropout: must be in [0, 1)"), std::string::npos) << r.err;
  }
}

// --capacity-factor of a mixture of experts: `kiwi hybrid` records it and its replay prices the same
// model; more slots per expert cost time; a dense model, 0 or beyond 64 are one-line refusals.
TEST(Cli, CapacityFactorIsRecordedInThePlan) {
  const std::string model = "--model mixtral-8x7b --layers 2 --hidden 256 --heads 8 --seq 64 --batch 16 --vocab 512 "
                            "--ffn 512 --cluster dgx-h100 ";
  const std::string path = (TempDir() / "capacity_plan.json").string();
  auto padded = RunKiwi("hybrid " + model + "--capacity-factor 1.5 --quiet --json --out " + path);
  ASSERT_EQ(padded.exit_code, 0) << padded.err;
  EXPECT_NE(testing::Slurp(path).find("\"capacity_factor\": 1.5"), std::string::npos) << testing::Slurp(path);
  auto sim = RunKiwi("simulate " + path + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>());
  EXPECT_TRUE(sim.Json()["claims"]["iteration_seconds_matches"].get<bool>());
  auto even = RunKiwi("graph " + model + "--json");
  auto more = RunKiwi("graph " + model + "--capacity-factor 1.5 --json");
  ASSERT_EQ(more.exit_code, 0) << more.err;
  EXPECT_GT(more.Json()["compute_cost"].get<double>(), even.Json()["compute_cost"].get<double>());
  EXPECT_EQ(more.Json()["parameters"], even.Json()["parameters"]);
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {std::string(kSmallGpt) + "--capacity-factor 1.25", "--capacity-factor: not applicable to model gpt"},
           {model + "--capacity-factor 0", "--capacity-factor: must be in (0, 64]"},
           {model + "--capacity-factor 65", "--capacity-factor: must be in (0, 64]"}}) {
    auto r = RunKiwi("graph " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags;
    EXPECT_EQ(CountLines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  }
}

TEST(Cli, SimulateOperatorPlanOnAGraphFile) {
  if (!std::filesystem::exists(kRemat + "vgg16_b256_train.json")) GTEST_SKIP() << "no ../shared/benchmarks";
  const std::string plan = WriteTemp("empty_op_plan.json", R"({"kiwi_plan_version": 1, "operator": {}})");
  auto sim = RunKiwi("simulate " + plan + " " + kRemat + "vgg16_b256_train.json --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  auto graph = RunKiwi("graph " + kRemat + "vgg16_b256_train.json --json");
  EXPECT_EQ(sim.Json()["peak_memory_bytes"], graph.Json()["checkpoint_all_peak_bytes"]);
}

// A plan made from a graph file replays on that file without naming it again; a plan whose graph is
// not a file here (and that names no model) is refused, not replayed on the default GPT.
TEST(Cli, SimulateFindsThePlansGraphFile) {
  const std::string graph = WriteTemp("tiny_graph.json", "");
  ASSERT_EQ(RunKiwi("graph --model mlp --export " + graph).exit_code, 0);
  const std::string plan = (TempDir() / "tiny_remat_plan.json").string();
  auto remat = RunKiwi("remat " + graph + " --budget 1GiB --quiet --json --out " + plan);
  ASSERT_EQ(remat.exit_code, 0) << remat.err;
  auto sim = RunKiwi("simulate " + plan + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_EQ(sim.Json()["peak_memory_bytes"], remat.Json()["peak_memory_bytes"]);
  EXPECT_TRUE(sim.Json()["claims"]["peak_memory_bytes_matches"].get<bool>());
  const std::string elsewhere = WriteTemp("moved_plan.json",
      R"({"kiwi_plan_version": 1, "graph": "/nonexistent/g.json", "operator": {}})");
  auto r = RunKiwi("simulate " + elsewhere);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("moved_plan.json: graph: "), std::string::npos) << r.err;
}

// An empty graph is trivially scheduled by every solver (nothing to compute), as `kiwi graph` and
// `kiwi joint` already describe it.
TEST(Cli, RematOfAnEmptyGraphIsTheEmptySchedule) {
  const std::string graph = WriteTemp("empty_graph.json", R"({"kiwi_graph_version": 1, "nodes": []})");
  for (const char* solver : {"auto", "ilp", "heuristic", "lp-round", "checkpoint-all"}) {
    auto r = RunKiwi("remat " + graph + " --budget 1GiB --quiet --json --solver " + solver);
    ASSERT_EQ(r.exit_code, 0) << solver << ": " << r.err;
    EXPECT_TRUE(r.Json()["schedule"].empty()) << solver;
    EXPECT_EQ(r.Json()["peak_memory_bytes"], 0) << solver;
  }
}

// Found by ExitProperty (issue 18): CLI11 saturates out-of-range integers, so the refusal named a
// number the user never typed.
TEST(Cli, OutOfRangeIntegersAreQuotedAsTyped) {
  auto r = RunKiwi("plan --hidden 99999999999999999999");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--hidden: 99999999999999999999 is too large"), std::string::npos) << r.err;
  r = RunKiwi("graph --model gpt --layers 2x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--layers: 2x is not a whole number"), std::string::npos) << r.err;
}

// Hostile bytes in a flag or a file name are quoted as escapes, never echoed raw to the terminal
// (issue 18, item 14): an ESC sequence or a stray 0xff stays \x1b / \xff in the one error line.
TEST(Cli, ErrorsQuoteHostileBytesAsEscapes) {
  // Real bytes inside single quotes (std::system's /bin/sh has no $'...' escapes).
  for (const std::string& args : {std::string("plan --model 'gp\x1b[31mt\xff'"),
                                  std::string("graph '/nonexistent/\x1b]0;title\x07.json'")}) {
    auto r = RunKiwi(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(CountLines(r.err), 1) << r.err;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\xff'), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\x07'), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("\\x1b"), std::string::npos) << r.err;
  }
}

// A result that cannot be written is not a success: one line on stderr, exit 2 (issue 18, item 9).
TEST(Cli, AnUnwritableStdoutFails) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const auto err = TempDir() / "full_stderr.txt";
  for (const std::string& redirect : {std::string(">/dev/full"), std::string(">&-")}) {
    const std::string cmd = std::string(KIWI_BINARY) + " graph --model mlp --json " + redirect + " 2>" + err.string();
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << redirect;
    EXPECT_EQ(WEXITSTATUS(status), 2) << redirect;
    const std::string message = testing::Slurp(err);
    EXPECT_EQ(CountLines(message), 1) << message;
    EXPECT_NE(message.find("standard output"), std::string::npos) << message;
  }
}

// --time-limit counts from the command's start: what reading and building took is not searched again.
TEST(CliFlags, TimeLimitCountsFromTheCommandsStart) {
  cli::SearchFlags flags;
  flags.time_limit_seconds = 5.0;
  EXPECT_GT(flags.SecondsLeft(), 4.0);
  EXPECT_LE(flags.SecondsLeft(), 5.0);
  flags.start -= std::chrono::seconds(3);
  EXPECT_LE(flags.SecondsLeft(), 2.0);
  flags.start -= std::chrono::seconds(10);
  EXPECT_DOUBLE_EQ(flags.SecondsLeft(), 0.01);  // past it: searches return at once with what they have
}

// --out and --export are checked when parsed, before any search: a FIFO, a device or a directory is
// refused with exit 2 naming the flag and the file, and left as it was.
TEST(Cli, OutputFlagsRefuseWhatIsNotAFileBeforeSearching) {
  const std::filesystem::path dir = TempDir() / "out_targets";
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "pipe").string();
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  for (const std::string& command :
       {"hybrid --model gpt --layers 2 --out " + fifo, "remat --model gpt --layers 2 --budget-fraction 0.9 --out " + fifo,
        "plan --model gpt --layers 2 --out " + fifo, "joint --model gpt --layers 2 --out " + fifo,
        "graph --model gpt --layers 2 --export " + fifo, std::string("hybrid --model gpt --layers 2 --galvatron-out /dev/null"),
        "graph --model gpt --layers 2 --export " + dir.string()}) {
    auto r = RunKiwi(command);
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.err;
    EXPECT_EQ(CountLines(r.err), 1) << command << ": " << r.err;  // no progress: nothing was searched
    EXPECT_NE(r.err.find("--"), std::string::npos) << r.err;
  }
  EXPECT_EQ(std::filesystem::status(fifo).type(), std::filesystem::file_type::fifo);
}

TEST(Cli, SimulateRejectsABrokenSchedule) {
  if (!std::filesystem::exists(kRemat + "vgg16_b256_train.json")) GTEST_SKIP() << "no ../shared/benchmarks";
  // Node 1 reads node 0, which was never computed.
  const std::string plan = WriteTemp("broken_plan.json",
      R"({"kiwi_plan_version": 1, "operator": {"schedule": [{"op": "compute", "node": 1}]}})");
  auto r = RunKiwi("simulate " + plan + " " + kRemat + "vgg16_b256_train.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(plan + ": operator.schedule[0]: "), std::string::npos) << r.err;
}

// Issue 18 item 14: what is wrong in a plan file is named by the file and the field's JSON path
// ("layer plan: layers[1]: ..." named no file; a typo in "model" was blamed on --model).
TEST(Cli, SimulateNamesThePlanFileAndField) {
  const std::string head = R"({"kiwi_plan_version": 1, "model": "gpt", "model_flags": {"layers": 2}, "cluster": "v100-nvlink-8",)";
  const std::string two = R"({"tp": 1, "dp": 8, "sdp": false, "checkpoint": false})";
  const std::string layers = R"("layer": {"layers": [)" + two + ", " + two + "], ";
  const std::string rest = R"("pp_degree": 1, "pp_partition": [2], "global_batch": 16, "micro_batches": 2, "pipeline": "1f1b"}})";
  ASSERT_EQ(RunKiwi("simulate " + WriteTemp("good_plan.json", head + layers + rest)).exit_code, 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {head + R"("layer": {"layers": [{"tp": 3, "dp": 8}, )" + two + "], " + rest, ": layer.layers[0]: tp 3 x dp 8"},
      {head + layers + R"("pp_degree": 1, "pp_partition": [2], "global_batch": 7, "micro_batches": 2, "pipeline": "1f1b"}})",
       ": layer.global_batch: 7"},
      {R"({"kiwi_plan_version": 1, "model": "gtp", "model_flags": {"layers": 2}, )" + layers + rest, ": model: unknown model 'gtp'"},
      {R"({"kiwi_plan_version": 1, "model": "gpt", "model_flags": {"layers": 3}, )" + layers + rest,
       ": layer.layers: has 2 strategies"},
      {R"({"kiwi_plan_version": 1, "model": "gpt", "model_flags": {"layers": 2}, "cluster": "v100", )" + layers + rest,
       ": cluster: unknown cluster 'v100'"},
      {R"({"kiwi_plan_version": 1, "model": "gpt", "model_flags": {"layers": 2}, "cluster": "dgx-h100:0", )" + layers + rest,
       ": cluster: 'dgx-h100:0': the node count"},
      {R"({"kiwi_plan_version": 1, "model": "gpt", "model_flags": {"layers": 2, "runtime": "fsdp1"}, )" + layers + rest,
       ": model_flags.runtime: 'fsdp1' is not one of kiwi, fsdp2"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = WriteTemp("named_plan_" + std::to_string(i) + ".json", cases[i].first);
    auto r = RunKiwi("simulate " + path);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(CountLines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(path + cases[i].second), std::string::npos) << r.err;
  }
  // Interleaved 1F1B: the stages list their chunks' layers; micro-batches not a multiple of the stages
  // are named (kiwi.torch.distributed does not run such plans; kiwi simulate prices them).
  const std::string four = R"({"kiwi_plan_version": 1, "model": "gpt", "model_flags": {"layers": 4}, "cluster": "v100-nvlink-8",
      "layer": {"layers": [{"dp": 4}, {"dp": 4}, {"dp": 4}, {"dp": 4}], "pp_degree": 2, "virtual_stages": 2,
      "pp_partition": [1, 1, 1, 1], "global_batch": 16, )";
  auto interleaved = RunKiwi("simulate " + WriteTemp("interleaved_plan.json", four + R"("micro_batches": 4}})"));
  EXPECT_EQ(interleaved.exit_code, 0) << interleaved.err;
  EXPECT_NE(interleaved.out.find("0-0,2-2"), std::string::npos) << interleaved.out;
  EXPECT_NE(interleaved.out.find("1-1,3-3"), std::string::npos) << interleaved.out;
  const std::string odd = WriteTemp("interleaved_odd_plan.json", four + R"("micro_batches": 1}})");
  auto refused = RunKiwi("simulate " + odd);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find(odd + ": layer.micro_batches: 1 is not a multiple of pp_degree 2"), std::string::npos)
      << refused.err;
  // The same cluster name given as a flag is the flag's fault.
  auto flag = RunKiwi("simulate " + WriteTemp("flag_plan.json", head + layers + rest) + " --cluster v100");
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.err.find("kiwi: error: --cluster: unknown cluster 'v100'"), std::string::npos) << flag.err;
}

// --runtime fsdp2 prices ZeRO-3 layers as PyTorch's FSDP2 holds them (cost::ZeroRuntime): the flag on a
// plan file, the plan's own model_flags.runtime (what kiwi plan --runtime writes) and a plan of kiwi's
// runtime agree on everything but the ZeRO-3 layers' buffers (two micro-batches: with one, the gradient
// shards arrive as the activations go); a runtime kiwi does not know is refused.
TEST(Cli, RuntimeFsdp2PricesZeroThreeAsFullyShardHoldsIt) {
  const std::string layers = R"("layer": {"layers": [{"dp": 8, "zero": 3}, {"dp": 8, "zero": 3}], "pp_degree": 1,
      "pp_partition": [2], "global_batch": 16, "micro_batches": 2}})";
  auto plan_with = [&](const std::string& flags) {
    return R"({"kiwi_plan_version": 1, "model": "gpt", "model_flags": {"layers": 2)" + flags +
           R"(}, "cluster": "v100-nvlink-8", )" + layers;
  };
  const std::string kiwi_plan = WriteTemp("zero3_plan.json", plan_with(""));
  auto peak = [](const testing::RunResult& r) { return r.Json()["peak_memory_bytes"].get<int64_t>(); };
  const testing::RunResult own = RunKiwi("simulate " + kiwi_plan + " --json");
  const testing::RunResult flag = RunKiwi("simulate " + kiwi_plan + " --runtime fsdp2 --json");
  const testing::RunResult recorded = RunKiwi("simulate " + WriteTemp("zero3_fsdp2_plan.json", plan_with(R"(, "runtime": "fsdp2")")) + " --json");
  ASSERT_EQ(own.exit_code, 0) << own.err;
  ASSERT_EQ(flag.exit_code, 0) << flag.err;
  ASSERT_EQ(recorded.exit_code, 0) << recorded.err;
  EXPECT_GT(peak(flag), peak(own));
  EXPECT_EQ(peak(recorded), peak(flag));
  EXPECT_EQ(flag.Json()["iteration_seconds"], own.Json()["iteration_seconds"]);
  // The stage's split says where the difference is: its buffers.
  auto buffers = [](const testing::RunResult& r) {
    return r.Json()["stages"][0]["memory_bytes"]["buffers"].get<int64_t>();
  };
  EXPECT_EQ(buffers(flag) - buffers(own), peak(flag) - peak(own));
  const testing::RunResult bad = RunKiwi("simulate " + kiwi_plan + " --runtime fsdp1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(CountLines(bad.err), 1) << bad.err;
  EXPECT_NE(bad.err.find("--runtime: 'fsdp1' is not one of kiwi, fsdp2"), std::string::npos) << bad.err;
}

// Under --runtime fsdp2 (kiwi.torch.parallelize) sequence parallelism saves each column-parallel group's
// gathered input whole on every TP rank (LayerProfile::column_input_bytes_per_sample); Megatron's (kiwi's
// runtime) saves its shard. Same time, more activations, nothing else; without SP the two agree.
TEST(Cli, RuntimeFsdp2KeepsSequenceParallelColumnInputsWhole) {
  auto plan = [](bool sp) {
    return WriteTemp(sp ? "sp_plan.json" : "tp_plan.json",
                     std::string(R"({"kiwi_plan_version": 1, "model": "gpt", "model_flags": {"layers": 2},
      "cluster": "v100-nvlink-8", "layer": {"layers": [{"tp": 4, "dp": 2, "sequence_parallel": )") +
                         (sp ? "true" : "false") + R"(}, {"tp": 4, "dp": 2, "sequence_parallel": )" +
                         (sp ? "true" : "false") + R"(}], "pp_degree": 1, "pp_partition": [2], "global_batch": 16,
      "micro_batches": 2}})");
  };
  auto memory = [](const testing::RunResult& r, const char* part) {
    return r.Json()["stages"][0]["memory_bytes"][part].get<int64_t>();
  };
  for (bool sp : {false, true}) {
    const testing::RunResult own = RunKiwi("simulate " + plan(sp) + " --json");
    const testing::RunResult torch = RunKiwi("simulate " + plan(sp) + " --runtime fsdp2 --json");
    ASSERT_EQ(own.exit_code, 0) << own.err;
    ASSERT_EQ(torch.exit_code, 0) << torch.err;
    EXPECT_EQ(torch.Json()["iteration_seconds"], own.Json()["iteration_seconds"]);
    if (sp) {
      EXPECT_GT(memory(torch, "activations"), memory(own, "activations"));
    } else {
      EXPECT_EQ(memory(torch, "activations"), memory(own, "activations"));
    }
  }
}

}  // namespace
}  // namespace kiwi

namespace kiwi {
namespace {

// `kiwi profile` runs the Python command; without a Python to run it says so in one line (exit 2).
TEST(CliProfile, NamesThePythonItCannotRun) {
  ::setenv("KIWI_PYTHON", "/nonexistent/python3", 1);
  auto r = testing::RunKiwi("profile --out profile.json");
  ::unsetenv("KIWI_PYTHON");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("kiwi: error: profile: cannot run /nonexistent/python3"), std::string::npos) << r.err;
  EXPECT_EQ(testing::CountLines(r.err), 1) << r.err;
}

}  // namespace
}  // namespace kiwi
