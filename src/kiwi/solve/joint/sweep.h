#pragma once
// The KIWI paper's experiments (§4) as reusable sweeps for the bench drivers (bench/joint_*.cpp):
// a model on a mesh, every method at a grid of memory budgets, each point replayed by the simulator
// and normalized to Alpa without a memory limit (Fig. 5, 6, Table 1); solver times (Fig. 7).
//
//   SweepConfig c;
//   c.model = "gpt"; c.layers = 4; c.mesh = {2, 4};
//   Result<Sweep> s = RunBudgetSweep(c);
//   std::cout << SweepTable(*s);
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiwi/solve/joint/joint.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::joint {

struct SweepConfig {
  std::string model = "gpt";       // gpt (decoder), bert (encoder), mlp
  int layers = 4;                  // transformer layers; mlp: linear layers
  int64_t hidden = 5120, heads = 40, seq = 1024, batch = 16;  // GPT-3 13B layer, KIWI §4.1
  std::vector<int64_t> mlp_widths;  // mlp only: widths (overrides layers/hidden)
  std::string activation = "gelu";  // mlp only
  bool embeddings = false;         // KIWI evaluates transformer layers (a pipeline stage), no embeddings
  std::string cluster = "v100-nvlink-8";
  std::vector<int> mesh = {2, 4};
  double bandwidth_scale = 1.0;
  int budget_points = 6;           // evenly spaced from the least budget any method meets to Alpa's peak
  std::vector<JointMethod> methods = {JointMethod::kKiwi, JointMethod::kAlpa, JointMethod::kCkptDots,
                                      JointMethod::kMegatronSelective};
  double time_limit_seconds = 120.0;  // per method and budget
  double relative_gap = 0.01;
  int threads = 1;
  std::function<void(const std::string&)> progress;
};

// One method at one budget, as reported.
struct SweepEntry {
  bool feasible = false;
  double seconds = 0.0;      // simulated iteration time
  double normalized = 0.0;   // seconds / Alpa's without a memory limit
  int64_t peak = 0;
  double recompute_seconds = 0.0, communication_seconds = 0.0;
  int64_t recomputations = 0;
  double solve_seconds = 0.0;
  bool optimal = false;
  double mean_shards = 0.0;  // average number of devices each op's work is split over
  bool from_portfolio = false;  // KIWI returned a baseline's plan (outside the reduced family), faster
  std::string note;
};

struct SweepPoint {
  int64_t budget = 0;
  std::map<JointMethod, SweepEntry> entries;
};

struct Sweep {
  SweepConfig config;
  int32_t ops = 0;
  double alpa_unlimited_seconds = 0.0;
  int64_t alpa_unlimited_peak = 0;
  std::map<JointMethod, int64_t> smallest_budget;  // the least budget each method meets
  int64_t reduced_least = 0;                       // the least budget of KIWI's reduced family alone
  std::vector<SweepPoint> points;                  // ascending budgets
};

// A method's name in tables and plots ("KIWI", "Alpa", "ckpt-dots + Alpa", ...).
std::string SweepMethodLabel(JointMethod method);

// The training graph of a config (no embeddings unless asked: layers + loss).
Result<ir::Graph> SweepGraph(const SweepConfig& config);

// Errors: bad config (model, mesh), solver failures.
Result<Sweep> RunBudgetSweep(const SweepConfig& config);

// Solves one method at one budget (KIWI with the baselines solved first as its portfolio when they are
// among `config.methods`); returns every method's entry.
Result<SweepPoint> RunBudgetPoint(const SweepConfig& config, const ir::Graph& graph, int64_t budget,
                                  double alpa_unlimited_seconds);

// Markdown tables: normalized latency per budget and method ("-" where a method has no plan; "*" where
// KIWI's answer is a baseline's plan), the least budget per method, and the largest speedup of KIWI
// over each baseline (KIWI's own plans only, and counting the portfolio).
std::string SweepTable(const Sweep& sweep);
// The largest ratio baseline latency / KIWI latency over budgets where both have plans (with
// own_plans_only, only where KIWI's plan is its reduced formulation's).
std::map<JointMethod, double> LargestSpeedups(const Sweep& sweep, bool own_plans_only = false);

}  // namespace kiwi::solve::joint
