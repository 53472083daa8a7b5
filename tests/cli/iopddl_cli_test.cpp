// `kiwi iopddl` against CONTRACT.md: fields, the contest's output format, exit codes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "run_kiwi.h"

namespace kiwi {
namespace {

using testing::CountLines;
using testing::RunKiwi;
using testing::Slurp;
using testing::TempDir;

const char* kSmall = R"({"problem": {"name": "small",
  "nodes": {"intervals": [[0, 4], [2, 6], [5, 9]], "costs": [[10, 1], [5, 7], [3]], "usages": [[1, 6], [2, 2], [4]]},
  "edges": {"nodes": [[0, 1], [1, 2]], "costs": [[0, 9, 9, 0], [2, 8]]},
  "usage_limit": 7}})";

std::string WriteProblem(const std::string& name, const std::string& text) {
  const std::string path = (TempDir() / name).string();
  std::ofstream(path) << text;
  return path;
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  return text.replace(text.find(from), from.size(), to);
}

TEST(IopddlCli, JsonHasTheContractFieldsAndTheOptimum) {
  // Node 0's cheap strategy 1 uses 6 and overlaps node 1 (2): 8 > 7, so the optimum is 10+5+3+0+2 = 20.
  auto r = RunKiwi("iopddl " + WriteProblem("small.json", kSmall) + " --solver ilp --json --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  for (const char* field : {"cost", "feasible", "solution", "lower_bound", "solve_seconds"})
    EXPECT_TRUE(j.contains(field)) << field;
  EXPECT_EQ(j["cost"].get<int64_t>(), 20);
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_EQ(j["solution"], nlohmann::json::parse("[0, 0, 0]"));
  EXPECT_EQ(j["lower_bound"].get<int64_t>(), 20);
  EXPECT_EQ(r.err, "");
}

TEST(IopddlCli, PrintsTheContestFormatWithoutJson) {
  const std::string out = (TempDir() / "small_solution.txt").string();
  auto r = RunKiwi("iopddl " + WriteProblem("small.json", kSmall) + " --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0, 0, 0]\n");
  EXPECT_EQ(Slurp(out), "[0, 0, 0]\n");
  EXPECT_NE(r.err.find("kiwi iopddl: small: cost 20"), std::string::npos) << r.err;
}

TEST(IopddlCli, SolvesThePublicExample) {
  const std::string example = std::string(KIWI_SHARED_DIR) + "/benchmarks/iopddl/example.json";
  if (!std::filesystem::exists(example)) GTEST_SKIP() << "no ../shared/benchmarks";
  for (const char* solver : {"ilp", "fast", "auto"}) {
    auto r = RunKiwi("iopddl " + example + " --json --quiet --time-limit 10 --solver " + solver);
    ASSERT_EQ(r.exit_code, 0) << solver << ": " << r.err;
    EXPECT_EQ(r.Json()["cost"].get<int64_t>(), 445) << solver;  // brute force over all 12 choices
  }
}

TEST(IopddlCli, BadFilesExitTwoNamingTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {Replace(kSmall, "\"usage_limit\": 7", "\"x\": 7"), "problem.usage_limit: missing"},
      {Replace(kSmall, "[1, 2]]", "[1, 5]]"), "problem.edges.nodes[1]: node 5 out of range [0, 3)"},
      {Replace(kSmall, "[0, 9, 9, 0]", "[0, 9, 9]"), "problem.edges.costs[0]: has 3 entries, expected 2 x 2 = 4"},
      {Replace(kSmall, "[2, 2]", "[2, -2]"), "problem.nodes.usages[1][1]: must be >= 0 (got -2)"},
      {"{\"problem\": {\"nodes\": ", "invalid JSON"},
  };
  for (const auto& [text, expected] : cases) {
    auto r = RunKiwi("iopddl " + WriteProblem("bad.json", text) + " --json");
    EXPECT_EQ(r.exit_code, 2) << expected;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_EQ(CountLines(r.err), 1) << r.err;
    EXPECT_EQ(r.out, "");
  }
  auto missing = RunKiwi("iopddl /nonexistent/p.json");
  EXPECT_EQ(missing.exit_code, 2);
  auto solver = RunKiwi("iopddl " + WriteProblem("small.json", kSmall) + " --solver magic");
  EXPECT_EQ(solver.exit_code, 2);
  EXPECT_NE(solver.err.find("--solver"), std::string::npos);
  auto seed = RunKiwi("iopddl " + WriteProblem("small.json", kSmall) + " --seed -1");  // would wrap silently
  EXPECT_EQ(seed.exit_code, 2);
  EXPECT_NE(seed.err.find("--seed: must be a non-negative integer (got -1)"), std::string::npos) << seed.err;
}

TEST(IopddlCli, ImpossibleLimitExitsThreeWithTheSmallestPeak) {
  // Smallest usages: node 0 -> 1, node 1 -> 2, node 2 -> 4: the peak is at least 1 + 2 = 3 and 2 + 4 = 6.
  auto r = RunKiwi("iopddl " + WriteProblem("tight.json", Replace(kSmall, "\"usage_limit\": 7", "\"usage_limit\": 5")));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("usage limit 5 is below 6"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(IopddlCli, ContestInstanceGBeatsXla) {
  const std::string g = std::string(KIWI_SHARED_DIR) + "/benchmarks/iopddl/asplos-2025-iopddl-G.json.gz";
  if (!std::filesystem::exists(g)) GTEST_SKIP() << "no ../shared/benchmarks";
  auto r = RunKiwi("iopddl " + g + " --json --quiet --time-limit 60");  // stops early once proven optimal
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.Json();
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_EQ(j["solution"].size(), 816u);
  EXPECT_LE(j["cost"].get<int64_t>(), 1264777);  // XLA's auto-sharding (../shared/benchmarks/README.md)
  EXPECT_LE(j["peak_usage"].get<int64_t>(), j["usage_limit"].get<int64_t>());
}

}  // namespace
}  // namespace kiwi
