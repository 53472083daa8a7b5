#include "kiwi/solve/registry.h"

#include <fmt/format.h>

#include <cmath>
#include <type_traits>
#include <utility>

#include "kiwi/sim/simulator.h"
#include "kiwi/solve/remat/solvers.h"

namespace kiwi::solve {
namespace {

using remat::RematResult;
using sharding::ShardingResult;

// found: a plan, optimal when proven; otherwise no plan when a limit stopped the search (or nothing beat
// the plan to beat), infeasible when the budget did.
Termination TerminationOf(bool found, bool proven, bool stopped) {
  if (found) return proven ? Termination::kOptimal : Termination::kFeasible;
  return stopped ? Termination::kNoPlan : Termination::kInfeasible;
}

// The outcome of a family's result; claims only for a plan. `result` is a reference so that it is moved
// from only here: the other arguments read it, in an order C++ leaves unspecified.
template <typename FamilyResult>
SolveOutcome Outcome(Termination termination, Claims claims, std::optional<double> bound, double seconds,
                     std::string notes, int64_t smallest_known_budget, FamilyResult&& result) {
  SolveOutcome out;
  out.termination = termination;
  if (out.HasPlan()) out.claims = claims;
  out.bound = bound;
  out.seconds = seconds;
  out.notes = std::move(notes);
  out.smallest_known_budget = smallest_known_budget;
  out.result = std::move(result);
  return out;
}

// Each family's adapter: the request in the family's options, the family's result in the outcome.
template <remat::SolverKind kind>
Result<SolveOutcome> RunRemat(const SolveRequest& request) {
  const auto& t = std::get<RematTarget>(request.target);
  Result<RematResult> r = remat::SolveRemat(
      t.problem, t.cost_model, kind,
      {.time_limit_seconds = request.time_limit_seconds, .threads = request.threads, .progress = request.progress});
  if (!r) return r.error();
  // Without a schedule SolveRemat leaves the smallest budget at 0 when kiwi meets the budget (a limit stopped this solver).
  return Outcome(TerminationOf(r->feasible, r->optimal, r->smallest_known_budget == 0), {r->cost, r->peak_memory},
                 r->lower_bound, r->solve_seconds, r->note, r->smallest_known_budget, *std::move(r));
}

template <sharding::ShardingSolverKind kind>
Result<SolveOutcome> RunSharding(const SolveRequest& request) {
  const auto& t = std::get<ShardingTarget>(request.target);
  sharding::ShardingSolveOptions o;
  o.time_limit_seconds = request.time_limit_seconds;
  o.threads = request.threads;
  o.seed = request.seed;
  if (request.progress)
    o.on_incumbent = [&](int64_t cost, double) { request.progress(fmt::format("cost {}", cost)); };
  Result<ShardingResult> r = sharding::SolveSharding(t.problem, kind, o);
  // A usage limit below every solution, or a time limit before any: terminations, not errors.
  if (!r && (r.error().code == ErrorCode::kInfeasible || r.error().code == ErrorCode::kTimeLimit))
    return Outcome(TerminationOf(false, false, r.error().code == ErrorCode::kTimeLimit), {}, std::nullopt, 0.0,
                   r.error().message, 0, ShardingResult{});
  if (!r) return r.error();
  std::optional<double> bound;
  if (r->lower_bound) bound = static_cast<double>(*r->lower_bound);
  return Outcome(TerminationOf(r->evaluation.feasible, r->optimal, false),
                 {static_cast<double>(r->evaluation.cost), r->evaluation.peak_usage}, bound, r->solve_seconds, r->note, 0,
                 *std::move(r));
}

template <joint::JointMethod method>
Result<SolveOutcome> RunJoint(const SolveRequest& request) {
  const auto& t = std::get<JointTarget>(request.target);
  joint::JointSolveOptions o;
  o.time_limit_seconds = request.time_limit_seconds;
  o.threads = request.threads;
  o.progress = request.progress;
  o.portfolio = t.portfolio;
  Result<joint::JointResult> r = joint::SolveJoint(t.problem, method, o);
  if (!r) return r.error();
  return Outcome(TerminationOf(r->feasible, r->optimal, r->timed_out), {r->sim.iteration_seconds, r->sim.peak_memory_bytes},
                 r->lower_bound_seconds, r->solve_seconds, r->note, r->smallest_known_budget, *std::move(r));
}

Result<SolveOutcome> RunLayers(const hybrid::LayerPlanner& planner, const SolveRequest& request) {
  hybrid::PlanRequest r = std::get<LayersTarget>(request.target).request;
  r.time_limit_seconds = request.time_limit_seconds;
  r.progress = request.progress;
  Result<hybrid::PlanCandidate> c = hybrid::RunNamed(planner, r);  // RunSolver judges it (CheckLayers)
  if (!c) return c.error();
  return Outcome(TerminationOf(c->found, c->proven, c->none_faster || c->timed_out),
                 {c->simulated.summary.iteration_seconds, c->simulated.summary.peak_memory_bytes}, std::nullopt, c->seconds,
                 c->none_faster ? fmt::format("none faster than {:.4g} samples/s", r.beat_samples_per_second) : "",
                 c->smallest_peak_bytes, *std::move(c));
}

template <hybrid::Method method>
Result<SolveOutcome> RunHybrid(const SolveRequest& request) {
  const auto& t = std::get<HybridTarget>(request.target);
  hybrid::HybridSearchOptions o = t.options;
  o.method = method;
  o.time_limit_seconds = request.time_limit_seconds;
  o.progress = request.progress;
  Result<hybrid::HybridSearchResult> r = hybrid::SearchHybridPlan(t.model, t.cluster, t.cost_model, o);
  if (!r) return r.error();
  return Outcome(TerminationOf(r->feasible, r->proven, r->timed_out),
                 {r->simulated.summary.iteration_seconds, r->simulated.summary.peak_memory_bytes}, std::nullopt,
                 r->search_seconds, "", r->smallest_feasible_memory, *std::move(r));
}

std::vector<Solver> MakeSolvers() {
  using remat::SolverKind;
  using sharding::ShardingSolverKind;
  using joint::JointMethod;
  std::vector<Solver> s = {
      {Family::kRemat, "auto", "checkpoint-all when it fits, else the residency bound beside the heuristic, then the chain DP or Checkmate's MILP (up to 50k binaries)", RunRemat<SolverKind::kAuto>},
      {Family::kRemat, "ilp", "Checkmate's MILP over frontier-advancing stages (CBC)", RunRemat<SolverKind::kIlp>},
      {Family::kRemat, "lp-round", "Checkmate's LP relaxation and two-phase rounding", RunRemat<SolverKind::kLpRound>},
      {Family::kRemat, "chain-dp", "exact dynamic program for linear chains", RunRemat<SolverKind::kChainDp>},
      {Family::kRemat, "heuristic", "greedy and local improvement, any graph", RunRemat<SolverKind::kHeuristic>},
      {Family::kRemat, "checkpoint-all", "keep every activation", RunRemat<SolverKind::kCheckpointAll>},
      {Family::kRemat, "sqrtn", "Chen et al.: a checkpoint every sqrt(n) nodes", RunRemat<SolverKind::kSqrtN>},
      {Family::kRemat, "greedy", "Chen et al.'s greedy segments", RunRemat<SolverKind::kGreedy>},
      {Family::kRemat, "ckpt-dots", "JAX checkpoint_dots: keep matmul outputs", RunRemat<SolverKind::kCkptDots>},
      {Family::kRemat, "megatron-selective", "Megatron's selective recompute of attention", RunRemat<SolverKind::kMegatronSelective>},
      {Family::kSharding, "auto", "reductions, DP and Lagrangian search; exact when the reduced problem is small", RunSharding<ShardingSolverKind::kAuto>},
      {Family::kSharding, "fast", "reductions, DP and Lagrangian local search", RunSharding<ShardingSolverKind::kFast>},
      {Family::kSharding, "ilp", "the exact ILP (CBC), small instances", RunSharding<ShardingSolverKind::kIlp>},
      {Family::kJoint, "kiwi", "KIWI's reduced joint MILP, warm-started from the baselines", RunJoint<JointMethod::kKiwi>},
      {Family::kJoint, "kiwi-full", "KIWI's full stage-based MILP, small graphs", RunJoint<JointMethod::kKiwiFull>},
      {Family::kJoint, "alpa", "Alpa: sharding only, checkpoint-all schedule", RunJoint<JointMethod::kAlpa>},
      {Family::kJoint, "ckpt-dots", "checkpoint_dots' keep set, then the sharding MILP", RunJoint<JointMethod::kCkptDots>},
      {Family::kJoint, "megatron-selective", "Megatron's selective keep set, then the sharding MILP", RunJoint<JointMethod::kMegatronSelective>},
  };
  using hybrid::Method;
  const std::vector<Solver> table_ii = {
      {Family::kHybrid, "kiwi", "Galvatron-BMW's search over every technique kiwi prices (ZeRO-1/2/3, SP, EP, CP, recompute sets, offload, interleaving)", RunHybrid<Method::kKiwi>},
      {Family::kHybrid, "bmw", "Galvatron-BMW: per-layer DP/SDP/TP/CKPT, bi-objective pipeline partitions", RunHybrid<Method::kBmw>},
      {Family::kHybrid, "base", "Galvatron-Base: Galvatron-BMW with even partitions", RunHybrid<Method::kBase>},
      {Family::kHybrid, "galvatron", "Galvatron: per-layer DP/SDP/TP, no checkpointing", RunHybrid<Method::kGalvatron>},
      {Family::kHybrid, "dp", "PyTorch DDP: pure data parallelism", RunHybrid<Method::kDp>},
      {Family::kHybrid, "sdp", "FSDP / ZeRO-3 over every device", RunHybrid<Method::kSdp>},
      {Family::kHybrid, "tp", "Megatron tensor parallelism", RunHybrid<Method::kTp>},
      {Family::kHybrid, "pp", "GPipe: pipeline parallelism, tuned micro-batches", RunHybrid<Method::kPp>},
      {Family::kHybrid, "3d", "DeepSpeed 3D: 2-way TP x 2-way PP x the rest DP", RunHybrid<Method::k3d>},
      {Family::kHybrid, "dp+tp", "Galvatron's DP + TP space", RunHybrid<Method::kDpTp>},
      {Family::kHybrid, "dp+pp", "Galvatron's DP + PP space", RunHybrid<Method::kDpPp>},
  };
  s.insert(s.end(), table_ii.begin(), table_ii.end());
  for (const hybrid::LayerPlanner& p : hybrid::LayerPlanners())
    s.push_back({Family::kLayers, p.name, p.space, [&p](const SolveRequest& r) { return RunLayers(p, r); }});
  return s;
}

bool SameSeconds(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); }

Error Denied(const SolveOutcome& out, const std::string& what) {
  return Internal(fmt::format("solver {}: {}", out.solver, what));
}

// The judges: the simulator (ir::Evaluate for sharding) on the plan, against the claims.
Status CheckRemat(const RematTarget& t, const SolveOutcome& out) {
  const auto& r = std::get<RematResult>(out.result);
  Result<RematResult> replay = remat::FinishResult(t.problem, t.cost_model, r.schedule, {});
  if (!replay) return Denied(out, "its schedule does not replay: " + replay.error().message);
  if (!replay->feasible || replay->peak_memory != out.claims.peak_bytes || !SameSeconds(replay->cost, out.claims.objective))
    return Denied(out, fmt::format("claims cost {} and peak {} bytes, the simulator says {} and {} within {}",
                                   out.claims.objective, out.claims.peak_bytes, replay->cost, replay->peak_memory, t.problem.budget));
  return Status::Ok();
}

Status CheckSharding(const ShardingTarget& t, const SolveOutcome& out) {
  const auto& r = std::get<ShardingResult>(out.result);
  const ir::Evaluation e = ir::Evaluate(t.problem, r.solution);
  if (!e.feasible || e.cost != static_cast<int64_t>(out.claims.objective) || e.peak_usage != out.claims.peak_bytes)
    return Denied(out, fmt::format("claims cost {} and usage {}, the evaluator says {} and {} ({})", out.claims.objective,
                                   out.claims.peak_bytes, e.cost, e.peak_usage, e.feasible ? "feasible" : e.violation));
  return Status::Ok();
}

Status CheckJoint(const JointTarget& t, const SolveOutcome& out) {
  const auto& r = std::get<joint::JointResult>(out.result);
  const joint::JointProblem& p = t.problem;
  Result<sim::SimResult> replay = sim::SimulateOperatorPlan(*p.graph, r.plan, *p.cost_model, p.mesh);
  if (!replay) return Denied(out, "its plan does not replay: " + replay.error().message);
  if (replay->peak_memory_bytes > p.budget || replay->peak_memory_bytes != out.claims.peak_bytes ||
      !SameSeconds(replay->iteration_seconds, out.claims.objective))
    return Denied(out, fmt::format("claims {} s and {} bytes, the simulator says {} s and {} bytes within {}",
                                   out.claims.objective, out.claims.peak_bytes, replay->iteration_seconds,
                                   replay->peak_memory_bytes, p.budget));
  return Status::Ok();
}

// A layer plan: SimulateLayerPlan (both layer-level families), to the byte and the bit: the claims are
// that simulator's own numbers (as hybrid::RunVerified checks them).
Status CheckLayerPlan(const cost::LayerModel& model, const cost::Cluster& cluster, const cost::CostModel& cost_model,
                      int64_t budget, const plan::LayerPlan& plan, const SolveOutcome& out) {
  Result<sim::LayerSimResult> replay = sim::SimulateLayerPlan(model, plan, cluster, cost_model);
  if (!replay) return Denied(out, "its plan does not simulate: " + replay.error().message);
  const int64_t peak = replay->summary.peak_memory_bytes;
  if (peak > budget || peak != out.claims.peak_bytes || replay->summary.iteration_seconds != out.claims.objective)
    return Denied(out, fmt::format("claims {} s and {} bytes, the simulator says {} s and {} bytes within {}",
                                   out.claims.objective, out.claims.peak_bytes, replay->summary.iteration_seconds, peak, budget));
  return Status::Ok();
}

Status CheckLayers(const LayersTarget& t, const SolveOutcome& out) {
  const hybrid::PlanRequest& r = t.request;
  return CheckLayerPlan(r.model, r.cluster, r.cost_model, r.memory_budget_bytes,
                        std::get<hybrid::PlanCandidate>(out.result).plan, out);
}

Status CheckHybrid(const HybridTarget& t, const SolveOutcome& out) {
  return CheckLayerPlan(t.model, t.cluster, t.cost_model, t.options.memory_budget_bytes,
                        std::get<hybrid::HybridSearchResult>(out.result).plan, out);
}

}  // namespace

