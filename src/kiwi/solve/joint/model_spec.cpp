// Building the MILP's specs (model_spec.h) and their exact accounting.
#include "kiwi/solve/joint/model_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <map>

namespace kiwi::solve::joint {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

// eq. 10 for a kept tensor x: its recomputable consumers needing it after its last use, grouped into
// segments (live_x, h_1], (h_1, h_2], ... by their distinct H; segment j holds those with H >= h_j.
// Appends the terms to the rows.
void AddExtension(const JointProblem& p, ir::NodeId x, JointModelSpec& spec) {
  const NodeTiming& tx = p.timing[Z(x)];
  std::map<int32_t, std::vector<ir::NodeId>> by_h;
  for (ir::NodeId w : p.consumers[Z(x)]) {
    const NodeTiming& tw = p.timing[Z(w)];
    if (tw.candidate && tw.first_backward_use > tx.last_use) by_h[tw.first_backward_use].push_back(w);
  }
  int32_t from = tx.last_use + 1;
  std::vector<ExtensionSegment>& segments = spec.extensions[Z(x)];
  for (auto it = by_h.begin(); it != by_h.end(); ++it) {
    ExtensionSegment seg;
    for (auto rest = it; rest != by_h.end(); ++rest) seg.consumers.insert(seg.consumers.end(), rest->second.begin(), rest->second.end());
    std::sort(seg.consumers.begin(), seg.consumers.end());
    for (int32_t t = from; t <= it->first; ++t)
      spec.rows[Z(t)].push_back({x, TermKind::kExtension, static_cast<int32_t>(segments.size())});
    segments.push_back(std::move(seg));
    from = it->first + 1;
  }
}

// x resident as `kind` at steps [begin, end]; to the last step, one tail term.
void AddTerms(JointModelSpec& spec, ir::NodeId x, int32_t begin, int32_t end, TermKind kind) {
  if (begin > end) return;
  if (Z(end) + 1 == spec.rows.size()) {
    spec.tails.push_back({{x, kind, 0}, begin});
    return;
  }
  for (int32_t t = begin; t <= end; ++t) spec.rows[Z(t)].push_back({x, kind, 0});
}

// Whether `b` holds at least what `a` does for one node: the same term, or kMemory.
bool Holds(const MemTerm& b, const MemTerm& a) { return b == a || b.kind == TermKind::kMemory; }

// The specs append terms node by node, so every row is sorted by node (what Covered needs) without
// sorting them: at 200 layers the rows held about 10^8 terms, and sorting them took a quarter of the
// build. Tails are sorted by their first step.
void FinishRows(JointModelSpec& spec, size_t nodes) {
  assert(std::all_of(spec.rows.begin(), spec.rows.end(),
                     [](const std::vector<MemTerm>& row) { return std::is_sorted(row.begin(), row.end(), ByNode); }));
  std::sort(spec.tails.begin(), spec.tails.end(), [](const TailTerm& a, const TailTerm& b) {
    return a.first != b.first ? a.first < b.first : a.term.node < b.term.node;
  });
  spec.tail_of.assign(nodes, -1);
  for (size_t k = 0; k < spec.tails.size(); ++k) {
    assert(spec.tail_of[Z(spec.tails[k].term.node)] < 0);  // a node's residencies do not overlap
    spec.tail_of[Z(spec.tails[k].term.node)] = static_cast<int32_t>(k);
  }
  spec.row_needed.assign(spec.rows.size(), 1);
}

// Tails resident at step t: tails[0, TailsAt(t)).
size_t TailsAt(const JointModelSpec& spec, size_t t) {
  return Z(std::upper_bound(spec.tails.begin(), spec.tails.end(), static_cast<int32_t>(t),
                            [](int32_t step, const TailTerm& tail) { return step < tail.first; }) -
           spec.tails.begin());
}

// Whether every term resident at step t is also resident at step u as the same term or as kMemory of
// the same node (which holds at least as much).
bool Covered(const JointModelSpec& spec, size_t t, size_t u) {
  const std::vector<MemTerm>& a = spec.rows[t];
  const std::vector<MemTerm>& b = spec.rows[u];
  size_t j = 0;
  for (const MemTerm& term : a) {
    while (j < b.size() && b[j].node < term.node) ++j;
    if (j < b.size() && b[j].node == term.node) {
      if (!Holds(b[j], term)) return false;
      continue;
    }
    const int32_t k = spec.tail_of[Z(term.node)];
    if (k < 0 || Z(spec.tails[Z(k)].first) > u || !Holds(spec.tails[Z(k)].term, term)) return false;
  }
  // Tails resident at t but not yet at u (u < t) must be held by u's own terms.
  for (size_t k = TailsAt(spec, u); k < TailsAt(spec, t); ++k) {
    const MemTerm& term = spec.tails[k].term;
    const auto it = std::lower_bound(b.begin(), b.end(), term, ByNode);
    if (it == b.end() || it->node != term.node || !Holds(*it, term)) return false;
  }
  return true;
}

int64_t TermBytes(const JointProblem& p, const JointModelSpec& spec, const JointSolution& s, const MemTerm& term) {
  const int64_t bytes = p.Memory(term.node, s.strategy[Z(term.node)]);
  switch (term.kind) {
    case TermKind::kMemory: return bytes;
    case TermKind::kKept: return s.recompute[Z(term.node)] ? 0 : bytes;
    case TermKind::kExtension:
      for (ir::NodeId w : spec.extensions[Z(term.node)][Z(term.segment)].consumers)
        if (s.recompute[Z(w)]) return bytes;
      return 0;
  }
  return bytes;
}

}  // namespace

