#pragma once
// Every solver kiwi has behind one contract (after OR-Tools MathOpt: a solve returns an error or a
// termination with its result): a request (a target of the solver's family, a time limit, threads, a
// seed, progress), an outcome (termination, the family's result with its plan, the claims, a bound when
// proven, seconds, notes), a registry of named solvers by family, and one driver, RunSolver, that runs a
// solver and checks its claims with the family's judge (the simulator; ir::Evaluate for sharding): a
// claim the judge does not confirm is an internal error, never an answer.
//
//   const Solver* s = FindSolver(Family::kRemat, "ilp");
//   Result<SolveOutcome> out = RunSolver(*s, {.target = RematTarget{problem, cost_model}, .time_limit_seconds = 60});
//   if (out && out->HasPlan()) Use(std::get<remat::RematResult>(out->result).schedule);
//
// Adding a solver: its run function in its own file(s) and one line in Solvers() (registry.cpp; a
// layer-level planner's line is in hybrid::LayerPlanners(), which Solvers() lists under kLayers); the
// subcommands (`remat --solver`, `iopddl --solver`, `joint --method`, `hybrid --method`, `plan`) find it
// by name there.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiwi/cost/cost_model.h"
#include "kiwi/ir/sharding_problem.h"
#include "kiwi/solve/hybrid/layer_planners.h"
#include "kiwi/solve/hybrid/search.h"
#include "kiwi/solve/joint/joint.h"
#include "kiwi/solve/remat/problem.h"
#include "kiwi/solve/sharding/solver.h"
#include "kiwi/util/result.h"

namespace kiwi::solve {

enum class Family : uint8_t {
  kRemat,     // which activations to keep or recompute on one device (Checkmate; remat/solvers.h)
  kSharding,  // one strategy per operator under a usage limit (IOPDDL, Alpa; sharding/solver.h)
  kJoint,     // operator sharding and recomputation together (KIWI; joint/joint.h)
  kLayers,    // a strategy per layer, pipeline stages, micro-batches (Galvatron-BMW; hybrid/layer_planners.h)
  kHybrid,    // Galvatron-BMW's search and Table II's methods, a batch sweep or one batch (hybrid/search.h)
};
std::string FamilyName(Family family);  // "remat", "sharding", "joint", "layers", "hybrid"

struct RematTarget {
  const remat::RematProblem& problem;
  const cost::CostModel& cost_model;
};
struct ShardingTarget {
  const ir::ShardingProblem& problem;
};
struct JointTarget {
  const joint::JointProblem& problem;
  // Other methods' results on the same problem (warm starts for kiwi's MILP; joint.h).
  std::vector<const joint::JointResult*> portfolio = {};
};
struct LayersTarget {
  const hybrid::PlanRequest& request;  // its time limit and progress are the SolveRequest's
};
struct HybridTarget {
  const cost::LayerModel& model;
  const cost::Cluster& cluster;
  const cost::CostModel& cost_model;
  // The budget, the batch or its sweep and the space's switches; the method is the solver's, the time
  // limit and progress the SolveRequest's.
  const hybrid::HybridSearchOptions& options;
};
// In Family's order (FamilyOf is the alternative's index).
using Target = std::variant<RematTarget, ShardingTarget, JointTarget, LayersTarget, HybridTarget>;
Family FamilyOf(const Target& target);

struct SolveRequest {
  Target target;
  double time_limit_seconds = 60.0;  // 0: answer without searching, where the solver can
  int threads = 0;    // 0 = all cores
  uint64_t seed = 1;  // randomized searches are deterministic for a seed
  std::function<void(const std::string&)> progress = {};  // one line per event; may be empty
};

enum class Termination : uint8_t {
  kOptimal,     // a plan, proven optimal in the solver's space
  kFeasible,    // a plan, not proven optimal
  kInfeasible,  // no plan fits the budget (smallest_known_budget says what would, when known)
  kNoPlan,      // a limit was reached without a plan, or (layers) none beats the plan to beat
};
std::string TerminationName(Termination termination);  // "optimal", "feasible", "infeasible", "no plan"

// What the solver says of its plan; RunSolver checks these against the judge.
struct Claims {
  double objective = 0.0;   // remat: compute cost with recomputation; sharding: the cost; joint and
                            // layers: seconds per iteration
  int64_t peak_bytes = 0;   // peak memory (sharding: peak usage)
};

struct SolveOutcome {
  std::string solver;  // "remat/ilp", "layers/Megatron-LM", ...
  Family family = Family::kRemat;
  Termination termination = Termination::kNoPlan;
  Claims claims;
  std::optional<double> bound;  // proven lower bound on claims.objective, when the solver has one
  double seconds = 0.0;         // the solve's wall time
  std::string notes;            // for humans
  int64_t smallest_known_budget = 0;  // kInfeasible: the least budget the solver knows to work (0: unknown)
  // The family's own result (exactly the solver family's alternative, in Family's order), carrying the plan.
  std::variant<remat::RematResult, sharding::ShardingResult, joint::JointResult, hybrid::PlanCandidate,
               hybrid::HybridSearchResult>
      result;

  bool HasPlan() const { return termination == Termination::kOptimal || termination == Termination::kFeasible; }
};

struct Solver {
  Family family;
  std::string name;     // unique within its family; what --solver / --method take
  std::string summary;  // one line
  std::function<Result<SolveOutcome>(const SolveRequest& request)> run;
};

// Every registered solver, by family, in the order the subcommands list them.
const std::vector<Solver>& Solvers();
const Solver* FindSolver(Family family, std::string_view name);  // nullptr when none has that name
std::vector<std::string> SolverNames(Family family);

// Runs `solver` on `request` and checks its plan: kBadInput when the target is of another family; the
// solver's own errors as they are; kInternal when the judge does not replay the plan to the claims
// (a byte or a second apart), when a plan said to fit does not, or the result is of the wrong family.
Result<SolveOutcome> RunSolver(const Solver& solver, const SolveRequest& request);

}  // namespace kiwi::solve
