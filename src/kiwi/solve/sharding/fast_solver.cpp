#include "kiwi/solve/sharding/fast_solver.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "kiwi/solve/sharding/core_ilp.h"
#include "kiwi/solve/sharding/lagrangian.h"
#include "kiwi/solve/sharding/local_search.h"
#include "kiwi/solve/sharding/message_passing.h"
#include "kiwi/solve/sharding/priced_exact.h"
#include "kiwi/solve/sharding/reduction.h"

namespace kiwi::solve::sharding {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

// Tuning (measured on the contest instances, see bench/iopddl_bench.cpp).
constexpr int32_t kBlockSize = 50;              // nodes per tree block
constexpr int32_t kSweepsPerStep = 3;           // priced sweeps after each subgradient step
constexpr int64_t kPatience = 300;              // steps without a new incumbent before a restart
constexpr int32_t kKick = 20;                   // nodes perturbed at a restart
constexpr int64_t kStalledRestarts = 50;        // before an ILP: restarts without a new incumbent
constexpr int64_t kMaxEnumeration = 200'000;    // assignments searched exhaustively
constexpr int64_t kMaxIlpVariables = 150'000;   // cores up to this size also go to the ILP
constexpr double kHeuristicShareBeforeIlp = 0.3;
constexpr double kIlpShare = 0.5;               // of the time left after the first heuristic phase (0.7: Q 0.99-1.15x)
constexpr double kHeuristicShareBeforeExact = 0.15;  // larger cores: then the exact Lagrangian (0.35 before: N, T, S gained)
constexpr double kSecondsPerExactStep = 5.0;         // toulbar2 per priced subproblem
constexpr double kLocalSecondsPerExactStep = 3.0;    // priced local search after each
constexpr double kMinSecondsForExactStep = 1.5;      // toulbar2's limit is whole CPU seconds
constexpr double kRepairSeconds = 3.0;               // polish or repair of each exact minimiser
constexpr int64_t kRepairAttemptsWithoutFit = 3;     // repairs in a row that do not fit: stop repairing
constexpr int64_t kExactStepsWithoutAnswer = 3;      // toulbar2 steps in a row without an answer: local search only
constexpr double kBoundSecondsPerExactStep = 0.3;    // message passing's bound on each step's priced problem

// The warm start mapped onto the reduced problem where it fits, the greedy solution elsewhere.
std::vector<int32_t> InitialSolution(const ReducedProblem& p, const ShardingSolveOptions& options) {
  std::vector<int32_t> x = GreedyInitialSolution(p);
  if (!options.warm_start || options.warm_start->size() != Z(p.original_nodes)) return x;
  for (size_t r = 0; r < p.nodes.size(); ++r) {
    const int32_t want = (*options.warm_start)[Z(p.original[r])];
    const std::vector<int32_t>& keep = p.strategy_of[r];
    const auto it = std::find(keep.begin(), keep.end(), want);
    if (it != keep.end()) x[r] = static_cast<int32_t>(it - keep.begin());
  }
  return x;
}

class FastSearch {
 public:
  FastSearch(const ReducedProblem& p, const ShardingSolveOptions& o, const Deadline& d)
      : p_(p), options_(o), deadline_(d), phase_(d), ctx_(p, InitialSolution(p, o), phase_, o.seed), prices_(p) {}

  void Run();
  bool found() const { return !best_.empty() || (p_.nodes.empty() && best_cost_ < ir::kForbiddenCost); }
  bool optimal() const { return optimal_; }
  const std::vector<int32_t>& best() const { return best_; }
  double lower_bound() const { return lower_bound_; }
  std::string Note() const {
    return fmt::format("reduced to {} nodes, {} edges; {} Lagrangian steps, {} restarts, {} incumbents{}",
                       p_.nodes.size(), p_.edges.size(), steps_, restarts_, incumbents_, exact_note_);
  }

 private:
  bool Offer();
  void Restore(const std::vector<int32_t>& x);
  void FindFeasible();
  bool Repair(SubgradientPrices& prices);
  void Polish();
  void Restart();
  void LagrangianLoop(bool until_stalled);
  void Heuristic(bool until_stalled);
  bool TryEnumeration();
  void TryIlp(double seconds);
  void ExactLagrangian();
  void ImproveBound(MessagePassing& bound);