JointModelSpec KiwiSpec(const JointProblem& p) {
  JointModelSpec spec;
  const auto n = Z(p.graph->size());
  spec.executions.assign(n, 1);
  spec.recomputable.assign(n, 0);
  spec.extensions.assign(n, {});
  spec.rows.assign(Z(p.size()), {});
  for (ir::NodeId x = 0; x < p.graph->size(); ++x) {
    const NodeTiming& t = p.timing[Z(x)];
    if (t.persistent) {
      AddTerms(spec, x, t.position, p.size() - 1, TermKind::kMemory);
      continue;
    }
    if (t.candidate) {  // eq. 5-7: dropped after f_x, back from H_x (memRecomputed) to live_x
      spec.recomputable[Z(x)] = 1;
      AddTerms(spec, x, t.position, t.last_forward_use, TermKind::kMemory);
      AddTerms(spec, x, t.last_forward_use + 1, t.first_backward_use - 1, TermKind::kKept);
      AddTerms(spec, x, t.first_backward_use, t.last_use, TermKind::kMemory);
      for (ir::NodeId in : p.graph->node(x).inputs)
        if (p.timing[Z(in)].candidate) spec.exclusive.emplace_back(x, in);
    } else {
      AddTerms(spec, x, t.position, t.last_use, TermKind::kMemory);
    }
    AddExtension(p, x, spec);
  }
  std::sort(spec.exclusive.begin(), spec.exclusive.end());
  spec.exclusive.erase(std::unique(spec.exclusive.begin(), spec.exclusive.end()), spec.exclusive.end());
  FinishRows(spec, n);
  return spec;
}

