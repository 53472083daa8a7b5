#include "kiwi/solve/remat/lp_rounding.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "kiwi/solve/milp/solve.h"
#include "kiwi/solve/remat/checkmate_ilp.h"
#include "kiwi/solve/remat/checkmate_schedule.h"
#include "kiwi/solve/remat/optimal_r.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::remat {
namespace {

using Clock = std::chrono::steady_clock;


void Say(const RematOptions& options, const std::string& line) {
  if (options.progress) options.progress(line);
}

constexpr double kLpNoise = 1e-9;  // LP values this close to 0 count as 0

struct Candidate {
  StageSolution sol;
  double cost = 0.0;
  std::string origin;
};

// Keeps `sol` if it fits and is strictly cheaper than the best so far.
void Consider(const StageGraph& g, int64_t budget, StoredSets s, std::string origin, std::optional<Candidate>& best,
              int& fitting) {
  StageSolution sol = OptimalR(g, std::move(s));
  if (StagePeakMemory(g, sol) > budget) return;
  ++fitting;
  const double cost = StageCost(g, sol);
  if (!best || cost < best->cost) best = Candidate{std::move(sol), cost, std::move(origin)};
}

// Rounds one LP solution every way the plan says into `best`; returns how many were tried.
int RoundAll(const StageGraph& g, int64_t budget, const std::vector<std::vector<double>>& s_lp, const RoundingPlan& plan,
             const std::string& label, std::optional<Candidate>& best, int& fitting) {
  for (double threshold : plan.thresholds)
    Consider(g, budget, RoundStored(s_lp, threshold), fmt::format("{}threshold {:g}", label, threshold), best, fitting);
  for (int d = 0; d < plan.random_draws; ++d)
    Consider(g, budget, RandomlyRoundStored(s_lp, plan.seed + static_cast<uint64_t>(d)),
             fmt::format("{}random draw {}", label, d), best, fitting);
  return static_cast<int>(plan.thresholds.size()) + plan.random_draws;
}

}  // namespace

StoredSets RoundStored(const std::vector<std::vector<double>>& s_lp, double threshold) {
  StoredSets s(s_lp.size());
  for (size_t t = 0; t < s_lp.size(); ++t)
    for (double v : s_lp[t]) s[t].push_back(v > threshold + kLpNoise ? 1 : 0);
  return s;
}

StoredSets RandomlyRoundStored(const std::vector<std::vector<double>>& s_lp, uint64_t seed) {
  std::mt19937_64 rng(seed);
  StoredSets s(s_lp.size());
  for (size_t t = 0; t < s_lp.size(); ++t)
    for (double v : s_lp[t]) {
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // uniform in [0, 1)
      s[t].push_back(v > kLpNoise && u < v ? 1 : 0);
    }
  return s;
}

namespace {

// Solves the LP at each budget scale in turn until a rounding fits or time runs out; the full-budget
// LP gives the bound, or proves infeasibility. The model starts at the real budget's first
// over-budget stage throughout: the scaled LPs only steer the roundings, judged at the real budget.
std::optional<Candidate> SweepBudgets(const RematProblem& problem, const StageGraph& g, CheckmateModel& cm,
                                      const RematOptions& options, const RoundingPlan& plan, Clock::time_point start,
                                      LpRounding& out) {
  std::optional<Candidate> best;
  for (size_t attempt = 0; attempt < plan.budget_scales.size() && !best; ++attempt) {
    const double scale = plan.budget_scales[attempt];
    const double left = options.time_limit_seconds - SecondsSince(start);
    if (attempt > 0 && left <= 0.0) break;
    SetMemoryBudget(cm, static_cast<int64_t>(std::floor(static_cast<double>(problem.budget) * scale)));
    milp::SolveOptions so;
    so.relax_integrality = true;
    so.time_limit_seconds = std::max(0.0, left);
    so.threads = options.threads;
    Result<milp::SolveResult> lp = milp::Solve(cm.model, so);
    if (!lp) {
      out.note = lp.error().message;
      break;
    }
    if (lp->termination != milp::Termination::kOptimal) {
      out.lp_infeasible = attempt == 0 && lp->termination == milp::Termination::kInfeasible;
      if (attempt == 0)
        out.note = out.lp_infeasible         ? "LP relaxation infeasible: no frontier-advancing schedule fits the budget"
                   : !lp->not_loaded.empty() ? "LP relaxation " + lp->not_loaded
                                             : "time limit before the LP relaxation was solved";
      break;
    }
    if (attempt == 0) out.lp_bound = lp->objective;
    int fitting = 0;
    const std::string label = attempt == 0 ? "" : fmt::format("LP at {:g} x budget, ", scale);
    const int tried = RoundAll(g, problem.budget, ReadStoredValues(cm, lp->values), plan, label, best, fitting);
    Say(options, fmt::format("lp-round: LP at {:g} x budget = {:.6g}{} ({:.2f} s); {} of {} roundings fit{}", scale,
                             lp->objective, attempt == 0 ? ", a proven lower bound" : "", SecondsSince(start), fitting,
                             tried, best ? fmt::format(", best {:.6g}", best->cost) : std::string()));
  }
  return best;
}

}  // namespace

LpRounding RoundLpRelaxation(const RematProblem& problem, const StageGraph& g, const RematOptions& options,
                             const RoundingPlan& plan) {
  const Clock::time_point start = Clock::now();
  LpRounding out;
  const int32_t first_stage = FirstOverBudgetStage(g, problem.budget);
  if (std::optional<std::string> why = WhyNotBuildCheckmate(g, first_stage, options.time_limit_seconds)) {
    out.note = "LP not built: " + *why;
    return out;
  }
  CheckmateModel cm = BuildCheckmateModel(problem, g, {.first_stage = first_stage});
  std::optional<Candidate> best = SweepBudgets(problem, g, cm, options, plan, start, out);
  if (!best && out.lp_bound) {  // a safety net, labelled as such: keep every tensor until its last use
    int fitting = 0;
    Consider(g, problem.budget, CheckpointAllStages(g).S, "checkpoint-all fallback", best, fitting);
  }
  if (best) {
    out.note = fmt::format("best rounding: {}", best->origin);
    out.best = std::move(best->sol);
  } else if (out.note.empty()) {
    out.note = "no rounding fits the budget";
  }
  return out;
}

Result<RematResult> SolveLpRounding(const RematProblem& problem, const cost::CostModel& cost_model,
                                    const RematOptions& options, const RoundingPlan& plan) {
  const Clock::time_point start = Clock::now();
  RematResult partial;
  partial.solver = "lp-round";
  if (const int64_t floor = MemoryLowerBound(problem); floor > problem.budget) {
    partial.note = fmt::format("budget {} is below the memory lower bound {}", problem.budget, floor);
    Say(options, "lp-round: " + partial.note);
    return partial;
  }
  const StageGraph g = MakeStageGraph(problem);
  LpRounding rounding = RoundLpRelaxation(problem, g, options, plan);
  partial.lower_bound = rounding.lp_bound;
  partial.note = rounding.note;
  if (!rounding.best) {
    Say(options, "lp-round: " + partial.note);
    partial.solve_seconds = SecondsSince(start);
    return partial;
  }
  Result<RematResult> result =
      FinishResult(problem, cost_model, StageSchedule(problem, g, *rounding.best), std::move(partial));
  if (result) result->solve_seconds = SecondsSince(start);
  return result;
}

}  // namespace kiwi::solve::remat
