#include "kiwi/solve/wcsp/toulbar2.h"
#include "kiwi/util/elapsed.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace kiwi::solve::wcsp {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

using Clock = std::chrono::steady_clock;

Status Validate(const WcspProblem& p) {
  for (size_t i = 0; i < p.unary.size(); ++i)
    if (p.unary[i].empty()) return BadInput(fmt::format("wcsp: variable {} has an empty domain", i));
  for (size_t e = 0; e < p.binary.size(); ++e) {
    const BinaryCost& b = p.binary[e];
    const auto n = static_cast<int32_t>(p.unary.size());
    if (b.u < 0 || b.v < 0 || b.u >= n || b.v >= n || b.u == b.v)
      return BadInput(fmt::format("wcsp: binary cost {} joins variables {} and {} (of {})", e, b.u, b.v, n));
    if (b.cost.size() != p.unary[Z(b.u)].size() * p.unary[Z(b.v)].size())
      return BadInput(fmt::format("wcsp: binary cost {} has {} entries, expected {} x {}", e, b.cost.size(),
                                  p.unary[Z(b.u)].size(), p.unary[Z(b.v)].size()));
  }
  return Status::Ok();
}

// A private scratch directory, removed with its files when the solve ends.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() / fmt::format("kiwi-wcsp-{}-{}", getpid(), counter++);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

// toulbar2's .wcsp format: header (name, variables, largest domain, functions, upper bound), the
// domain sizes, then each table as "arity vars default tuples" followed by its tuples.
bool WriteWcsp(const WcspProblem& p, const std::string& file) {
  FILE* f = std::fopen(file.c_str(), "w");
  if (f == nullptr) return false;
  size_t largest = 1;
  for (const auto& d : p.unary) largest = std::max(largest, d.size());
  std::fprintf(f, "kiwi %zu %zu %zu %lld\n", p.unary.size(), largest, p.unary.size() + p.binary.size(),
               static_cast<long long>(p.forbidden));
  for (const auto& d : p.unary) std::fprintf(f, "%zu ", d.size());
  std::fprintf(f, "\n");
  auto clamp = [&](int64_t c) { return static_cast<long long>(std::min(std::max<int64_t>(c, 0), p.forbidden)); };
  for (size_t i = 0; i < p.unary.size(); ++i) {
    std::fprintf(f, "1 %zu 0 %zu\n", i, p.unary[i].size());
    for (size_t a = 0; a < p.unary[i].size(); ++a) std::fprintf(f, "%zu %lld\n", a, clamp(p.unary[i][a]));
  }
  for (const BinaryCost& b : p.binary) {
    const size_t nu = p.unary[Z(b.u)].size(), nv = p.unary[Z(b.v)].size();
    std::fprintf(f, "2 %d %d 0 %zu\n", b.u, b.v, nu * nv);
    for (size_t a = 0; a < nu; ++a)
      for (size_t c = 0; c < nv; ++c) std::fprintf(f, "%zu %zu %lld\n", a, c, clamp(b.cost[a * nv + c]));
  }
  return std::fclose(f) == 0;
}

bool WriteInitial(const std::vector<int32_t>& x, const std::string& file) {
  std::ofstream out(file);
  for (int32_t v : x) out << v << ' ';
  out << '\n';
  return static_cast<bool>(out);
}

