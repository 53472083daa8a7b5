#include "kiwi/solve/milp/model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kiwi/solve/milp/solve.h"

namespace kiwi::milp {
namespace {

// A Var handle from another model (or a default-constructed one) is a programming error.
void CheckHandle(int32_t index, size_t num_vars, const char* where) {
  if (index < 0 || static_cast<size_t>(index) >= num_vars) {
    throw std::out_of_range(std::string("milp::Model::") + where + ": variable index " + std::to_string(index) +
                            " out of range [0, " + std::to_string(num_vars) + ")");
  }
}

// Amount by which `value` lies outside [lower, upper] (0 inside; infinite for NaN).
double BoundViolation(double value, double lower, double upper) {
  if (std::isnan(value)) return kInf;
  return std::max({0.0, lower - value, value - upper});
}

}  // namespace

Var Model::AddVar(double lower, double upper, VarType type, std::string name) {
  vars_.push_back(Variable{lower, upper, type, std::move(name)});
  objective_.push_back(0.0);
  return Var{static_cast<int32_t>(vars_.size() - 1)};
}

void Model::AddConstraint(const Expr& expr, double lower, double upper, std::string name) {
  for (const auto& [index, coeff] : expr.terms()) CheckHandle(index, vars_.size(), "AddConstraint");
  // Moving the constant: lower <= terms + c <= upper  <=>  lower - c <= terms <= upper - c.
  rows_.push_back(Constraint{expr.terms(), lower - expr.constant(), upper - expr.constant(), std::move(name)});
}

void Model::SetObjective(const Expr& expr, Sense sense) {
  for (const auto& [index, coeff] : expr.terms()) CheckHandle(index, vars_.size(), "SetObjective");
  std::fill(objective_.begin(), objective_.end(), 0.0);
  for (const auto& [index, coeff] : expr.terms()) objective_[static_cast<size_t>(index)] += coeff;
  objective_constant_ = expr.constant();
  sense_ = sense;
}

void Model::SetBounds(Var v, double lower, double upper) {
  CheckHandle(v.index, vars_.size(), "SetBounds");
  Variable& var = vars_[static_cast<size_t>(v.index)];
  var.lower = lower;
  var.upper = upper;
}

int64_t Model::num_nonzeros() const {
  int64_t n = 0;
  for (const Constraint& row : rows_) n += static_cast<int64_t>(row.terms.size());
  return n;
}

// NaN when `values` does not hold one value per variable.
double Model::Evaluate(const std::vector<double>& values) const {
  if (values.size() != vars_.size()) return std::nan("");
  double total = objective_constant_;
  for (size_t i = 0; i < values.size(); ++i) total += objective_[i] * values[i];
  return total;
}

// Infinite when `values` does not hold one value per variable or holds a NaN.
double Model::MaxViolation(const std::vector<double>& values, bool check_integrality) const {
  if (values.size() != vars_.size()) return kInf;
  double worst = 0.0;
  for (size_t i = 0; i < values.size(); ++i) {
    const Variable& var = vars_[i];
    worst = std::max(worst, BoundViolation(values[i], var.lower, var.upper));
    if (check_integrality && var.type != VarType::kContinuous && std::isfinite(values[i])) {
      worst = std::max(worst, std::fabs(values[i] - std::round(values[i])));
    }
  }
  for (const Constraint& row : rows_) {
    double activity = 0.0;
    for (const auto& [index, coeff] : row.terms) activity += coeff * values[static_cast<size_t>(index)];
    worst = std::max(worst, BoundViolation(activity, row.lower, row.upper));
  }
  return worst;
}

// |objective - bound| so that minimization and maximization both give a non-negative gap.
double SolveResult::relative_gap() const {
  if (termination == Termination::kOptimal) return 0.0;
  if (!has_solution()) return kInf;
  return std::fabs(objective - best_bound) / std::max(std::fabs(objective), 1e-9);
}

}  // namespace kiwi::milp
