// Seeded random corruptions of valid files: every reader (kiwi graph, node-link and random-layered
// graphs, plans, clusters, profiles, IOPDDL instances, HF configs, Galvatron's config, profiles and
// hardware files) either accepts the result or returns a one-line kBadInput error naming the source,
// and never crashes. CI runs them under ASan/UBSan too (issue 18: fuzzing in CI).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "io_test_util.h"
#include "kiwi/io/cluster_json.h"
#include "kiwi/io/galvatron_config.h"
#include "kiwi/io/galvatron_profiles.h"
#include "kiwi/io/graph_json.h"
#include "kiwi/io/iopddl_json.h"
#include "kiwi/io/plan_json.h"
#include "kiwi/models/hf_config.h"

namespace kiwi::io {
namespace {

// One random edit: overwrite a byte, delete or duplicate a span, or insert a JSON-significant token.
std::string Mutate(std::string text, std::mt19937& rng) {
  static const char* kTokens[] = {"-", "0", "1e400", "\"", "[", "]", "{", "}", ",", ":", "null", "-1", "1.5",
                                  "9223372036854775808", "\"x\"", "[]", "{}", "true"};
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  const size_t at = pick(text.size());
  switch (rng() % 4) {
    case 0: text[at] = static_cast<char>(rng() & 0xff); break;
    case 1: text.erase(at, 1 + pick(16)); break;
    case 2: text.insert(at, text.substr(pick(text.size()), 1 + pick(32))); break;
    default: text.insert(at, kTokens[pick(std::size(kTokens))]); break;
  }
  return text;
}

// The error names one of `sources` (a reader of several files names the one at fault).
template <typename T>
void ExpectAcceptedOrOneLineError(const Result<T>& r, const std::vector<std::string>& sources, const std::string& text) {
  if (r.ok()) return;
  const std::string& m = r.error().message;
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_TRUE(std::any_of(sources.begin(), sources.end(), [&](const std::string& s) { return m.rfind(s + ": ", 0) == 0; }))
      << m << "\n" << text;
}

template <typename T>
void ExpectAcceptedOrOneLineError(const Result<T>& r, const std::string& source, const std::string& text) {
  ExpectAcceptedOrOneLineError(r, std::vector<std::string>{source}, text);
}

void FuzzText(const std::string& base, const std::function<void(const std::string&)>& parse, int rounds = 400) {
  ASSERT_FALSE(base.empty());
  std::mt19937 rng(20240601);
  for (int i = 0; i < rounds; ++i) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) text = Mutate(std::move(text), rng);
    parse(text);
  }
}

void Fuzz(const std::string& fixture, const std::function<void(const std::string&)>& parse) {
  FuzzText(testing::ReadAll(testing::FixturePath(fixture)), parse);
}

std::string Galvatron(const std::string& name) {
  return testing::ReadAll(std::string(KIWI_TEST_DATA_DIR) + "/galvatron/" + name);
}

TEST(Mutations, GraphReaders) {
  for (const char* fixture : {"tiny_graph.json", "checkmate_sparse_ids.json", "random_layered_string_order.json"})
    Fuzz(fixture, [](const std::string& text) { ExpectAcceptedOrOneLineError(ParseGraphJson(text, "m.json"), "m.json", text); });
}

TEST(Mutations, PlanClusterAndProfileReaders) {
  Fuzz("plan_example.json",
       [](const std::string& text) { ExpectAcceptedOrOneLineError(ParsePlanJson(text, "m.json"), "m.json", text); });
  Fuzz("cluster_example.json",
       [](const std::string& text) { ExpectAcceptedOrOneLineError(ParseClusterJson(text, "m.json"), "m.json", text); });
  Fuzz("profile_example.json",
       [](const std::string& text) { ExpectAcceptedOrOneLineError(ParseProfileJson(text, "m.json"), "m.json", text); });
}

TEST(Mutations, IopddlInstances) {
  const std::string example = std::string(KIWI_SHARED_DIR) + "/benchmarks/iopddl/example.json";
  if (!std::filesystem::exists(example)) GTEST_SKIP() << "no ../shared/benchmarks";
  FuzzText(testing::ReadAll(example),
           [](const std::string& text) { ExpectAcceptedOrOneLineError(ParseIopddlJson(text, "m.json"), "m.json", text); });
}

TEST(Mutations, HuggingFaceConfigs) {
  for (const char* config : {"gpt2.json", "llama.json", "t5.json", "swin.json"}) {
    const std::string text = testing::ReadAll(std::string(KIWI_TEST_DATA_DIR) + "/hf/" + config);
    ASSERT_TRUE(models::ParseHfConfig(text, config).ok()) << config;  // the seed itself is a valid config
    FuzzText(text, [](const std::string& mutated) {
      ExpectAcceptedOrOneLineError(models::ParseHfConfig(mutated, "m.json"), "m.json", mutated);
    }, 300);
  }
}

TEST(Mutations, GalvatronConfigAndProfiles) {
  FuzzText(Galvatron("galvatron_config_bert_example.json"), [](const std::string& text) {
    ExpectAcceptedOrOneLineError(ParseGalvatronConfig(text, "m.json", {.num_devices = 8}), "m.json", text);
  });
  const std::string computation = Galvatron("computation_profiling_fp32_test.json");
  const std::string memory = Galvatron("memory_profiling_fp32_test.json");
  GalvatronModelOptions o;
  o.layers_per_type = {2, 3};
  o.seq = 512;
  FuzzText(memory, [&](const std::string& text) {
    ExpectAcceptedOrOneLineError(ParseGalvatronModel({computation, text, "c.json", "m.json"}, o),
                                 std::vector<std::string>{"c.json", "m.json"}, text);
  }, 300);
  FuzzText(computation, [&](const std::string& text) {
    ExpectAcceptedOrOneLineError(ParseGalvatronModel({text, memory, "c.json", "m.json"}, o),
                                 std::vector<std::string>{"c.json", "m.json"}, text);
  }, 300);
}

TEST(Mutations, GalvatronHardwareFiles) {
  testing::ScratchDir dir;
  const std::string allreduce = Galvatron("allreduce_bandwidth_1nodes_8gpus_per_node.json");
  const std::string p2p = Galvatron("p2p_bandwidth_1nodes_8gpus_per_node.json");
  const std::string overlap = Galvatron("overlap_coefficient.json");
  cost::Cluster base;
  base.name = "base";
  base.num_nodes = 1;
  base.devices_per_node = 8;
  const std::vector<std::string> paths = {dir.File("a.json"), dir.File("p.json"), dir.File("o.json")};
  for (size_t which = 0; which < 3; ++which) {
    FuzzText(which == 0 ? allreduce : which == 1 ? p2p : overlap, [&](const std::string& text) {
      for (size_t k = 0; k < 3; ++k)
        std::ofstream(paths[k], std::ios::binary) << (k == which ? text : k == 0 ? allreduce : k == 1 ? p2p : overlap);
      ExpectAcceptedOrOneLineError(ReadGalvatronHardware(paths[0], paths[1], paths[2], base), paths, text);
    }, 150);
  }
}

}  // namespace
}  // namespace kiwi::io