// Runs argv with stdout and stderr to `log`; kills it at `deadline`. Returns false if it could not start.
bool RunUntil(const std::vector<std::string>& args, const std::string& log, Clock::time_point deadline) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;
  int status = 0;
  bool killed = false;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid || done < 0) break;
    if (!killed && Clock::now() >= deadline) {
      kill(pid, SIGKILL);  // its -timer should have stopped it; this is the backstop
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Reads toulbar2's output: the last "New solution:" line is followed by the assignment; "Optimum:"
// means proven; "Optimality gap: [lb, ub]" carries the bound.
Result<WcspResult> ParseLog(const WcspProblem& p, const std::string& log) {
  std::ifstream in(log);
  if (!in) return Internal("wcsp: toulbar2 left no output");
  WcspResult r;
  std::string line;
  bool next_is_solution = false, proven_infeasible = false, stopped = false;
  while (std::getline(in, line)) {
    if (next_is_solution) {
      std::istringstream values(line);
      std::vector<int32_t> x;
      int32_t v = 0;
      while (values >> v) x.push_back(v);
      bool in_domains = x.size() == p.unary.size();
      for (size_t i = 0; in_domains && i < x.size(); ++i) in_domains = x[i] >= 0 && Z(x[i]) < p.unary[i].size();
      if (in_domains) r.x = std::move(x);  // else not an assignment of this problem: ignored
      next_is_solution = false;
      continue;
    }
    if (line.rfind("New solution:", 0) == 0) next_is_solution = true;
    if (line.rfind("Optimum:", 0) == 0) r.optimal = true;
    if (line.rfind("No solution", 0) == 0) proven_infeasible = true;  // "No solution found by ..." / "... in N backtracks"
    if (line.find("Time limit") != std::string::npos || line.find("Aborting") != std::string::npos) stopped = true;
    const size_t gap = line.find("Optimality gap: [");
    if (gap != std::string::npos) r.lower_bound = std::stoll(line.substr(gap + 17));
  }
  if (r.x.empty()) r.optimal = false;
  r.termination = !r.x.empty()                    ? (r.optimal ? milp::Termination::kOptimal : milp::Termination::kFeasible)
                  : proven_infeasible && !stopped ? milp::Termination::kInfeasible
                                                  : milp::Termination::kNoSolution;
  return r;
}

}  // namespace

int64_t WcspCost(const WcspProblem& p, const std::vector<int32_t>& x) {
  auto add = [&](int64_t a, int64_t b) { return a >= p.forbidden - b ? p.forbidden : a + b; };
  int64_t cost = 0;
  for (size_t i = 0; i < p.unary.size(); ++i) cost = add(cost, p.unary[i][Z(x[i])]);
  for (const BinaryCost& b : p.binary) cost = add(cost, b.cost[Z(x[Z(b.u)]) * p.unary[Z(b.v)].size() + Z(x[Z(b.v)])]);
  return cost;
}

bool ToulbarAvailable(const std::string& executable) {
  ScratchDir dir;
  const std::string log = (dir.path / "version.log").string();
  if (!RunUntil({executable, "-h"}, log, Clock::now() + std::chrono::seconds(5))) return false;
  std::ifstream in(log);
  std::string first;
  std::getline(in, first);
  return first.find("toulbar2") != std::string::npos;
}

Result<WcspResult> SolveWcsp(const WcspProblem& problem, const WcspOptions& options) {
  const Clock::time_point start = Clock::now();
  KIWI_RETURN_IF_ERROR(Validate(problem));
  if (!options.initial.empty() && options.initial.size() != problem.unary.size())
    return BadInput(fmt::format("wcsp: initial assignment has {} values for {} variables", options.initial.size(),
                                problem.unary.size()));
  ScratchDir dir;
  const std::string model = (dir.path / "problem.wcsp").string();
  const std::string log = (dir.path / "toulbar2.log").string();
  if (!WriteWcsp(problem, model)) return Internal("wcsp: cannot write " + model);
  std::vector<std::string> args = {options.executable, model};
  if (!options.initial.empty()) {
    const std::string initial = (dir.path / "initial.sol").string();
    if (!WriteInitial(options.initial, initial)) return Internal("wcsp: cannot write " + initial);
    args.push_back(initial);
  }
  const double left = options.time_limit_seconds - std::chrono::duration<double>(Clock::now() - start).count();
  const int cpu_seconds = std::max(1, static_cast<int>(std::floor(left - 0.5)));  // it stops itself first
  args.insert(args.end(), {"-s=1", fmt::format("-timer={}", cpu_seconds)});
  const auto deadline =  // the backstop: toulbar2's own -timer (CPU seconds) should stop it before
      DeadlineAfter(Clock::now(), std::max(left, 1.0) + 0.5);
  if (!RunUntil(args, log, deadline)) return Internal("wcsp: cannot start " + options.executable);
  Result<WcspResult> r = ParseLog(problem, log);
  if (!r) return r;
  if (!r->x.empty()) r->cost = WcspCost(problem, r->x);
  if (r->optimal) r->lower_bound = r->cost;
  return r;
}

}  // namespace kiwi::solve::wcsp
