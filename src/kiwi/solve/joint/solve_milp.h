#pragma once
// Solves the joint MILP of a spec (milp_builder.h) with the MILP backend: KIWI's reduced formulation
// (KiwiSpec) or the sharding of a fixed schedule (FixedScheduleSpec: Alpa and the heuristics + Alpa).
// The result is judged by EvaluateSpec, never by the backend's own numbers.
//
//   JointModelSpec spec = KiwiSpec(problem);
//   PruneImpliedRows(spec);
//   Result<JointMilpResult> r = SolveJointMilp(problem, spec, {.time_limit_seconds = 60});
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiwi/solve/joint/model_spec.h"
#include "kiwi/solve/joint/problem.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::joint {

struct JointMilpOptions {
  double time_limit_seconds = 60.0;
  double relative_gap = 1e-4;
  int threads = 0;         // 0 = all cores
  bool min_peak = false;   // minimize the peak (bytes) instead of the time; the budget is ignored
  std::optional<int64_t> budget;  // instead of problem.budget (e.g. no limit: INT64_MAX)
  // MIP starts: the cheapest that the spec admits (strategies allowed, modes recomputable, eq. 9) and
  // that fits the budget is handed to CBC; the answer is never worse than it.
  std::vector<JointSolution> warm_starts;
  std::function<void(const std::string&)> progress;  // one line per event; may be empty
};

struct JointMilpResult {
  bool has_solution = false;
  bool optimal = false;            // proven within relative_gap
  bool proven_infeasible = false;  // CBC proved that nothing fits the budget
  JointSolution solution;
  SpecEvaluation evaluation;       // EvaluateSpec(solution)
  std::optional<double> lower_bound;  // proven: cost units, or bytes with min_peak
  double seconds = 0.0;
  int32_t variables = 0, constraints = 0;
  std::string note;                // for humans: "optimal", "time limit, gap 0.3%", "warm start kept"
};

// Whether `s` is a decision of the spec: strategies allowed, recomputation only where the spec has
// the mode, and eq. 9's exclusive pairs respected.
bool AdmittedBySpec(const JointProblem& problem, const JointModelSpec& spec, const JointSolution& s);

// Errors: kInternal on a backend failure. Infeasibility and time limits are results, not errors.
Result<JointMilpResult> SolveJointMilp(const JointProblem& problem, const JointModelSpec& spec,
                                       const JointMilpOptions& options);

}  // namespace kiwi::solve::joint
