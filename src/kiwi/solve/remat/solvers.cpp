#include "kiwi/solve/remat/solvers.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <utility>

#include "kiwi/solve/remat/baselines.h"
#include "kiwi/solve/remat/chain.h"
#include "kiwi/solve/remat/chain_dp.h"
#include "kiwi/solve/remat/checkmate_ilp.h"
#include "kiwi/solve/remat/heuristic.h"
#include "kiwi/solve/remat/lp_rounding.h"
#include "kiwi/solve/remat/checkmate_schedule.h"
#include "kiwi/solve/remat/residency_bound.h"
#include "kiwi/util/elapsed.h"

namespace kiwi::solve::remat {
namespace {

constexpr std::array<std::pair<SolverKind, const char*>, 10> kNames = {{
    {SolverKind::kAuto, "auto"},
    {SolverKind::kIlp, "ilp"},
    {SolverKind::kLpRound, "lp-round"},
    {SolverKind::kChainDp, "chain-dp"},
    {SolverKind::kHeuristic, "heuristic"},
    {SolverKind::kCheckpointAll, "checkpoint-all"},
    {SolverKind::kSqrtN, "sqrtn"},
    {SolverKind::kGreedy, "greedy"},
    {SolverKind::kCkptDots, "ckpt-dots"},
    {SolverKind::kMegatronSelective, "megatron-selective"},
}};

constexpr int64_t kKickBinaries = 50'000;  // SolveAuto: where the heuristic's kicks take the MILP's time
constexpr double kBoundShareWithoutMilp = 0.8;  // SolveAuto: the residency bound's share of the limit then
constexpr double kBoundShareBeforeMilp = 0.1;   // SolveAuto: its share where the MILP or the chain DP follows

void Progress(const RematOptions& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

// The better of two results: feasible first, then cheaper; lower bounds combine (both are proven).
RematResult Better(RematResult a, RematResult b) {
  const bool a_wins = a.feasible != b.feasible ? a.feasible : a.cost <= b.cost;
  RematResult best = a_wins ? std::move(a) : std::move(b);
  const RematResult& other = a_wins ? b : a;
  if (other.lower_bound && (!best.lower_bound || *other.lower_bound > *best.lower_bound))
    best.lower_bound = other.lower_bound;
  return best;
}

// Auto: checkpoint-all when it fits; else the residency bound beside the heuristic's answer (instant;
// with kicks on graphs too large for the MILP), then the exact chain DP on linear chains (half the
// remaining time; it stops at its limit), else Checkmate's MILP warm-started from the heuristic where
// it is small enough to help. The best feasible schedule wins and the best proven bound is kept.
Result<RematResult> SolveAuto(const RematProblem& p, const cost::CostModel& cm, const RematOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  if (p.budget >= p.checkpoint_all_peak) return SolveCheckpointAll(p, cm);
  const StageGraph g = MakeStageGraph(p);
  // Past ~50k R/S binaries Checkmate's MILP neither improves the heuristic's schedule nor its bound
  // within a minute (ResNet-50 at 108k-116k, random_layered_n500 at 156k-189k; n250 at 17k-27k
  // solves): there the heuristic kicks its best schedule for nine tenths of the time and the MILP is
  // not run, unless the graph is a chain (the exact DP gets half of what the kicks leave).
  const int64_t binaries = CountStageBinaries(g, FirstOverBudgetStage(g, p.budget));
  std::string why_not_chain;
  const bool chain = ExtractChain(p, &why_not_chain).has_value();
  const bool milp_too_large = binaries > kKickBinaries;
  // The residency bound (a reduced model, O(edges) binaries): a bound also on graphs too large for
  // the MILP's root LP. It runs on one thread beside the heuristic (one thread too), which reads it
  // as soon as it is proven to stop kicking a schedule that meets it. Where nothing runs after the
  // kicks it has most of the time (captured GPT-2 at 0.6: a tenth, 6 s, ended inside CBC's root LP).
  const double bound_share = milp_too_large && !chain ? kBoundShareWithoutMilp : kBoundShareBeforeMilp;
  const double bound_seconds = o.time_limit_seconds * bound_share;
  std::atomic<double> proven{p.baseline_cost};
  double residency_seconds = 0.0;
  std::future<ResidencyBound> residency_future = std::async(std::launch::async, [&] {
    ResidencyBound bound = SolveResidencyBound(p, g, bound_seconds, 1);
    if (!bound.infeasible) proven.store(bound.bound);
    residency_seconds = SecondsSince(start);
    return bound;
  });
  HeuristicOptions search;
  if (milp_too_large) search.kick_seconds = (chain ? 0.75 : 0.9) * (o.time_limit_seconds - SecondsSince(start));
  search.growing_lower_bound = &proven;
  RematOptions heuristic_options = o;
  heuristic_options.time_limit_seconds = o.time_limit_seconds - SecondsSince(start);
  Result<RematResult> heuristic = SolveHeuristic(p, cm, heuristic_options, search);
  const ResidencyBound residency = residency_future.get();
  Progress(o, residency.infeasible ? fmt::format("residency bound: no schedule fits: {}", residency.note)
                                    : fmt::format("{}: {:g} in {:.2f} s", residency.note, residency.bound, residency_seconds));
  if (!heuristic) return heuristic.error();
  if (!heuristic->lower_bound || *heuristic->lower_bound < residency.bound) heuristic->lower_bound = residency.bound;
  if (heuristic->feasible && heuristic->cost <= residency.bound * (1 + 1e-9)) {  // nothing left to prove
    heuristic->optimal = true;
    heuristic->note += "; optimal: it meets the residency bound";
    heuristic->solver = "auto";
    return heuristic;
  }
  Progress(o, fmt::format("heuristic: {} cost {:g} in {:.2f} s", heuristic->feasible ? "feasible," : "infeasible,",
                          heuristic->cost, heuristic->solve_seconds));
  if (!heuristic->feasible) return heuristic;
  // What the heuristic left of the limit (it used to be at least 1 s: a 0.1 s limit took 1.2 s).
  auto remaining = [&] { return o.time_limit_seconds - SecondsSince(start); };
  if (remaining() <= 0.0) {
    heuristic->note += "; no time left for an exact search";
    heuristic->solver = "auto";
    return heuristic;
  }
  if (chain) {
    RematOptions dp_options = o;
    dp_options.time_limit_seconds = remaining() / 2;
    Progress(o, fmt::format("linear chain: exact dynamic program (up to {:.0f} s)", dp_options.time_limit_seconds));
    Result<RematResult> dp = SolveChainDp(p, cm, dp_options);
    if (dp) {
      RematResult best = Better(std::move(*dp), std::move(*heuristic));
      best.solver = "auto";
      return best;
    }
    if (dp.error().code != ErrorCode::kTimeLimit) return dp.error();
    Progress(o, "chain DP: time limit; continuing with the MILP");
  } else if (milp_too_large) {
    heuristic->note += fmt::format("; Checkmate's MILP not run ({} binaries: too large to help in the time)", binaries);
    heuristic->solver = "auto";
    return heuristic;
  }
  RematOptions ilp_options = o;
  ilp_options.time_limit_seconds = remaining();
  Result<RematResult> ilp = SolveCheckmateIlp(p, cm, ilp_options, &heuristic->schedule);
  if (!ilp) return ilp.error();
  if (!ilp->feasible) {  // not built or no schedule: the heuristic's stands, and the note says why
    const std::string why = ilp->note;
    RematResult best = Better(std::move(*ilp), std::move(*heuristic));
    best.note = fmt::format("{}; {}", best.note, why);
    best.solver = "auto";
    return best;
  }
  Progress(o, fmt::format("ilp: {} cost {:g}, bound {}", ilp->optimal ? "optimal," : "stopped,", ilp->cost,
                          ilp->lower_bound ? fmt::format("{:g}", *ilp->lower_bound) : "none"));
  RematResult best = Better(std::move(*ilp), std::move(*heuristic));
  best.solver = "auto";
  return best;
}

Result<RematResult> Dispatch(const RematProblem& p, const cost::CostModel& cm, SolverKind kind,
                             const RematOptions& o) {
  switch (kind) {
    case SolverKind::kAuto: return SolveAuto(p, cm, o);
    case SolverKind::kIlp: return SolveCheckmateIlp(p, cm, o);
    case SolverKind::kLpRound: return SolveLpRounding(p, cm, o);
    case SolverKind::kChainDp: return SolveChainDp(p, cm, o);
    case SolverKind::kHeuristic: return SolveHeuristic(p, cm, o);
    default: return SolveBaseline(p, cm, kind, o);
  }
}

}  // namespace

std::optional<SolverKind> ParseSolverKind(const std::string& name) {
  for (const auto& [kind, n] : kNames)
    if (name == n) return kind;
  return std::nullopt;
}

std::string SolverName(SolverKind kind) {
  for (const auto& [k, n] : kNames)
    if (k == kind) return n;
  return "unknown";
}

std::vector<std::string> SolverNames() {
  std::vector<std::string> names;
  for (const auto& entry : kNames) names.emplace_back(entry.second);
  return names;
}

Result<RematResult> SolveRemat(const RematProblem& problem, const cost::CostModel& cost_model, SolverKind kind,
                               const RematOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  Result<RematResult> r = Dispatch(problem, cost_model, kind, options);
  if (!r) return r;
  r->solver = SolverName(kind);
  r->solve_seconds = SecondsSince(start);
  // Every node runs at least once, so the no-rematerialization cost bounds any schedule's cost.
  if (!r->lower_bound || *r->lower_bound < problem.baseline_cost) r->lower_bound = problem.baseline_cost;
  if (r->feasible && r->cost <= *r->lower_bound * (1 + 1e-9)) r->optimal = true;
  if (!r->feasible) {
    r->optimal = false;
    r->schedule.clear();
    // Baselines know their own smallest budget (their peak), and so does the heuristic (the smallest
    // peak it found, which is auto's answer when nothing fits); the exact solvers ask the heuristic's
    // smallest-peak search, within what is left of the limit (it took 5 s more after a 5 s limit).
    const bool exact = kind == SolverKind::kIlp || kind == SolverKind::kLpRound || kind == SolverKind::kChainDp;
    const double left = std::max(options.time_limit_seconds - SecondsSince(start), 0.1 * options.time_limit_seconds);
    r->smallest_known_budget = !exact && r->peak_memory > 0 ? r->peak_memory : MinimumFeasiblePeak(problem, left);
    // A budget kiwi can meet that this solver did not (a time limit): not an infeasible request.
    if (r->smallest_known_budget <= problem.budget) r->smallest_known_budget = 0;
  }
  return r;
}

}  // namespace kiwi::solve::remat
