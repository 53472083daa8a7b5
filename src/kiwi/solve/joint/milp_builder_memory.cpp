// The memory side of the joint MILP (milp_builder.h): per-node memory variables, the products of
// eq. 10's extensions, one budget (or peak) row per needed spec row; and the MIP-start assignment.
#include <algorithm>
#include <cmath>

#include "kiwi/solve/joint/milp_builder.h"

namespace kiwi::solve::joint {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

bool ConstantMemory(const JointProblem& p, ir::NodeId v) {
  const std::vector<int32_t>& allowed = p.allowed[Z(v)];
  return std::all_of(allowed.begin(), allowed.end(), [&](int32_t k) { return p.Memory(v, k) == p.Memory(v, allowed[0]); });
}

int64_t MaxMemory(const JointProblem& p, ir::NodeId v) {
  int64_t most = 0;
  for (int32_t k : p.allowed[Z(v)]) most = std::max(most, p.Memory(v, k));
  return most;
}

// sum_a mem_va / unit * (x[v][a][modes...]) added to e with factor `sign`.
void AddMemoryOf(const JointProblem& p, const JointModel& m, ir::NodeId v, bool kept_mode_only, double sign, milp::Expr& e) {
  for (size_t a = 0; a < p.allowed[Z(v)].size(); ++a) {
    const double bytes = static_cast<double>(p.Memory(v, p.allowed[Z(v)][a])) / m.memory_unit;
    for (size_t mode = 0; mode < (kept_mode_only ? 1 : 2); ++mode)
      if (m.x[Z(v)][a][mode] >= 0 && bytes != 0.0) e.Add(milp::Var{m.x[Z(v)][a][mode]}, sign * bytes);
  }
}

class MemoryBuilder {
 public:
  MemoryBuilder(const JointProblem& p, const JointModelSpec& spec, JointModel& m) : p_(p), spec_(spec), m_(m) {
    const auto n = Z(p.graph->size());
    m.mem.assign(n, -1);
    m.kept.assign(n, -1);
    m.segment.assign(n, {});
    for (size_t v = 0; v < n; ++v) m.segment[v].assign(spec.extensions[v].size(), -1);
    product_of_.assign(n, {});
  }

  // Adds `term` to a row: a constant (bytes) or a variable.
  void AddTerm(const MemTerm& term, milp::Expr& row, double& constant_bytes) {
    const ir::NodeId v = term.node;
    if (term.kind == TermKind::kMemory && ConstantMemory(p_, v)) {
      constant_bytes += static_cast<double>(p_.Memory(v, p_.allowed[Z(v)][0]));
      return;
    }
    row.Add(milp::Var{Variable(term)});
  }

 private:
  int32_t Variable(const MemTerm& term) {
    const ir::NodeId v = term.node;
    switch (term.kind) {
      case TermKind::kMemory: return Defined(m_.mem[Z(v)], v, /*kept_mode_only=*/false);
      case TermKind::kKept: return Defined(m_.kept[Z(v)], v, /*kept_mode_only=*/true);
      case TermKind::kExtension: return Segment(v, term.segment);
    }
    return -1;
  }

  // A continuous variable equal to s_v^T mem_v (or s_v^T mem_v (1 - r_v)), created on first use.
  int32_t Defined(int32_t& slot, ir::NodeId v, bool kept_mode_only) {
    if (slot >= 0) return slot;
    const milp::Var var = m_.model.AddContinuous(0.0, milp::kInf);
    milp::Expr e;
    e.Add(var);
    AddMemoryOf(p_, m_, v, kept_mode_only, -1.0, e);
    m_.model.AddEqual(e, 0.0);
    return slot = var.index;
  }

  // E >= s_x^T mem_x r_w for every consumer w of the segment (eq. 10: x held while any is pending).
  int32_t Segment(ir::NodeId x, int32_t j) {
    int32_t& slot = m_.segment[Z(x)][Z(j)];
    if (slot >= 0) return slot;
    slot = m_.model.AddContinuous(0.0, milp::kInf).index;
    for (ir::NodeId w : spec_.extensions[Z(x)][Z(j)].consumers) {
      milp::Expr e;
      e.Add(milp::Var{slot});
      const JointModel::Product& prod = Product(x, w);
      if (prod.y.empty()) {  // constant memory: mem_x r_w
        const double bytes = static_cast<double>(p_.Memory(x, p_.allowed[Z(x)][0])) / m_.memory_unit;
        for (const auto& modes : m_.x[Z(w)])
          if (modes[1] >= 0) e.Add(milp::Var{modes[1]}, -bytes);
      } else {
        for (size_t a = 0; a < prod.y.size(); ++a)
          e.Add(milp::Var{prod.y[a]}, -static_cast<double>(p_.Memory(x, p_.allowed[Z(x)][a])) / m_.memory_unit);
      }
      m_.model.AddGreaterEqual(e, 0.0);
    }
    return slot;
  }

