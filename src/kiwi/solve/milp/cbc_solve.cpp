// milp::Solve() on COIN-OR CBC 2.10 (MILP, through CbcMain1 so that CBC's default preprocessing, cut
// generators and heuristics run as with the `cbc -solve` command) and CLP (LP relaxation).
// The only file that includes CBC/CLP headers.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kiwi/solve/milp/load_estimate.h"
#include "kiwi/solve/milp/solve.h"
#include "kiwi/util/available_memory.h"
#include "kiwi/util/elapsed.h"

#include "CbcEventHandler.hpp"
#include "CbcModel.hpp"
#include "CbcSolver.hpp"
#include "ClpSimplex.hpp"
#include "ClpSolve.hpp"
#include "CoinError.hpp"
#include "CoinMessageHandler.hpp"
#include "OsiClpSolverInterface.hpp"

namespace kiwi::milp {
namespace {

using Clock = std::chrono::steady_clock;

// Values that CBC/CLP read as infinite bounds.
double ToCoin(double bound) {
  if (bound == kInf) return COIN_DBL_MAX;
  if (bound == -kInf) return -COIN_DBL_MAX;
  return bound;
}

// The model in the arrays CLP loads in one call: column-major, duplicates merged, always minimizing.
struct CoinProblem {
  int num_cols = 0;
  int num_rows = 0;
  std::vector<CoinBigIndex> starts;  // num_cols + 1
  std::vector<int> row_index;
  std::vector<double> elements;
  std::vector<double> col_lower, col_upper, objective, row_lower, row_upper;
  std::vector<int> integer_columns;
  double sign = 1.0;  // +1 minimize, -1 maximize: CBC minimizes sign * objective
};

// ---------------------------------------------------------------- validation

std::string VarName(const Model& model, size_t i) {
  const std::string& name = model.vars()[i].name;
  return name.empty() ? fmt::format("variable {}", i) : fmt::format("variable {} ('{}')", i, name);
}

std::string RowName(const Model& model, size_t r) {
  const std::string& name = model.constraints()[r].name;
  return name.empty() ? fmt::format("constraint {}", r) : fmt::format("constraint {} ('{}')", r, name);
}

// Bounds may be infinite on their own side only; NaN is never valid.
bool BoundsValid(double lower, double upper) {
  return !std::isnan(lower) && !std::isnan(upper) && lower != kInf && upper != -kInf;
}

Status ValidateModel(const Model& model) {
  const size_t n = model.vars().size();
  for (size_t i = 0; i < n; ++i) {
    const Variable& v = model.vars()[i];
    if (!BoundsValid(v.lower, v.upper)) {
      return BadInput(
          fmt::format("milp model: {}: bounds [{}, {}] are not valid", VarName(model, i), v.lower, v.upper));
    }
    if (!std::isfinite(model.objective()[i])) {
      return BadInput(fmt::format("milp model: {}: objective coefficient is not finite", VarName(model, i)));
    }
  }
  if (!std::isfinite(model.objective_constant())) return BadInput("milp model: objective constant is not finite");
  for (size_t r = 0; r < model.constraints().size(); ++r) {
    const Constraint& row = model.constraints()[r];
    if (!BoundsValid(row.lower, row.upper)) {
      return BadInput(
          fmt::format("milp model: {}: bounds [{}, {}] are not valid", RowName(model, r), row.lower, row.upper));
    }
    for (const auto& [index, coeff] : row.terms) {
      if (index < 0 || static_cast<size_t>(index) >= n) {
        return BadInput(fmt::format("milp model: {}: variable index {} out of range", RowName(model, r), index));
      }
      if (!std::isfinite(coeff)) {
        return BadInput(
            fmt::format("milp model: {}: coefficient of variable {} is not finite", RowName(model, r), index));
      }
    }
  }
  return Status::Ok();
}

Status ValidateOptions(const Model& model, const SolveOptions& options) {
  if (std::isnan(options.time_limit_seconds) || options.time_limit_seconds < 0) {
    return BadInput(fmt::format("milp options: time_limit_seconds: must be >= 0, got {}", options.time_limit_seconds));
  }
  if (!(options.relative_gap >= 0)) {
    return BadInput(fmt::format("milp options: relative_gap: must be >= 0, got {}", options.relative_gap));
  }
  if (options.threads < 0) return BadInput(fmt::format("milp options: threads: must be >= 0, got {}", options.threads));
  if (options.backend != Backend::kCbc)
    return BadInput(fmt::format("milp options: backend: {} is not a backend kiwi has (cbc)", static_cast<int>(options.backend)));
  if (options.warm_start && options.warm_start->size() != model.vars().size()) {
    return BadInput(fmt::format("milp options: warm_start: has {} values for {} variables", options.warm_start->size(),
                                model.vars().size()));
  }
  return Status::Ok();
}

// Inverted bounds make the model infeasible without any solving.
bool HasInvertedBounds(const CoinProblem& p) {
  for (int j = 0; j < p.num_cols; ++j) {
    if (p.col_lower[j] > p.col_upper[j]) return true;
  }
  for (int r = 0; r < p.num_rows; ++r) {
    if (p.row_lower[r] > p.row_upper[r]) return true;
  }
  return false;
}

// ---------------------------------------------------------------- building

// Row-major (CSR) with the duplicate terms of each row summed and exact zeros dropped. O(nnz).
struct MergedRows {
  std::vector<int64_t> starts;
  std::vector<int> cols;
  std::vector<double> values;
};

MergedRows MergeRows(const Model& model) {
  MergedRows m;
  size_t total = 0;
  for (const Constraint& row : model.constraints()) total += row.terms.size();
  m.starts.reserve(model.constraints().size() + 1);
  m.cols.reserve(total);
  m.values.reserve(total);
  std::vector<int64_t> slot(model.vars().size(), -1);  // position of a variable in the current row
  m.starts.push_back(0);
  for (const Constraint& row : model.constraints()) {
    const int64_t begin = m.starts.back();
    for (const auto& [index, coeff] : row.terms) {
      int64_t& s = slot[static_cast<size_t>(index)];
      if (s >= begin) {
        m.values[static_cast<size_t>(s)] += coeff;
      } else {
        s = static_cast<int64_t>(m.cols.size());
        m.cols.push_back(index);
        m.values.push_back(coeff);
      }
    }
    int64_t kept = begin;  // drop terms that cancelled out
    for (int64_t k = begin; k < static_cast<int64_t>(m.cols.size()); ++k) {
      if (m.values[static_cast<size_t>(k)] == 0.0) continue;
      m.cols[static_cast<size_t>(kept)] = m.cols[static_cast<size_t>(k)];
      m.values[static_cast<size_t>(kept)] = m.values[static_cast<size_t>(k)];
      ++kept;
    }
    m.cols.resize(static_cast<size_t>(kept));
    m.values.resize(static_cast<size_t>(kept));
    m.starts.push_back(kept);
  }
  return m;
}

// Transposes the merged rows into CLP's column-major arrays (row indices ascending in each column).
Status FillColumns(const MergedRows& rows, CoinProblem& p) {
  if (rows.cols.size() > static_cast<size_t>(std::numeric_limits<CoinBigIndex>::max())) {
    return BadInput(fmt::format("milp model: {} nonzeros exceed what CBC can index", rows.cols.size()));
  }
  p.starts.assign(static_cast<size_t>(p.num_cols) + 1, 0);
  for (int col : rows.cols) ++p.starts[static_cast<size_t>(col) + 1];
  for (int j = 0; j < p.num_cols; ++j) p.starts[j + 1] += p.starts[j];
  p.row_index.resize(rows.cols.size());
  p.elements.resize(rows.cols.size());
  std::vector<CoinBigIndex> next(p.starts.begin(), p.starts.end() - 1);
  for (int r = 0; r < p.num_rows; ++r) {
    for (int64_t k = rows.starts[r]; k < rows.starts[r + 1]; ++k) {
      const CoinBigIndex at = next[static_cast<size_t>(rows.cols[static_cast<size_t>(k)])]++;
      p.row_index[static_cast<size_t>(at)] = r;
      p.elements[static_cast<size_t>(at)] = rows.values[static_cast<size_t>(k)];
    }
  }
  return Status::Ok();
}

Result<CoinProblem> BuildProblem(const Model& model) {
  CoinProblem p;
  p.num_cols = model.num_vars();
  p.num_rows = model.num_constraints();
  p.sign = model.sense() == Sense::kMaximize ? -1.0 : 1.0;
  for (int j = 0; j < p.num_cols; ++j) {
    const Variable& v = model.vars()[static_cast<size_t>(j)];
    double lower = v.lower, upper = v.upper;
    if (v.type == VarType::kBinary) lower = std::max(lower, 0.0), upper = std::min(upper, 1.0);
    if (v.type != VarType::kContinuous) p.integer_columns.push_back(j);
    p.col_lower.push_back(ToCoin(lower));
    p.col_upper.push_back(ToCoin(upper));
    p.objective.push_back(p.sign * model.objective()[static_cast<size_t>(j)]);
  }
  for (const Constraint& row : model.constraints()) {
    p.row_lower.push_back(ToCoin(row.lower));
    p.row_upper.push_back(ToCoin(row.upper));
  }
  KIWI_RETURN_IF_ERROR(FillColumns(MergeRows(model), p));
  return p;
}

// Our objective (sense and constant restored) from CBC/CLP's minimized one.
double FromCoinObjective(const Model& model, const CoinProblem& p, double coin_value) {
  return p.sign * coin_value + model.objective_constant();
}

// No bound is known (a limit hit before the root LP finished): -inf when minimizing, +inf when maximizing.
SolveResult NoSolutionYet(const Model& model, const CoinProblem& p) {
  SolveResult result;
  result.termination = Termination::kNoSolution;
  result.best_bound = FromCoinObjective(model, p, -kInf);
  return result;
}

// Backend messages go to stderr (never stdout: the CLI's --json contract), and only when asked for.
// Writing explicitly (not through the FILE* the base class keeps) also covers the copies CBC makes.
class StderrMessageHandler : public CoinMessageHandler {
 public:
  StderrMessageHandler() : CoinMessageHandler(stderr) {}
  CoinMessageHandler* clone() const override { return new StderrMessageHandler(*this); }
  int print() override {
    std::fprintf(stderr, "%s\n", messageBuffer());
    return 0;
  }
};

std::unique_ptr<CoinMessageHandler> MakeMessageHandler(bool log) {
  auto handler = std::make_unique<StderrMessageHandler>();
  handler->setLogLevel(log ? 1 : 0);
  return handler;
}

// ---------------------------------------------------------------- LP relaxation (CLP)

// Dual simplex after presolve. On Checkmate-style LPs (110k and 217k columns) it took 12 s and 44 s
// of CPU; primal, sprint and barrier (Debian's CLP has no fast Cholesky) did not finish in 100-150 s.
// ClpSolve::automatic picked dual there too (within 8%) but picks idiot crash + primal elsewhere.
ClpSolve DualSimplex() {
  ClpSolve how;
  how.setSolveType(ClpSolve::useDual);
  how.setPresolveType(ClpSolve::presolveOn);
  return how;
}

// Seconds left of the time limit (infinite without one), never negative.
double SecondsLeft(const SolveOptions& options, Clock::time_point start) {
  return std::max(0.0, options.time_limit_seconds - SecondsSince(start));
}

SolveResult SolveLp(const Model& model, const CoinProblem& p, const SolveOptions& options, Clock::time_point start) {
  auto handler = MakeMessageHandler(options.log);
  ClpSimplex lp;
  lp.passInMessageHandler(handler.get());
  lp.setLogLevel(options.log ? 1 : 0);
  lp.loadProblem(p.num_cols, p.num_rows, p.starts.data(), p.row_index.data(), p.elements.data(), p.col_lower.data(),
                 p.col_upper.data(), p.objective.data(), p.row_lower.data(), p.row_upper.data());
  if (std::isfinite(options.time_limit_seconds)) lp.setMaximumWallSeconds(SecondsLeft(options, start));
  ClpSolve how = DualSimplex();
  lp.initialSolve(how);
  SolveResult result;
  switch (lp.status()) {
    case 0: {
      result.termination = Termination::kOptimal;
      const double* x = lp.primalColumnSolution();
      result.values.assign(x, x + p.num_cols);
      result.objective = model.Evaluate(result.values);
      result.best_bound = FromCoinObjective(model, p, lp.objectiveValue());
      break;
    }
    case 1: result.termination = Termination::kInfeasible; break;
    case 2: result.termination = Termination::kUnbounded; break;
    default: result.termination = Termination::kNoSolution; break;  // limit or numerical trouble
  }
  result.seconds = SecondsSince(start);
  return result;
}

// ---------------------------------------------------------------- MILP (CBC)

// State shared by the event handler and the clones CBC makes of it (one per thread and model copy).
struct IncumbentSink {
  const Model* model = nullptr;
  const CoinProblem* problem = nullptr;
  const std::function<void(const Incumbent&)>* callback = nullptr;
  Clock::time_point start;
  std::mutex mutex;
  double best = COIN_DBL_MAX;  // in CBC's minimized space
};

class IncumbentHandler : public CbcEventHandler {
 public:
  explicit IncumbentHandler(IncumbentSink* sink) : sink_(sink) {}
  CbcEventHandler* clone() const override { return new IncumbentHandler(*this); }
  CbcAction event(CbcEvent which) override {
    if ((which == solution || which == heuristicSolution) && model_ != nullptr) Report();
    return noAction;
  }