  const ReducedProblem& p_;
  const ShardingSolveOptions& options_;
  const Deadline& deadline_;
  Deadline phase_;  // the current phase's end (the search context watches it)
  SearchContext ctx_;
  SubgradientPrices prices_;
  std::vector<int32_t> best_;
  int64_t best_cost_ = ir::kForbiddenCost;
  double lower_bound_ = -1.0;
  double fitted_price_ = 0.0;  // the uniform price at which the last descent into the limit fitted
  int64_t steps_ = 0, restarts_ = 0, incumbents_ = 0;
  bool optimal_ = false;
  std::string exact_note_;
};

// Keeps the state's solution when it is feasible and better than the incumbent.
bool FastSearch::Offer() {
  const SearchState& st = ctx_.state;
  if (!st.Feasible() || st.Cost() >= best_cost_) return false;
  best_ = st.x();
  best_cost_ = st.Cost();
  ++incumbents_;
  if (options_.on_incumbent) options_.on_incumbent(best_cost_, deadline_.Elapsed());
  return true;
}

void FastSearch::Restore(const std::vector<int32_t>& x) {
  for (size_t r = 0; r < x.size(); ++r) {
    if (ctx_.state.x(static_cast<int32_t>(r)) == x[r]) continue;
    ctx_.state.Set(static_cast<int32_t>(r), x[r]);
    MarkDirty(ctx_, static_cast<int32_t>(r));
  }
}

// Uniform prices, ten times higher each round, until the priced optimum fits the limit; the price
// that fits is where the later repairs start.
void FastSearch::FindFeasible() {
  DescendIntoLimit(ctx_, prices_, kBlockSize, [&] { Offer(); }, &fitted_price_);
}

// From the current state, over the limit: priced into it (with `prices`, set uniform), then polished.
// True on a new incumbent.
bool FastSearch::Repair(SubgradientPrices& prices) {
  const int64_t before = best_cost_;
  if (DescendIntoLimit(ctx_, prices, kBlockSize, {}, &fitted_price_)) {
    Offer();
    Polish();  // also when the repaired state costs more than the incumbent: the polish may bring it below
  }
  return best_cost_ < before;
}

// Feasible-only block moves on the incumbent, under the current prices and under none.
void FastSearch::Polish() {
  for (int round = 0; round < 3 && !phase_.Passed(); ++round) {
    const int64_t moves = DescendFeasible(ctx_, &prices_.prices(), {.max_sweeps = 3, .block_size = kBlockSize}) +
                          DescendFeasible(ctx_, nullptr, {.max_sweeps = 3, .block_size = kBlockSize});
    Offer();
    if (moves == 0) break;
  }
}

// From the incumbent, perturbed, with the prices reset: the next subgradient climb.
void FastSearch::Restart() {
  ++restarts_;
  Restore(best_);
  Perturb(ctx_, kKick);
  std::fill(ctx_.dirty.begin(), ctx_.dirty.end(), 1);
  prices_.SetUniform(0.0);
}

// Subgradient steps on the usage prices, each followed by priced block-DP sweeps over the nodes
// whose price or neighbourhood changed; every feasible improvement is polished. After kPatience
// steps without one, a restart; `until_stalled` ends the loop after kStalledRestarts restarts in a
// row without a new incumbent (an exact method follows).
void FastSearch::LagrangianLoop(bool until_stalled) {
  int64_t since_improvement = 0, stalled = 0;
  while (!phase_.Passed() && !(until_stalled && stalled >= kStalledRestarts)) {
    ++steps_;
    prices_.Step(ctx_.state, static_cast<double>(best_cost_), 1.0);
    for (int32_t r : prices_.changed()) ctx_.dirty[Z(r)] = 1;
    DescendPriced(ctx_, &prices_.prices(), {.max_sweeps = kSweepsPerStep, .block_size = kBlockSize, .dirty_only = true});
    if (Offer()) {
      Polish();
      since_improvement = stalled = 0;
    } else if (++since_improvement >= kPatience) {
      since_improvement = 0;
      ++stalled;
      Restart();
    }
  }
}

// Tiny reduced problems are searched exhaustively: the answer is optimal.
bool FastSearch::TryEnumeration() {
  std::optional<ExactResult> e = EnumerateReduced(p_, kMaxEnumeration);
  if (!e) return false;
  optimal_ = true;
  exact_note_ = "; solved by enumeration";
  if (e->x.empty()) return true;  // nothing fits: the caller reports no solution
  Restore(e->x);
  Offer();
  lower_bound_ = static_cast<double>(best_cost_);
  return true;
}

// The ILP on the reduced core, warm-started from the incumbent, for at most `seconds`.
void FastSearch::TryIlp(double seconds) {
  std::optional<ExactResult> e =
      SolveReducedIlp(p_, best_, {.time_limit_seconds = seconds, .relative_gap = options_.relative_gap,
                                  .threads = 1, .max_variables = kMaxIlpVariables});
  if (!e) return;
  lower_bound_ = std::max(lower_bound_, e->lower_bound);
  exact_note_ = fmt::format("; core ILP {}", e->optimal ? "optimal" : "stopped");
  if (e->x.empty()) {
    // CBC's last answer before the time ran out, over the limit at a few segments: repaired by
    // priced descent (C: 84.10e9 over 5 segments, where the Lagrangian search was stuck at 113.7e9).
    if (e->overflowing.empty()) return;
    Restore(e->overflowing);
    if (Repair(prices_)) exact_note_ += " (its last answer repaired)";
    return;
  }
  Restore(e->x);
  Offer();
  optimal_ = e->optimal;
  if (optimal_) lower_bound_ = std::max(lower_bound_, static_cast<double>(best_cost_));
}

// L(lambda) at the current prices from message passing's bound on the priced problem (its messages
// carried over from the last step's prices). N: 183e9 where toulbar2's and the star bound gave 73e9.
void FastSearch::ImproveBound(MessagePassing& bound) {
  bound.SetPrices(prices_.prices());
  const MessagePassingBound b = bound.LowerBound(std::min(kBoundSecondsPerExactStep, deadline_.Left()));
  lower_bound_ = std::max(lower_bound_, LagrangianBound(p_, prices_.lambda(), b.lower_bound));
}

// Lagrangian steps whose subproblem is solved exactly (priced_exact.h): each minimiser becomes the
// state (kept and polished when it fits the limit, else repaired: priced into the limit with uniform
// prices of its own, which leave the subgradient's alone) and gives the subgradient; between them the
// priced local search runs from it for a while, which finds the feasible points near it. When the
// exact subproblem solver is not available, or finds nothing three steps in a row, the priced local
// search runs on alone until the deadline. Before each step, message passing raises the lower bound.
void FastSearch::ExactLagrangian() {
  double theta = 1.0;
  int64_t exact = 0, repaired = 0, failed_repairs = 0, unanswered = 0;
  SubgradientPrices repair_prices(p_);  // the repairs' uniform prices, apart from the subgradient's
  MessagePassing bound(p_);
  while (deadline_.Left() >= kMinSecondsForExactStep) {
    ImproveBound(bound);
    std::optional<PricedSolution> s = SolvePricedExactly(
        p_, prices_.prices(), ctx_.state.x(), {.seconds = kSecondsPerExactStep, .total_seconds = deadline_.Left()});
    if (!s) {
      // toulbar2 found nothing in time (S, now and then, on one step of 20): this step is the local
      // search's alone, and the next one's prices differ. It used to end the exact phase.
      if (++unanswered >= kExactStepsWithoutAnswer) break;
      phase_ = Deadline(Deadline::Clock::now(), std::min(kLocalSecondsPerExactStep, deadline_.Left()));
      LagrangianLoop(false);
      continue;
    }
    unanswered = 0;
    ++exact;
    // The last step's local phase has passed: the polish or repair gets one of its own, capped (on a
    // 16k-node core one repair is a priced descent over every node).
    phase_ = Deadline(Deadline::Clock::now(), std::min(kRepairSeconds, deadline_.Left()));
    Restore(s->x);
    if (Offer()) Polish();
    else if (!ctx_.state.Feasible() && failed_repairs < kRepairAttemptsWithoutFit) {
      Repair(repair_prices);
      const bool fits = ctx_.state.Feasible();
      repaired += fits ? 1 : 0;
      failed_repairs = fits ? 0 : failed_repairs + 1;  // none fitting in 3 s (T and R before repairs started from the fitted price): the time goes back to the search
    }
    Restore(s->x);
    const double value = prices_.Step(ctx_.state, static_cast<double>(best_cost_), theta);
    // Prices were rounded to integers: the exact minimiser's value is within one unit per node of L.
    if (s->optimal) lower_bound_ = std::max(lower_bound_, value - static_cast<double>(p_.nodes.size()));
    for (int32_t r : prices_.changed()) ctx_.dirty[Z(r)] = 1;
    theta = std::max(0.05, theta * 0.9);
    phase_ = Deadline(Deadline::Clock::now(), std::min(kLocalSecondsPerExactStep, deadline_.Left()));
    LagrangianLoop(false);
  }
  phase_ = deadline_;
  LagrangianLoop(false);
  if (exact > 0) exact_note_ += fmt::format("; {} exact Lagrangian steps, {} minimisers repaired into the limit", exact, repaired);
}

// Cost-only descent, feasibility, then the Lagrangian search from the cost-only optimum (lambda =
// 0: the subgradient climbs from the cheap side) until the phase ends.
void FastSearch::Heuristic(bool until_stalled) {
  if (!found()) {
    DescendPriced(ctx_, nullptr, {.max_sweeps = 100, .block_size = kBlockSize});
    Offer();
    const std::vector<int32_t> cheapest = ctx_.state.x();
    if (!found()) FindFeasible();
    if (!found()) return;
    Polish();
    Restore(cheapest);
    prices_.SetUniform(0.0);
  }
  LagrangianLoop(until_stalled);
}

void FastSearch::Run() {
  lower_bound_ = StarLowerBound(p_, prices_.lambda(), prices_.prices());
  if (p_.nodes.empty()) {  // the reductions decided everything: the one solution left is optimal
    optimal_ = true;
    Offer();
    return;
  }
  if (TryEnumeration()) return;
  const bool ilp = ModelSizeForIlp(p_) <= kMaxIlpVariables;
  const double first_share = ilp ? kHeuristicShareBeforeIlp : kHeuristicShareBeforeExact;
  phase_ = Deadline(Deadline::Clock::now(), first_share * deadline_.Left());
  Heuristic(ilp);
  phase_ = deadline_;
  if (!found()) {
    Heuristic(false);  // nothing feasible in the first phase: keep looking until the deadline
  } else if (!ilp) {
    ExactLagrangian();
  } else if (!deadline_.Passed()) {
    TryIlp(kIlpShare * deadline_.Left());
    if (!optimal_) Heuristic(false);
  }
  lower_bound_ = std::max(lower_bound_, StarLowerBound(p_, prices_.lambda(), prices_.prices()));
}

}  // namespace

