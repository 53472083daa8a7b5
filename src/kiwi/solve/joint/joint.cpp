// The joint solvers' entry point (joint.h): method names, dispatch, and the simulator's judgement.
#include "kiwi/solve/joint/joint.h"

#include <fmt/format.h>

#include <array>
#include <cmath>

#include "kiwi/solve/joint/baselines.h"
#include "kiwi/solve/joint/full_milp.h"
#include "kiwi/solve/joint/kiwi.h"

namespace kiwi::solve::joint {
namespace {

struct MethodName {
  JointMethod method;
  const char* name;
};
constexpr std::array<MethodName, 5> kMethods = {{{JointMethod::kKiwi, "kiwi"},
                                                 {JointMethod::kKiwiFull, "kiwi-full"},
                                                 {JointMethod::kAlpa, "alpa"},
                                                 {JointMethod::kCkptDots, "ckpt-dots"},
                                                 {JointMethod::kMegatronSelective, "megatron-selective"}}};

}  // namespace

std::optional<JointMethod> ParseJointMethod(const std::string& name) {
  for (const MethodName& m : kMethods)
    if (name == m.name) return m.method;
  return std::nullopt;
}

std::string JointMethodName(JointMethod method) {
  for (const MethodName& m : kMethods)
    if (method == m.method) return m.name;
  return "unknown";
}

std::vector<std::string> JointMethodNames() {
  std::vector<std::string> names;
  for (const MethodName& m : kMethods) names.emplace_back(m.name);
  return names;
}

Result<JointResult> SolveJoint(const JointProblem& problem, JointMethod method, const JointSolveOptions& options) {
  switch (method) {
    case JointMethod::kKiwi: return SolveKiwi(problem, options);
    case JointMethod::kKiwiFull: return SolveKiwiFull(problem, options);
    case JointMethod::kAlpa:
    case JointMethod::kCkptDots:
    case JointMethod::kMegatronSelective: {
      Result<std::vector<plan::Step>> schedule = BaselineSchedule(problem, method);
      if (!schedule) return schedule.error();
      return SolveFixedSchedule(problem, *schedule, JointMethodName(method), options);
    }
  }
  return Internal("SolveJoint: unknown method");
}

Result<JointResult> FinishJoint(const JointProblem& problem, plan::OperatorPlan plan, JointResult partial) {
  Result<sim::SimResult> r = sim::SimulateOperatorPlan(*problem.graph, plan, *problem.cost_model, problem.mesh);
  if (!r) return Internal(fmt::format("{}: the plan does not replay: {}", partial.method, r.error().message));
  // Every cost is rounded to whole units (half a unit each) once per execution.
  int64_t terms = 0;
  for (const plan::Step& s : plan.schedule) terms += s.kind == plan::StepKind::kCompute;
  terms *= 1 + static_cast<int64_t>(problem.lowered.problem.edges.size() / std::max<size_t>(1, problem.lowered.problem.nodes.size()) + 1);
  const double tolerance = static_cast<double>(terms) * problem.lowered.seconds_per_unit + 1e-9 * r->iteration_seconds;
  if (r->peak_memory_bytes != partial.claimed_peak ||
      std::abs(problem.Seconds(partial.claimed_cost) - r->iteration_seconds) > tolerance)
    return Internal(fmt::format("{}: the formulation claims {} bytes and {:.9g} s, the simulator measures {} bytes and "
                                "{:.9g} s", partial.method, partial.claimed_peak, problem.Seconds(partial.claimed_cost),
                                r->peak_memory_bytes, r->iteration_seconds));
  partial.sim = *std::move(r);
  partial.plan = std::move(plan);
  partial.feasible = partial.sim.peak_memory_bytes <= problem.budget;
  return partial;
}

}  // namespace kiwi::solve::joint
