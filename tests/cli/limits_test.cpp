// The limits contract (issue 18), one test per searching command on the large cases of the issue:
// each answers as its --time-limit says (it stops searching, keeps what it found and says so) and
// stays within the memory bound docs/robustness.md gives for it (peak RSS of the kiwi process).
// Wall time is asserted only by a 120 s guard (a hang, such as the 11 minutes a 10,000-layer hybrid
// search once took against 5 s): a tighter pass/fail time is flaky on a loaded 2-core machine, so
// bench/limits_bench.sh measures it. Skipped in sanitized builds, whose time and memory say nothing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "run_kiwi.h"

namespace kiwi {
namespace {

using testing::Slurp;
using testing::TempDir;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

constexpr unsigned kHangSeconds = 120;

struct Measured {
  int exit_code = -1;  // 128 + signal when killed
  std::string out;
  std::string err;
  double seconds = 0.0;
  int64_t peak_rss_bytes = 0;
};

// Runs kiwi with `args` in a child of its own (wait4 gives that child's peak RSS), killed by SIGALRM
// after kHangSeconds.
Measured RunMeasured(const std::vector<std::string>& args) {
  const std::string out = (TempDir() / "limits_stdout.txt").string();
  const std::string err = (TempDir() / "limits_stderr.txt").string();
  std::vector<std::string> argv_storage = {KIWI_BINARY};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = ::fork();
  if (child == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0) ::_exit(127);
    ::alarm(kHangSeconds);  // survives exec: the default action of SIGALRM ends the process
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  Measured m;
  int status = 0;
  struct rusage usage {};
  if (child < 0 || ::wait4(child, &status, 0, &usage) != child) return m;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  m.peak_rss_bytes = int64_t{usage.ru_maxrss} * 1024;  // Linux: KiB
  m.out = Slurp(out);
  m.err = Slurp(err);
  return m;
}

// The common checks: it returned (no hang guard), with one of `codes`, within `rss_bound` bytes.
void ExpectWithinLimits(const Measured& m, std::initializer_list<int> codes, int64_t rss_bound) {
  ::testing::Test::RecordProperty("wall_seconds", std::to_string(m.seconds));
  ::testing::Test::RecordProperty("peak_rss_mib", std::to_string(m.peak_rss_bytes >> 20));
  ASSERT_NE(m.exit_code, 128 + SIGALRM) << "did not return within " << kHangSeconds << " s";
  EXPECT_NE(std::find(codes.begin(), codes.end(), m.exit_code), codes.end()) << "exit " << m.exit_code << "\n" << m.err;
  EXPECT_LE(m.peak_rss_bytes, rss_bound) << "peak RSS " << (m.peak_rss_bytes >> 20) << " MiB";
}

constexpr int64_t kMiB = int64_t{1} << 20;

#define SKIP_IF_SANITIZED()                                                         \
  if (kSanitized) {                                                                 \
    GTEST_SKIP() << "a sanitized build's time and memory say nothing of the limits"; \
  }

// Hybrid and plan price a stack of identical layers from 4 of them (models::BuildSpecLayerModel; the
// whole 10,000-layer graph took 779 MB). The hybrid search's tables grow with layers, the stages it
// reaches and the strategies per layer: 354 MB at 10,000 GPT layers in 5 s with SP and ZeRO-1/2, 673 MB
// since selective recomputation made the choices per layer 3 of 2 (bound: 80 KB per layer + 64 MiB).
// It stops at the limit with the best plan so far.
TEST(Limits, HybridAt10000Layers) {
  SKIP_IF_SANITIZED();
  const Measured m = RunMeasured({"hybrid", "--model", "gpt", "--layers", "10000", "--hidden", "64", "--heads", "4",
                                  "--seq", "16", "--batch", "8", "--time-limit", "5", "--json"});
  ExpectWithinLimits(m, {0}, int64_t{10000} * 80 * 1000 + 64 * kMiB);
  const nlohmann::json j = nlohmann::json::parse(m.out);
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_TRUE(j["timed_out"].get<bool>()) << "the search ends at the limit, keeping its best plan";
}

TEST(Limits, PlanAt10000Layers) {
  SKIP_IF_SANITIZED();
  const Measured m = RunMeasured({"plan", "--layers", "10000", "--time-limit", "2"});
  // 1 KB per layer: the layer model's profiles; each uniform plan holds its one strategy (compact: 2.4 KB
  // per layer when all of them held one per layer, 147 MB once the strategy gained a recompute set).
  ExpectWithinLimits(m, {0, 3, 4}, int64_t{10000} * 1000 + 64 * kMiB);
}

// Remat: the Checkmate MILP of 24 GPT layers would take about 9 GB; it is not built when its estimate
// (230 B per nonzero, loaded at 0.7 GB/s) exceeds the memory available or the time left, so the
// bound is 0.7 GB per second of limit plus the graph (64 MiB here). The heuristic's schedule is kept.
TEST(Limits, RematOfALargeGraphKeepsTheHeuristicsSchedule) {
  SKIP_IF_SANITIZED();
  const Measured m = RunMeasured({"remat", "--model", "gpt", "--layers", "24", "--budget-fraction", "0.5",
                                  "--time-limit", "2", "--json"});
  ExpectWithinLimits(m, {0}, static_cast<int64_t>(0.7e9 * 2) + 64 * kMiB);
  const nlohmann::json j = nlohmann::json::parse(m.out);
  EXPECT_TRUE(j["feasible"].get<bool>());
  // Not run because its binaries are past what auto gives the MILP, not built because it would not load
  // in time, or (on a loaded machine) because the heuristic used it all.
  const std::string note = j["note"].get<std::string>();
  EXPECT_TRUE(note.find("MILP not run") != std::string::npos || note.find("MILP not built") != std::string::npos ||
              note.find("no time left") != std::string::npos)
      << note;
}

// Remat --max-batch: --time-limit bounds the whole search (it bounded each of about ten probes: 3.6 s
// against 1 s). It stops with the largest batch found so far and says so.
TEST(Limits, RematMaxBatchStopsAtTheLimit) {
  SKIP_IF_SANITIZED();
  const Measured m = RunMeasured({"remat", "--model", "gpt", "--layers", "12", "--budget-fraction", "0.5",
                                  "--max-batch", "--time-limit", "0.5", "--json"});
  ExpectWithinLimits(m, {0}, static_cast<int64_t>(0.7e9 * 0.5) + 64 * kMiB);
  const nlohmann::json j = nlohmann::json::parse(m.out);
  EXPECT_TRUE(j["timed_out"].get<bool>());
  EXPECT_GE(j["max_batch"].get<int64_t>(), 1);
}

// Joint: the problem and its specs take about 6 MB per GPT layer (1.07 GB at 200), the MILPs are
// bounded as remat's. With the limit spent before the search, the portfolio is skipped and KIWI
// answers without a MILP: here out of time (exit 4), naming a budget known to work.
TEST(Limits, JointAt200LayersWithTheLimitSpentInSetup) {
  SKIP_IF_SANITIZED();
  const Measured m = RunMeasured({"joint", "--model", "gpt", "--layers", "200", "--time-limit", "0.1"});
  ExpectWithinLimits(m, {4}, int64_t{200} * 6 * 1000 * 1000 + static_cast<int64_t>(0.7e9 * 0.1) + 64 * kMiB);
  EXPECT_NE(m.err.find("skipped, the time limit is reached"), std::string::npos) << m.err;
  EXPECT_NE(m.err.find("before the time limit (0.1 s); the smallest budget it is known to meet is"), std::string::npos)
      << m.err;
}

// kiwi-full builds its model for at most 40% of the time left (about 1.2 GB per second of building; a
// model that takes longer cannot load in the rest) and answers with the portfolio's plan when it
// cannot load (bound: 0.7 GB per second of limit + 64 MiB; 8 layers took 7.9 s and 2.6 GB at 5 s).
TEST(Limits, JointFullFormulationAt8Layers) {
  SKIP_IF_SANITIZED();
  const Measured m = RunMeasured({"joint", "--model", "gpt", "--layers", "8", "--method", "kiwi-full", "--time-limit", "2",
                                  "--json"});
  ExpectWithinLimits(m, {0}, static_cast<int64_t>(0.7e9 * 2) + 64 * kMiB);
  const nlohmann::json j = nlohmann::json::parse(m.out);
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_NE(j["note"].get<std::string>().find("the full MILP was not solved"), std::string::npos) << j["note"];
}

TEST(Limits, JointAt200Layers) {
  SKIP_IF_SANITIZED();
  const Measured m = RunMeasured({"joint", "--model", "gpt", "--layers", "200", "--time-limit", "5"});
  ExpectWithinLimits(m, {0, 3, 4}, int64_t{200} * 6 * 1000 * 1000 + static_cast<int64_t>(0.7e9 * 5) + 64 * kMiB);
}

// IOPDDL: about 2.6x the instance's JSON (instance A: 93 MB of JSON, 240 MB peak; bound 5x). The
// search stops at the limit with its best solution and a proven gap.
TEST(Limits, IopddlInstanceA) {
  SKIP_IF_SANITIZED();
  const std::string a = std::string(KIWI_SHARED_DIR) + "/benchmarks/iopddl/asplos-2025-iopddl-A.json.gz";
  if (!std::filesystem::exists(a)) {
    GTEST_SKIP() << "no ../shared/benchmarks";
  }
  const Measured m = RunMeasured({"iopddl", a, "--time-limit", "2", "--json"});
  ExpectWithinLimits(m, {0, 4}, int64_t{5} * 93 * 1000 * 1000);
  if (m.exit_code == 4) return;  // a loaded machine: reading took the time (it answers in 1 s when idle)
  const nlohmann::json j = nlohmann::json::parse(m.out);
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_FALSE(j["optimal"].get<bool>());
  EXPECT_GT(j["gap"].get<double>(), 0.0);
}

}  // namespace
}  // namespace kiwi