  // y_a = s_xa r_w exactly at integer points: sum_a y_a = r_w, y_a <= s_xa.
  const JointModel::Product& Product(ir::NodeId x, ir::NodeId w) {
    for (size_t i : product_of_[Z(x)])
      if (m_.products[i].consumer == w) return m_.products[i];
    product_of_[Z(x)].push_back(m_.products.size());
    JointModel::Product prod{x, w, {}};
    if (!ConstantMemory(p_, x)) {
      milp::Expr total;
      for (const auto& modes : m_.x[Z(w)])
        if (modes[1] >= 0) total.Add(milp::Var{modes[1]}, -1.0);
      for (size_t a = 0; a < p_.allowed[Z(x)].size(); ++a) {
        const milp::Var y = m_.model.AddContinuous(0.0, 1.0);
        prod.y.push_back(y.index);
        total.Add(y);
        milp::Expr below = milp::Expr().Add(y);
        for (int32_t var : m_.x[Z(x)][a])
          if (var >= 0) below.Add(milp::Var{var}, -1.0);
        m_.model.AddLessEqual(below, 0.0);
      }
      m_.model.AddEqual(total, 0.0);
    }
    m_.products.push_back(std::move(prod));
    return m_.products.back();
  }

  const JointProblem& p_;
  const JointModelSpec& spec_;
  JointModel& m_;
  std::vector<std::vector<size_t>> product_of_;
};

// The most a row can hold: every term at its node's largest allowed size.
int64_t RowMaximum(const JointProblem& p, const std::vector<MemTerm>& row) {
  int64_t most = 0;
  for (const MemTerm& term : row) most += MaxMemory(p, term.node);
  return most;
}

}  // namespace

void AddMemoryRows(const JointProblem& p, const JointModelSpec& spec, const JointModelOptions& options, JointModel& m) {
  MemoryBuilder builder(p, spec, m);
  if (options.min_peak) m.peak = m.model.AddContinuous(0.0, milp::kInf).index;
  const double budget_units = BudgetUnits(m, options.budget);
  // The tails resident so far, by node, and their RowMaximum: a row's terms are its own and these,
  // added in node order (the order the variables are made in).
  std::vector<MemTerm> tails;
  int64_t tails_maximum = 0;
  for (size_t t = 0, k = 0; t < spec.rows.size(); ++t) {
    for (; k < spec.tails.size() && Z(spec.tails[k].first) <= t; ++k) {
      const MemTerm& tail = spec.tails[k].term;
      tails.insert(std::upper_bound(tails.begin(), tails.end(), tail, ByNode), tail);
      tails_maximum += MaxMemory(p, tail.node);
    }
    if (!spec.row_needed[t]) continue;
    if (!options.min_peak && tails_maximum + RowMaximum(p, spec.rows[t]) <= options.budget) continue;  // cannot bind
    milp::Expr row;
    double constant_bytes = 0.0;
    const std::vector<MemTerm>& own = spec.rows[t];
    for (size_t i = 0, j = 0; i < own.size() || j < tails.size();) {
      const bool take_own = j == tails.size() || (i < own.size() && own[i].node < tails[j].node);
      builder.AddTerm(take_own ? own[i++] : tails[j++], row, constant_bytes);
    }
    const double constant = constant_bytes / m.memory_unit;
    if (options.min_peak) {
      row.Add(milp::Var{m.peak}, -1.0);
      m.model.AddLessEqual(row, -constant);
    } else {
      m.model.AddLessEqual(row, budget_units - constant);
    }
    ++m.budget_rows;
  }
}

std::vector<double> ModelAssignment(const JointModel& m, const JointProblem& p, const JointModelSpec& spec,
                                    const JointSolution& s) {
  std::vector<double> v(Z(m.model.num_vars()), 0.0);
  const auto n = Z(p.graph->size());
  std::vector<size_t> chosen(n);
  for (size_t node = 0; node < n; ++node) {
    const std::vector<int32_t>& allowed = p.allowed[node];
    chosen[node] = Z(std::lower_bound(allowed.begin(), allowed.end(), s.strategy[node]) - allowed.begin());
    const int32_t var = m.x[node][chosen[node]][s.recompute[node] ? 1 : 0];
    if (var >= 0) v[Z(var)] = 1.0;
    const double bytes = static_cast<double>(p.Memory(static_cast<ir::NodeId>(node), s.strategy[node])) / m.memory_unit;
    if (m.mem[node] >= 0) v[Z(m.mem[node])] = bytes;
    if (m.kept[node] >= 0) v[Z(m.kept[node])] = s.recompute[node] ? 0.0 : bytes;
    for (size_t j = 0; j < m.segment[node].size(); ++j) {
      if (m.segment[node][j] < 0) continue;
      bool held = false;
      for (ir::NodeId w : spec.extensions[node][j].consumers) held = held || s.recompute[Z(w)];
      v[Z(m.segment[node][j])] = held ? bytes : 0.0;
    }
  }
  for (const JointModel::Product& prod : m.products)
    if (!prod.y.empty() && s.recompute[Z(prod.consumer)]) v[Z(prod.y[chosen[Z(prod.node)]])] = 1.0;
  for (const JointModel::Pair& pair : m.pairs) {
    const int32_t f = pair.producer_class[chosen[Z(pair.u)]];
    const int32_t g = pair.consumer_class[chosen[Z(pair.v)]];
    const int32_t mode = pair.modes == 2 && s.recompute[Z(pair.v)] ? 1 : 0;
    v[Z(pair.vars[Z((f * pair.consumer_classes + g) * pair.modes + mode)])] = 1.0;
  }
  if (m.peak >= 0) {
    const SpecEvaluation e = EvaluateSpec(p, spec, s);
    v[Z(m.peak)] = static_cast<double>(e.peak) / m.memory_unit;
  }
  return v;
}

}  // namespace kiwi::solve::joint