 private:
  void Report() {
    const double value = model_->getObjValue();
    std::lock_guard<std::mutex> lock(sink_->mutex);
    if (!(value < sink_->best)) return;  // report improvements only, once each
    sink_->best = value;
    Incumbent incumbent{FromCoinObjective(*sink_->model, *sink_->problem, value),
                        FromCoinObjective(*sink_->model, *sink_->problem, model_->getBestPossibleObjValue()),
                        SecondsSince(sink_->start)};
    (*sink_->callback)(incumbent);
  }
  IncumbentSink* sink_;
};

// CbcMain1 needs a callback; kiwi does not use it.
int NoCallback(CbcModel* /*model*/, int /*where_from*/) { return 0; }

// How CbcMain1 runs, decided from the root LP's time.
struct CbcPlan {
  double seconds = 0.0;    // CBC's own limit
  bool preprocess = true;  // integer preprocessing and zero-half cuts
  bool lean = false;       // no two-row MIR cuts, one thread (CbcParameters::lean_search_when_root_is_slow)
};

// The `cbc` command-line arguments: silence, limits, then the default `-solve`.
std::vector<std::string> CbcArguments(const SolveOptions& options, const CbcPlan& plan) {
  const char* level = options.log ? "1" : "0";
  std::vector<std::string> args = {"kiwi", "-log", level, "-slog", level, "-timeMode", "elapsed"};
  if (plan.seconds < 1e9) args.insert(args.end(), {"-sec", fmt::format("{:.6f}", std::max(plan.seconds, 0.001))});
  args.insert(args.end(), {"-ratioGap", fmt::format("{:.9g}", options.relative_gap)});
  int threads = plan.lean ? 1 : options.threads;
  if (threads == 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  // 100 + n: CBC's deterministic parallel mode (repeatable; also faster than the free-running mode
  // here: a 17k-column Checkmate model took 34 s vs 38 s on 1 thread vs >90 s free-running).
  if (threads > 1 && CbcModel::haveMultiThreadSupport()) {
    args.insert(args.end(), {"-threads", std::to_string(100 + std::min(threads, 99))});
  }
  // Both ignore the time limit: on a 400k-row Checkmate model CBC's zero-half separator (Cgl012Cut)
  // ran 95 s past a 23 s limit. A model whose root LP is too slow for preprocessing skips both.
  if (!plan.preprocess) args.insert(args.end(), {"-preprocess", "off", "-zeroHalfCuts", "off"});
  if (plan.lean) args.insert(args.end(), {"-twoMirCuts", "off"});
  args.insert(args.end(), {"-solve", "-quit"});
  return args;
}

// Warm start through CBC's MIP start: integer values fixed, continuous ones re-solved by CBC.
void SetWarmStart(const Model& model, const std::vector<double>& values, CbcModel& cbc, bool log) {
  const double violation = model.MaxViolation(values);
  if (violation > 1e-6) {
    if (log) std::fprintf(stderr, "kiwi milp: warm start ignored (max violation %g)\n", violation);
    return;
  }
  std::vector<std::pair<std::string, double>> start;
  start.reserve(values.size());
  const OsiSolverInterface* solver = cbc.solver();
  for (int j = 0; j < model.num_vars(); ++j) start.emplace_back(solver->getColName(j), values[static_cast<size_t>(j)]);
  cbc.setMIPStart(start);
}

// CbcMain1 keeps its argument parser's state in process-wide variables (CbcOrClpRead_mode,
// CbcOrClpReadCommand), so concurrent MILP solves must take turns; LP solves do not need this.
std::mutex& CbcMainMutex() {
  static std::mutex mutex;
  return mutex;
}

// Integer variables rounded to exact integers, unless rounding breaks a constraint (then unrounded).
std::vector<double> RoundedSolution(const Model& model, const double* x) {
  std::vector<double> values(x, x + model.num_vars());
  std::vector<double> rounded = values;
  for (size_t j = 0; j < rounded.size(); ++j) {
    if (model.vars()[j].type != VarType::kContinuous) rounded[j] = std::round(rounded[j]) + 0.0;  // no -0
  }
  return model.MaxViolation(rounded) <= 1e-6 ? rounded : values;
}

// Reads CBC's outcome (after CbcMain1 has mapped the solution back to the original columns).
SolveResult ExtractMilpResult(const Model& model, const CoinProblem& p, CbcModel& cbc) {
  SolveResult result;
  if (cbc.bestSolution() != nullptr && !cbc.isProvenInfeasible()) {
    result.termination = cbc.isProvenOptimal() ? Termination::kOptimal : Termination::kFeasible;
    result.values = RoundedSolution(model, cbc.bestSolution());
    result.objective = model.Evaluate(result.values);
    result.best_bound = FromCoinObjective(model, p, cbc.getBestPossibleObjValue());
  } else if (cbc.isProvenInfeasible()) {
    result.termination = Termination::kInfeasible;
  } else if (cbc.isContinuousUnbounded()) {
    result.termination = Termination::kUnbounded;
  } else {
    result.termination = Termination::kNoSolution;
    result.best_bound = FromCoinObjective(model, p, cbc.getBestPossibleObjValue());
  }
  return result;
}

// The root LP, solved before CbcMain1 because CBC's own root solve ignores the time limit and CLP's
// automatic choice there (idiot crash + primal) was 50x slower than dual simplex on Checkmate
// models. CBC then starts from this optimal basis. Returns the outcome when no search should follow.
std::optional<SolveResult> SolveRootLp(OsiClpSolverInterface& solver, const Model& model, const CoinProblem& p,
                                       const SolveOptions& options, Clock::time_point start) {
  ClpSimplex* clp = solver.getModelPtr();
  solver.setSolveOptions(DualSimplex());
  solver.setHintParam(OsiDoDualInInitial, true, OsiHintDo);
  if (std::isfinite(options.time_limit_seconds)) clp->setMaximumWallSeconds(SecondsLeft(options, start));
  solver.initialSolve();
  clp->setMaximumWallSeconds(-1.0);  // CBC enforces the limit from here on
  SolveResult result;
  if (solver.isProvenOptimal()) return std::nullopt;
  if (solver.isProvenPrimalInfeasible()) {
    result.termination = Termination::kInfeasible;
  } else if (solver.isProvenDualInfeasible()) {
    result.termination = Termination::kUnbounded;  // the relaxation is; CBC reports the same
  } else {
    result = NoSolutionYet(model, p);  // time limit inside the root LP
  }
  return result;
}

// CBC's integer preprocessing (CglPreProcess) ignores the time limit. On whole Checkmate models it
// took 10-60x the root LP's time (17k columns: 5 s; 40k: 15 s; 110k: over 700 s), so it runs only
// when that estimate fits in half the time left (and CbcParameters::integer_preprocessing asks for it).
bool PreprocessAffordable(double root_lp_seconds, double seconds_left) {
  constexpr double kPreprocessPerRootLp = 40.0;
  return kPreprocessPerRootLp * root_lp_seconds <= 0.5 * seconds_left;
}

// CbcParameters::lean_search_when_root_is_slow applies when fewer root LPs than this fit in the time
// left: then CBC spends it in root cut rounds, each costing about a root LP.
constexpr double kRootLpsForAFullSearch = 10.0;

// Branch and cut through CbcMain1 (preprocessing, the default cut generators and heuristics).
SolveResult RunCbc(const Model& model, const CoinProblem& p, const OsiClpSolverInterface& solver,
                   CoinMessageHandler* handler, const SolveOptions& options, Clock::time_point start,
                   const CbcPlan& plan) {
  IncumbentSink sink{&model, &p, &options.on_incumbent, start, {}, COIN_DBL_MAX};  // outlives cbc
  CbcModel cbc(solver);
  cbc.passInMessageHandler(handler);
  std::lock_guard<std::mutex> lock(CbcMainMutex());
  CbcSolverUsefulData data;
  data.useSignalHandler_ = false;  // CBC's SIGINT handler would be process-wide state
  CbcMain0(cbc, data);
  data.noPrinting_ = !options.log;
  cbc.setLogLevel(options.log ? 1 : 0);
  if (options.on_incumbent) {
    IncumbentHandler incumbents(&sink);
    cbc.passInEventHandler(&incumbents);  // CBC keeps a clone
  }
  if (options.warm_start) SetWarmStart(model, *options.warm_start, cbc, options.log);
  const std::vector<std::string> args = CbcArguments(options, plan);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  CbcMain1(static_cast<int>(argv.size()), argv.data(), cbc, NoCallback, data);
  return ExtractMilpResult(model, p, cbc);
}

SolveResult SolveMilp(const Model& model, const CoinProblem& p, const SolveOptions& options, Clock::time_point start) {
  auto handler = MakeMessageHandler(options.log);
  OsiClpSolverInterface solver;
  solver.passInMessageHandler(handler.get());
  solver.loadProblem(p.num_cols, p.num_rows, p.starts.data(), p.row_index.data(), p.elements.data(),
                     p.col_lower.data(), p.col_upper.data(), p.objective.data(), p.row_lower.data(),
                     p.row_upper.data());
  solver.setInteger(p.integer_columns.data(), static_cast<int>(p.integer_columns.size()));
  const Clock::time_point root_start = Clock::now();
  std::optional<SolveResult> early = SolveRootLp(solver, model, p, options, start);
  if (early) {
    early->seconds = SecondsSince(start);
    return *early;
  }
  const double root_seconds = SecondsSince(root_start);
  if (SecondsLeft(options, start) < root_seconds) {
    // CBC re-solves the root and processes the MIP start before its first time check: with less
    // time left than one root LP it only overruns. The root LP's optimum is the bound.
    SolveResult bound_only = NoSolutionYet(model, p);
    bound_only.best_bound = FromCoinObjective(model, p, solver.getObjValue());
    bound_only.seconds = SecondsSince(start);
    if (options.log) std::fprintf(stderr, "kiwi milp: no time left for branch and cut (root LP %.1f s)\n", root_seconds);
    return bound_only;
  }
  CbcPlan plan;
  const double left = SecondsLeft(options, start);
  plan.preprocess = options.cbc.integer_preprocessing && PreprocessAffordable(root_seconds, left);
  plan.lean = options.cbc.lean_search_when_root_is_slow && kRootLpsForAFullSearch * root_seconds > left;
  // After its limit CBC solves the LP once more with the incumbent's integers fixed (2.5 s after an
  // 8.8 s root LP on a 192k-row Checkmate model): stop it early by that much.
  constexpr double kFinalLpPerRootLp = 0.35;
  plan.seconds = left - kFinalLpPerRootLp * root_seconds;
  if (options.log) {
    std::fprintf(stderr, "kiwi milp: root LP %.1f s; CBC preprocessing %s%s\n", root_seconds,
                 plan.preprocess ? "on" : options.cbc.integer_preprocessing ? "off (root LP too slow for the time left)" : "off",
                 plan.lean ? "; lean search (one thread, no two-row MIR cuts)" : "");
  }
  SolveResult result = RunCbc(model, p, solver, handler.get(), options, start, plan);
  result.seconds = SecondsSince(start);
  return result;
}

// A feasible warm start is returned when CBC ends with nothing better (e.g. at a tight time limit).
void KeepWarmStartIfBetter(const Model& model, const SolveOptions& options, SolveResult& result) {
  if (!options.warm_start || options.relax_integrality) return;
  if (result.termination == Termination::kInfeasible || result.termination == Termination::kUnbounded) return;
  if (model.MaxViolation(*options.warm_start) > 1e-6) return;
  const double value = model.Evaluate(*options.warm_start);
  const bool better = model.sense() == Sense::kMinimize ? value < result.objective : value > result.objective;
  if (result.has_solution() && !better) return;
  result.values = *options.warm_start;
  result.objective = value;
  if (result.termination != Termination::kOptimal) result.termination = Termination::kFeasible;
}

// A model without variables: optimal iff every (empty) row admits 0.
SolveResult SolveEmpty(const Model& model) {
  SolveResult result;
  result.termination = Termination::kOptimal;
  for (const Constraint& row : model.constraints()) {
    if (row.lower > 1e-9 || row.upper < -1e-9) result.termination = Termination::kInfeasible;
  }
  if (result.termination == Termination::kOptimal) result.objective = result.best_bound = model.objective_constant();
  return result;
}

// CBC/CLP report internal failures by throwing CoinError; kiwi returns them as errors.
Result<SolveResult> SolveWithBackend(const Model& model, const CoinProblem& p, const SolveOptions& options,
                                     Clock::time_point start) {
  try {
    if (HasInvertedBounds(p)) {
      SolveResult infeasible;
      infeasible.termination = Termination::kInfeasible;
      return infeasible;
    }
    if (options.time_limit_seconds == 0.0) return NoSolutionYet(model, p);
    if (options.relax_integrality || p.integer_columns.empty()) return SolveLp(model, p, options, start);
    return SolveMilp(model, p, options, start);
  } catch (const CoinError& e) {
    return Internal(fmt::format("milp: CBC/CLP failed in {}::{}: {}", e.className(), e.methodName(), e.message()));
  }
}

}  // namespace

Result<SolveResult> Solve(const Model& model, const SolveOptions& options) {
  const Clock::time_point start = Clock::now();
  KIWI_RETURN_IF_ERROR(ValidateModel(model));
  KIWI_RETURN_IF_ERROR(ValidateOptions(model, options));
  if (model.num_vars() == 0) return SolveEmpty(model);
  const int64_t nonzeros = model.num_nonzeros();
  if (std::optional<std::string> why = WhyNotLoad(nonzeros, options.time_limit_seconds, AvailableMemoryBytes())) {
    SolveResult skipped;  // no bound either: -inf when minimizing, +inf when maximizing
    skipped.best_bound = model.sense() == Sense::kMinimize ? -kInf : kInf;
    skipped.not_loaded = fmt::format("not loaded: its {} nonzeros {}", nonzeros, *why);
    KeepWarmStartIfBetter(model, options, skipped);
    skipped.seconds = SecondsSince(start);
    return skipped;
  }
  Result<CoinProblem> problem = BuildProblem(model);
  if (!problem) return problem.error();
  Result<SolveResult> result = SolveWithBackend(model, *problem, options, start);
  if (!result) return result;
  KeepWarmStartIfBetter(model, options, *result);
  result->seconds = SecondsSince(start);
  return result;
}

}  // namespace kiwi::milp