Result<JointModelSpec> FixedScheduleSpec(const JointProblem& p, const std::vector<plan::Step>& schedule) {
  const auto n = Z(p.graph->size());
  JointModelSpec spec;
  spec.executions.assign(n, 0);
  spec.recomputable.assign(n, 0);
  spec.extensions.assign(n, {});
  std::vector<int32_t> since(n, -1);  // compute index the resident copy was made at, -1: not resident
  int32_t computes = 0;
  struct Residency { ir::NodeId node; int32_t first, last; };  // rows a resident copy spans
  std::vector<Residency> residencies;
  auto close = [&](size_t v, int32_t last) { residencies.push_back({static_cast<ir::NodeId>(v), since[v], last}); };
  for (size_t k = 0; k < schedule.size(); ++k) {
    const plan::Step& step = schedule[k];
    if (step.node < 0 || Z(step.node) >= n) return Internal(fmt::format("schedule[{}]: node {} out of range", k, step.node));
    const auto v = Z(step.node);
    if (step.kind == plan::StepKind::kCompute) {
      if (since[v] >= 0) return Internal(fmt::format("schedule[{}]: computes resident node {}", k, v));
      since[v] = computes++;
      ++spec.executions[v];
      spec.rows.emplace_back();
    } else {
      if (since[v] < 0) return Internal(fmt::format("schedule[{}]: frees node {} that is not resident", k, v));
      close(v, computes - 1);
      since[v] = -1;
    }
  }
  for (size_t v = 0; v < n; ++v) {
    if (spec.executions[v] == 0) return Internal(fmt::format("schedule: node {} is never computed", v));
    if (since[v] >= 0) close(v, computes - 1);
  }
  std::sort(residencies.begin(), residencies.end(),
            [](const Residency& a, const Residency& b) { return a.node != b.node ? a.node < b.node : a.first < b.first; });
  for (const Residency& r : residencies) AddTerms(spec, r.node, r.first, r.last, TermKind::kMemory);
  FinishRows(spec, n);
  return spec;
}

void PruneImpliedRows(JointModelSpec& spec) {
  const size_t n = spec.rows.size();
  spec.row_needed.assign(n, 1);
  // Forward: a row covered by the next one (which is kept or, in turn, covered further on).
  for (size_t t = 0; t + 1 < n; ++t)
    if (Covered(spec, t, t + 1)) spec.row_needed[t] = 0;
  // Backward over the rows still needed: covered by the previous needed row.
  size_t prev = n;
  for (size_t t = 0; t < n; ++t) {
    if (!spec.row_needed[t]) continue;
    if (prev < n && Covered(spec, t, prev)) spec.row_needed[t] = 0;
    else prev = t;
  }
}

SpecEvaluation EvaluateSpec(const JointProblem& p, const JointModelSpec& spec, const JointSolution& s) {
  SpecEvaluation e;
  for (ir::NodeId v = 0; v < p.graph->size(); ++v) {
    int64_t c = p.lowered.problem.nodes[Z(v)].cost[Z(s.strategy[Z(v)])];
    const auto kv = Z(p.lowered.problem.nodes[Z(v)].strategies());
    for (int32_t edge : p.in_edges[Z(v)]) {
      const ir::ShardingEdge& ed = p.lowered.problem.edges[Z(edge)];
      c = ir::AddCost(c, ed.cost[Z(s.strategy[Z(ed.u)]) * kv + Z(s.strategy[Z(v)])]);
    }
    const int32_t runs = spec.executions[Z(v)] + (s.recompute[Z(v)] ? 1 : 0);
    for (int32_t r = 0; r < runs; ++r) e.cost = ir::AddCost(e.cost, c);
  }
  int64_t tail_bytes = 0;  // of the tails resident so far
  for (size_t t = 0, k = 0; t < spec.rows.size(); ++t) {
    for (; k < spec.tails.size() && Z(spec.tails[k].first) <= t; ++k) tail_bytes += TermBytes(p, spec, s, spec.tails[k].term);
    int64_t bytes = tail_bytes;
    for (const MemTerm& term : spec.rows[t]) bytes += TermBytes(p, spec, s, term);
    e.memory.push_back(bytes);
    if (bytes > e.peak || e.peak_row < 0) e.peak = bytes, e.peak_row = static_cast<int32_t>(t);
  }
  return e;
}

std::vector<MemTerm> RowTerms(const JointModelSpec& spec, size_t t) {
  std::vector<MemTerm> terms = spec.rows[t];
  for (size_t k = 0; k < TailsAt(spec, t); ++k) terms.push_back(spec.tails[k].term);
  std::sort(terms.begin(), terms.end(), ByNode);
  return terms;
}

}  // namespace kiwi::solve::joint