Result<ShardingResult> SolveShardingFast(const ir::ShardingProblem& problem, const ShardingSolveOptions& options) {
  const Deadline deadline(Deadline::Clock::now(), options.time_limit_seconds);
  KIWI_RETURN_IF_ERROR(ir::ValidateShardingProblem(problem, problem.name.empty() ? "problem" : problem.name));
  const int64_t floor = ir::MinimumPeakUsage(problem);
  if (floor > problem.usage_limit)
    return Infeasible(fmt::format("usage_limit {} is below the minimum peak usage {}", problem.usage_limit, floor));
  Result<ReducedProblem> reduced = ReduceShardingProblem(problem);
  if (!reduced) return reduced.error();
  FastSearch search(*reduced, options, deadline);
  search.Run();
  if (!search.found() && search.optimal())
    return Infeasible(fmt::format("no strategy choice keeps usage within the limit {}", problem.usage_limit));
  if (!search.found()) return Error{ErrorCode::kTimeLimit, "fast solver: no feasible solution within the time limit"};
  ShardingResult result;
  result.solver = "fast";
  result.solution = ExpandSolution(*reduced, search.best());
  result.evaluation = ir::Evaluate(problem, result.solution);
  if (search.lower_bound() >= 0.0) {  // rounded down, with slack for floating-point error
    const double bound = std::floor(search.lower_bound() * (1.0 - 1e-12));
    result.lower_bound = std::min<int64_t>(static_cast<int64_t>(bound), result.evaluation.cost);
    if (search.optimal()) result.lower_bound = result.evaluation.cost;
    result.optimal = result.gap().value_or(1.0) <= options.relative_gap;
  }
  result.solve_seconds = deadline.Elapsed();
  result.note = search.Note();
  return result;
}

}  // namespace kiwi::solve::sharding
