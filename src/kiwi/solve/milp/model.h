#pragma once
// A mixed-integer linear model, built apart from any solver (after OR-Tools MathOpt): formulations
// build a Model, milp::Solve() hands it to a backend. Variables are cheap value handles.
//
//   milp::Model m;
//   milp::Var x = m.AddBinary("x");
//   milp::Var y = m.AddContinuous(0, 10, "y");
//   m.AddConstraint(milp::Expr().Add(x, 2).Add(y, 1), -milp::kInf, 8);   // 2x + y <= 8
//   m.SetObjective(milp::Expr().Add(x, -1).Add(y, -1), milp::Sense::kMinimize);
//   Result<milp::SolveResult> r = milp::Solve(m, {.time_limit_seconds = 10});
//
// Building costs O(1) amortized per variable and per term; rows are stored sparse.
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace kiwi::milp {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

enum class VarType : uint8_t { kContinuous, kInteger, kBinary };
enum class Sense : uint8_t { kMinimize, kMaximize };

struct Var {
  int32_t index = -1;
};

// A linear expression: sum of coeff * var + constant. Repeated variables are summed by the backend.
class Expr {
 public:
  Expr() = default;
  Expr& Add(Var v, double coeff = 1.0) {
    terms_.emplace_back(v.index, coeff);
    return *this;
  }
  Expr& AddConstant(double c) {
    constant_ += c;
    return *this;
  }
  const std::vector<std::pair<int32_t, double>>& terms() const { return terms_; }
  double constant() const { return constant_; }
  void Reserve(size_t n) { terms_.reserve(n); }

 private:
  std::vector<std::pair<int32_t, double>> terms_;
  double constant_ = 0.0;
};

struct Constraint {
  std::vector<std::pair<int32_t, double>> terms;  // (variable index, coefficient)
  double lower = -kInf;                           // lower <= sum(terms) <= upper
  double upper = kInf;
  std::string name;
};

struct Variable {
  double lower = 0.0;
  double upper = kInf;
  VarType type = VarType::kContinuous;
  std::string name;
};

class Model {
 public:
  Var AddVar(double lower, double upper, VarType type, std::string name = "");
  Var AddBinary(std::string name = "") { return AddVar(0.0, 1.0, VarType::kBinary, std::move(name)); }
  Var AddContinuous(double lower, double upper, std::string name = "") {
    return AddVar(lower, upper, VarType::kContinuous, std::move(name));
  }
  // lower <= expr <= upper (the expression's constant is moved to the bounds).
  void AddConstraint(const Expr& expr, double lower, double upper, std::string name = "");
  void AddLessEqual(const Expr& expr, double rhs, std::string name = "") { AddConstraint(expr, -kInf, rhs, std::move(name)); }
  void AddGreaterEqual(const Expr& expr, double rhs, std::string name = "") { AddConstraint(expr, rhs, kInf, std::move(name)); }
  void AddEqual(const Expr& expr, double rhs, std::string name = "") { AddConstraint(expr, rhs, rhs, std::move(name)); }
  void SetObjective(const Expr& expr, Sense sense = Sense::kMinimize);
  // Fixes a variable's bounds (e.g. to 0 or 1) after creation.
  void SetBounds(Var v, double lower, double upper);

  int32_t num_vars() const { return static_cast<int32_t>(vars_.size()); }
  int32_t num_constraints() const { return static_cast<int32_t>(rows_.size()); }
  int64_t num_nonzeros() const;  // terms over all constraints
  const std::vector<Variable>& vars() const { return vars_; }
  const std::vector<Constraint>& constraints() const { return rows_; }
  const std::vector<double>& objective() const { return objective_; }  // dense, one per variable
  double objective_constant() const { return objective_constant_; }
  Sense sense() const { return sense_; }

  // Objective value and maximum constraint/bound violation of an assignment (for checks and tests).
  double Evaluate(const std::vector<double>& values) const;
  double MaxViolation(const std::vector<double>& values, bool check_integrality = true) const;

 private:
  std::vector<Variable> vars_;
  std::vector<Constraint> rows_;
  std::vector<double> objective_;
  double objective_constant_ = 0.0;
  Sense sense_ = Sense::kMinimize;
};

}  // namespace kiwi::milp