std::string FamilyName(Family family) {
  switch (family) {
    case Family::kRemat: return "remat";
    case Family::kSharding: return "sharding";
    case Family::kJoint: return "joint";
    case Family::kLayers: return "layers";
    case Family::kHybrid: return "hybrid";
  }
  return "unknown";
}

std::string TerminationName(Termination termination) {
  switch (termination) {
    case Termination::kOptimal: return "optimal";
    case Termination::kFeasible: return "feasible";
    case Termination::kInfeasible: return "infeasible";
    case Termination::kNoPlan: return "no plan";
  }
  return "unknown";
}

// The variant's alternatives are in Family's order.
Family FamilyOf(const Target& target) { return static_cast<Family>(target.index()); }

const std::vector<Solver>& Solvers() {
  static const std::vector<Solver> solvers = MakeSolvers();
  return solvers;
}

const Solver* FindSolver(Family family, std::string_view name) {
  for (const Solver& s : Solvers())
    if (s.family == family && s.name == name) return &s;
  return nullptr;
}

std::vector<std::string> SolverNames(Family family) {
  std::vector<std::string> names;
  for (const Solver& s : Solvers())
    if (s.family == family) names.push_back(s.name);
  return names;
}

Result<SolveOutcome> RunSolver(const Solver& solver, const SolveRequest& request) {
  const Family family = FamilyOf(request.target);
  if (family != solver.family)
    return BadInput(fmt::format("solver {}/{} solves {} problems, not {}", FamilyName(solver.family), solver.name,
                                FamilyName(solver.family), FamilyName(family)));
  if (!(request.time_limit_seconds >= 0.0))
    return BadInput(fmt::format("--time-limit: must not be negative, got {}", request.time_limit_seconds));
  Result<SolveOutcome> out = solver.run(request);
  if (!out) return out;
  out->solver = FamilyName(solver.family) + "/" + solver.name;
  out->family = solver.family;
  if (out->result.index() != static_cast<size_t>(family))
    return Denied(*out, fmt::format("returned a result of another family ({})", out->result.index()));
  if (!out->HasPlan()) return out;
  Status judged = std::visit(
      [&](const auto& target) -> Status {
        using T = std::decay_t<decltype(target)>;
        if constexpr (std::is_same_v<T, RematTarget>) return CheckRemat(target, *out);
        else if constexpr (std::is_same_v<T, ShardingTarget>) return CheckSharding(target, *out);
        else if constexpr (std::is_same_v<T, JointTarget>) return CheckJoint(target, *out);
        else if constexpr (std::is_same_v<T, LayersTarget>) return CheckLayers(target, *out);
        else return CheckHybrid(target, *out);
      },
      request.target);
  if (!judged.ok()) return judged.error();
  return out;
}

}  // namespace kiwi::solve
