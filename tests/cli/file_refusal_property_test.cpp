// Issue 18, item 14, as a property: when what is wrong is in a file, the refusal names the file. Each
// case is a valid file and a command that reads it; seeded edits change one JSON value at a time (a
// number to 0, -1 or a huge one, a string to another of the document's, an entry removed, an array
// shortened or lengthened), so the file still parses and the error, if any, is found after reading:
// by the model, the simulator, the cluster, the search. Every run ends with 0, 2, 3 or 4; a refusal (2)
// names one of the command's files, or a flag other than the one that gave the edited file (an edited
// cluster can make --batch impossible: "--batch 4: no uniform plan on the 24 devices of my-cluster").
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_kiwi.h"

namespace kiwi {
namespace {

using nlohmann::json;
using testing::CommandLine;
using testing::Lines;
using testing::RunKiwi;
using testing::TempDir;

using Tokens = std::vector<std::string>;

const std::string kData = KIWI_TEST_DATA_DIR;
const Tokens kSmallGpt = {"--model", "gpt", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "16"};

Tokens With(Tokens head, const Tokens& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// A file kiwi writes itself, made once per test process: `command` must write it to the path `{F}`.
std::string Written(const std::string& name, const Tokens& command) {
  const std::string path = (TempDir() / name).string();
  if (std::filesystem::exists(path)) return path;
  Tokens tokens = command;
  for (std::string& t : tokens)
    if (t == "{F}") t = path;
  const testing::RunResult r = RunKiwi(CommandLine(tokens));
  EXPECT_EQ(r.exit_code, 0) << CommandLine(tokens) << "\n" << r.err;
  return path;
}

std::string HybridPlan() {
  return Written("hybrid_plan.json", With(With({"hybrid"}, kSmallGpt), {"--batch", "8", "--time-limit", "2", "--out", "{F}"}));
}
std::string Graph() { return Written("graph.json", With(With({"graph"}, kSmallGpt), {"--batch", "4", "--export", "{F}"})); }
std::string RematPlanOfGraph() {
  return Written("remat_graph_plan.json", {"remat", Graph(), "--budget-fraction", "1", "--time-limit", "2", "--out", "{F}"});
}
std::string JointPlan() {
  return Written("joint_plan.json", {"joint", "--model", "gpt", "--layers", "1", "--hidden", "64", "--heads", "4", "--seq",
                                     "16", "--batch", "4", "--time-limit", "2", "--out", "{F}"});
}

void Collect(const json& j, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
  if (!at.empty()) out.push_back(at);
  if (j.is_object()) {
    for (const auto& item : j.items()) Collect(item.value(), at / item.key(), out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) Collect(j[i], at / i, out);
  }
}

void CollectStrings(const json& j, std::vector<std::string>& out) {
  if (j.is_string()) out.push_back(j.get<std::string>());
  if (j.is_structured())
    for (const auto& item : j.items()) CollectStrings(item.value(), out);
}

// One edit of one value of `doc` that keeps it JSON; says what it did.
std::string EditOneValue(json& doc, std::mt19937& rng) {
  std::vector<json::json_pointer> paths;
  Collect(doc, json::json_pointer(), paths);
  if (paths.empty()) return "nothing to edit";
  const json::json_pointer at = paths[rng() % paths.size()];
  json& parent = doc[at.parent_pointer()];
  json& value = doc[at];
  if (rng() % 7 == 0) {
    if (parent.is_object()) parent.erase(at.back());
    else parent.erase(parent.begin() + static_cast<std::ptrdiff_t>(std::stoul(at.back())));
    return "removed " + at.to_string();
  }
  if (value.is_boolean()) {
    value = !value.get<bool>();
  } else if (value.is_number()) {
    const double v = value.get<double>();
    const std::vector<json> numbers = {0, -1, 1, 2, 3, 7, 1e9, 0.5, 1e15, v * 2, v + 1, -v};
    value = numbers[rng() % numbers.size()];
  } else if (value.is_string()) {
    std::vector<std::string> strings = {"", "x", "RS", "SR", "RR"};
    CollectStrings(doc, strings);
    value = strings[rng() % strings.size()];
  } else if (value.is_array()) {
    if (!value.empty() && rng() % 2) value.erase(value.end() - 1);
    else value.push_back(value.empty() ? json(1) : json(value[0]));
  } else {
    value = rng() % 2 ? json::object() : json(0);
  }
  return "set " + at.to_string() + " to " + value.dump().substr(0, 80);
}

struct Case {
  std::string original;  // the valid file
  Tokens command;        // reads the edited copy at "{F}"
  std::string flag;      // the flag that gives the file, if any ("--cluster")
  uint32_t seed;
};

constexpr int kRuns = 40;

void CheckRefusalsNameTheFile(const Case& c) {
  std::ifstream in(c.original);
  ASSERT_TRUE(in) << c.original;
  const json original = json::parse(in);
  const char* offset = std::getenv("KIWI_PROPERTY_SEED");  // explores other edits than CI's, as in ExitProperty
  std::mt19937 rng(c.seed + (offset ? static_cast<uint32_t>(std::strtoul(offset, nullptr, 10)) : 0u));
  const std::string edited = (TempDir() / ("edited_" + std::filesystem::path(c.original).filename().string())).string();
  for (int run = 0; run < kRuns; ++run) {
    json doc = original;
    const std::string what = EditOneValue(doc, rng);
    std::ofstream(edited) << doc.dump();
    Tokens tokens = c.command;
    std::vector<std::string> files;
    for (std::string& t : tokens) {
      if (const size_t at = t.find("{F}"); at != std::string::npos) t.replace(at, 3, edited);
      for (size_t start = 0; start <= t.size();) {  // the command's files ("a.json,b.json" too)
        const size_t end = std::min(t.find(',', start), t.size());
        if (t.substr(start, end - start).find(".json") != std::string::npos) files.push_back(t.substr(start, end - start));
        start = end + 1;
      }
    }
    const testing::RunResult r = RunKiwi(CommandLine(tokens));
    SCOPED_TRACE("edit: " + what + "\nkiwi " + CommandLine(tokens) + "\nstderr:\n" + r.err);
    ASSERT_TRUE(r.exit_code == 0 || (r.exit_code >= 2 && r.exit_code <= 4)) << "exit " << r.exit_code;
    if (r.exit_code != 2) continue;
    const std::vector<std::string> lines = Lines(r.err);
    ASSERT_EQ(lines.size(), 1u);
    const std::string& line = lines.front();
    ASSERT_EQ(line.rfind("kiwi: error: ", 0), 0u);
    bool names_a_file = false;
    for (const std::string& f : files) names_a_file = names_a_file || line.find(f) != std::string::npos;
    // A flag given on this command line, not the one that gave the edited file.
    const std::string flag = line.substr(13, line.find_first_of(": ", 13) - 13);
    const bool names_another_flag = flag.rfind("--", 0) == 0 && flag != c.flag &&
                                    std::find(tokens.begin(), tokens.end(), flag) != tokens.end();
    EXPECT_TRUE(names_a_file || names_another_flag) << "the refusal names neither the file nor a flag given";
  }
}

TEST(FileRefusalProperty, LayerPlan) { CheckRefusalsNameTheFile({HybridPlan(), {"simulate", "{F}"}, "", 11}); }
TEST(FileRefusalProperty, OperatorPlanAndItsGraph) {
  CheckRefusalsNameTheFile({RematPlanOfGraph(), {"simulate", "{F}", Graph()}, "", 12});
  CheckRefusalsNameTheFile({Graph(), {"simulate", RematPlanOfGraph(), "{F}"}, "", 13});
}
TEST(FileRefusalProperty, ShardingPlan) { CheckRefusalsNameTheFile({JointPlan(), {"simulate", "{F}"}, "", 14}); }
TEST(FileRefusalProperty, Graph) {
  CheckRefusalsNameTheFile({Graph(), {"remat", "{F}", "--budget-fraction", "1", "--time-limit", "1"}, "", 15});
}
TEST(FileRefusalProperty, Cluster) {
  const std::string cluster = kData + "/io/cluster_example.json";
  CheckRefusalsNameTheFile({cluster, With(With({"plan"}, kSmallGpt), {"--batch", "4", "--time-limit", "1", "--cluster", "{F}"}),
                            "--cluster", 16});
  CheckRefusalsNameTheFile({cluster, {"simulate", HybridPlan(), "--cluster", "{F}"}, "--cluster", 17});
}
TEST(FileRefusalProperty, Profile) {
  CheckRefusalsNameTheFile({kData + "/io/profile_example.json",
                            With(With({"plan"}, kSmallGpt), {"--batch", "4", "--time-limit", "1", "--profile", "{F}"}),
                            "--profile", 18});
}
TEST(FileRefusalProperty, HfConfig) {
  CheckRefusalsNameTheFile({kData + "/hf/llama.json", {"hybrid", "--hf-config", "{F}", "--layers", "2", "--batch", "8",
                                                       "--time-limit", "1"}, "--hf-config", 19});
}
TEST(FileRefusalProperty, GalvatronProfiles) {
  const std::string computation = kData + "/galvatron/computation_profiling_fp32_test.json";
  const std::string memory = kData + "/galvatron/memory_profiling_fp32_test.json";
  const Tokens rest = {"--galvatron-layers", "2", "--batch", "8", "--time-limit", "1"};
  CheckRefusalsNameTheFile({computation, With({"hybrid", "--galvatron-profiles", "{F}," + memory}, rest), "", 20});
  CheckRefusalsNameTheFile({memory, With({"hybrid", "--galvatron-profiles", computation + ",{F}"}, rest), "", 21});
}

TEST(FileRefusalProperty, ShardingInstance) {
  const std::string example = std::string(KIWI_SHARED_DIR) + "/benchmarks/iopddl/example.json";
  if (!std::filesystem::exists(example)) {
    GTEST_SKIP() << "no ../shared/benchmarks";
  }
  CheckRefusalsNameTheFile({example, {"iopddl", "{F}", "--time-limit", "1"}, "", 22});
}

}  // namespace
}  // namespace kiwi
