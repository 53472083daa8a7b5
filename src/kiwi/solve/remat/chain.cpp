#include "kiwi/solve/remat/chain.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiwi::solve::remat {
namespace {

// The non-persistent nodes in execution order ("spine", 1-based) and, per spine node, the spine
// indices it reads (sorted, unique).
struct Spine {
  std::vector<ir::NodeId> node{ir::kNoNode};
  std::vector<std::vector<int32_t>> reads{{}};
  int32_t size() const { return static_cast<int32_t>(node.size()) - 1; }
};

std::string Label(const ir::Graph& g, ir::NodeId v) { return fmt::format("node {} '{}'", v, g.node(v).name); }

std::optional<Spine> MakeSpine(const RematProblem& p, std::string& why) {
  const ir::Graph& g = *p.graph;
  Spine s;
  std::vector<int32_t> index(static_cast<size_t>(g.size()), 0);
  for (ir::NodeId v : p.order) {
    if (p.persistent[static_cast<size_t>(v)]) {
      if (!g.node(v).inputs.empty()) {
        why = fmt::format("persistent {} has inputs", Label(g, v));
        return std::nullopt;
      }
      continue;
    }
    index[static_cast<size_t>(v)] = static_cast<int32_t>(s.node.size());
    s.node.push_back(v);
    std::vector<int32_t> reads;
    for (ir::NodeId in : g.node(v).inputs)
      if (!p.persistent[static_cast<size_t>(in)]) reads.push_back(index[static_cast<size_t>(in)]);
    std::sort(reads.begin(), reads.end());
    reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
    s.reads.push_back(std::move(reads));
  }
  if (s.size() == 0) why = "the graph has no non-persistent node";
  if (s.size() == 0) return std::nullopt;
  return s;
}

// Checks the spine against the split "n forward ops, first backward op b_h". Returns the number of
// spine nodes that fit before the first that does not (s.size() when all fit) and says why in `why`.
int32_t FitPrefix(const RematProblem& p, const Spine& s, int32_t n, int32_t h, std::string& why) {
  const ir::Graph& g = *p.graph;
  for (int32_t j = 1; j <= n; ++j) {
    const std::vector<int32_t> expected = j == 1 ? std::vector<int32_t>{} : std::vector<int32_t>{j - 1};
    if (s.reads[static_cast<size_t>(j)] != expected) {
      why = fmt::format("{} reads {} non-persistent nodes, but forward op f_{} may read only f_{}",
                        Label(g, s.node[static_cast<size_t>(j)]), s.reads[static_cast<size_t>(j)].size(), j, j - 1);
      return j - 1;
    }
  }
  for (int32_t j = n + 1; j <= s.size(); ++j) {
    const int32_t t = h + n + 1 - j;  // spine node j is b_t
    const std::vector<int32_t>& reads = s.reads[static_cast<size_t>(j)];
    const bool has_incoming = j > n + 1;
    if (has_incoming && !std::binary_search(reads.begin(), reads.end(), j - 1)) {
      why = fmt::format("{} does not read the backward op before it ({})", Label(g, s.node[static_cast<size_t>(j)]),
                        Label(g, s.node[static_cast<size_t>(j) - 1]));
      return j - 1;
    }
    for (int32_t r : reads) {
      const bool ok = (has_incoming && r == j - 1) || (r <= n && (r == t - 1 || r == t));
      if (!ok) {
        why = fmt::format("{} reads {}, which is neither the incoming gradient nor forward op f_{} or f_{}",
                          Label(g, s.node[static_cast<size_t>(j)]), Label(g, s.node[static_cast<size_t>(r)]), t - 1, t);
        return j - 1;
      }
    }
  }
  return s.size();
}

Chain FillChain(const RematProblem& p, const Spine& s, int32_t n, int32_t h) {
  Chain c;
  c.n = n;
  c.h = h;
  c.l = h + n + 1 - s.size();
  const auto fsize = static_cast<size_t>(n) + 1;
  const auto bsize = static_cast<size_t>(h) + 2;
  c.forward.assign(fsize, ir::kNoNode);
  c.a.assign(fsize, 0);
  c.u.assign(fsize, 0.0);
  c.forward_position.assign(fsize, -1);
  c.persistent_at_forward.assign(fsize, 0);
  c.backward.assign(bsize, ir::kNoNode);
  c.d.assign(bsize, 0);
  c.w.assign(bsize, 0.0);
  c.reads.assign(bsize, 0);
  c.backward_position.assign(bsize, -1);
  c.persistent_at_backward.assign(bsize, 0);
  for (int32_t j = 1; j <= s.size(); ++j) {
    const ir::NodeId v = s.node[static_cast<size_t>(j)];
    const auto vi = static_cast<size_t>(v);
    if (j <= n) {
      c.forward[static_cast<size_t>(j)] = v;
      c.a[static_cast<size_t>(j)] = p.memory[vi];
      c.u[static_cast<size_t>(j)] = p.cost[vi];
      continue;
    }
    const auto t = static_cast<size_t>(h + n + 1 - j);
    c.backward[t] = v;
    c.d[t] = p.memory[vi];
    c.w[t] = p.cost[vi];
    for (int32_t r : s.reads[static_cast<size_t>(j)]) {
      if (r > n) continue;
      c.reads[t] |= static_cast<size_t>(r) + 1 == t ? kReadsPrevious : kReadsSame;
    }
  }
  // Persistent bytes before each chain op, by position (Checkmate computes order[k] at stage k).
  std::vector<int32_t> chain_slot(static_cast<size_t>(p.graph->size()), 0);  // +i: f_i, -t: b_t
  for (int32_t i = 1; i <= n; ++i) chain_slot[static_cast<size_t>(c.forward[static_cast<size_t>(i)])] = i;
  for (int32_t t = c.l; t <= h; ++t) chain_slot[static_cast<size_t>(c.backward[static_cast<size_t>(t)])] = -t;
  int64_t resident = 0;
  for (size_t k = 0; k < p.order.size(); ++k) {
    const ir::NodeId v = p.order[k];
    const auto vi = static_cast<size_t>(v);
    if (p.persistent[vi]) {
      resident += p.memory[vi];
      c.persistent.push_back(v);
      c.persistent_bytes.push_back(p.memory[vi]);
      c.persistent_position.push_back(static_cast<int32_t>(k));
      c.persistent_cost += p.cost[vi];
    } else if (chain_slot[vi] > 0) {
      c.persistent_at_forward[static_cast<size_t>(chain_slot[vi])] = resident;
      c.forward_position[static_cast<size_t>(chain_slot[vi])] = static_cast<int32_t>(k);
    } else {
      c.persistent_at_backward[static_cast<size_t>(-chain_slot[vi])] = resident;
      c.backward_position[static_cast<size_t>(-chain_slot[vi])] = static_cast<int32_t>(k);
    }
  }
  c.persistent_total = resident;
  return c;
}

}  // namespace

double Chain::BaselineCost() const {
  double total = persistent_cost;
  for (int32_t i = 1; i <= n; ++i) total += u[static_cast<size_t>(i)];
  for (int32_t t = l; t <= h; ++t) total += w[static_cast<size_t>(t)];
  return total;
}

std::optional<Chain> ExtractChain(const RematProblem& problem, std::string* why_not) {
  std::string why;
  std::optional<Spine> spine = MakeSpine(problem, why);
  if (!spine) {
    if (why_not) *why_not = why;
    return std::nullopt;
  }
  const int32_t size = spine->size();
  int32_t best_fit = -1;
  // Every split (n forward ops, loss-like b_{n+1} or not) describes the same schedules; the first
  // that fits wins, and the one that fits furthest explains a failure.
  for (int32_t n = size - 1; n >= 0; --n) {
    for (int32_t h : {n + 1, n}) {
      if (h < 1 || h + n + 1 - size < 1) continue;  // l >= 1
      std::string reason;
      const int32_t fit = FitPrefix(problem, *spine, n, h, reason);
      if (fit == size) return FillChain(problem, *spine, n, h);
      if (fit > best_fit) best_fit = fit, why = reason;
    }
  }
  if (why.empty()) why = "its backward ops outnumber its forward ops";
  if (why_not) *why_not = why;
  return std::nullopt;
}

ir::Graph BuildTrainingChain(const TrainingChainSpec& spec) {
  const auto layers = static_cast<int32_t>(spec.forward_bytes.size());
  ir::Graph g("training_chain");
  auto add = [&](std::string name, int64_t bytes, double cost, std::vector<ir::NodeId> inputs, ir::OpKind kind) {
    ir::Node node;
    node.name = std::move(name);
    node.kind = kind;
    node.output = {ir::DType::kU8, {bytes}};
    if (kind == ir::OpKind::kOpaque) node.measured_cost = cost;
    node.inputs = std::move(inputs);
    return g.Add(std::move(node));
  };
  std::vector<ir::NodeId> f(static_cast<size_t>(layers) + 1, ir::kNoNode);
  std::vector<ir::NodeId> w(static_cast<size_t>(layers) + 1, ir::kNoNode);
  for (int32_t i = 1; i <= layers; ++i) {
    const auto k = static_cast<size_t>(i);
    std::vector<ir::NodeId> in;
    if (i > 1) in.push_back(f[k - 1]);
    if (spec.parameter_bytes > 0) {
      w[k] = add(fmt::format("w{}", i), spec.parameter_bytes, 0.0, {}, ir::OpKind::kParameter);
      in.push_back(w[k]);
    }
    f[k] = add(fmt::format("f{}", i), spec.forward_bytes[k - 1], spec.forward_cost[k - 1], in, ir::OpKind::kOpaque);
  }
  ir::NodeId incoming = ir::kNoNode;
  if (spec.loss) incoming = add("loss", spec.loss_bytes, spec.loss_cost, {f.back()}, ir::OpKind::kOpaque);
  for (int32_t i = layers; i >= 1; --i) {
    const auto k = static_cast<size_t>(i);
    std::vector<ir::NodeId> in;
    if (incoming != ir::kNoNode) in.push_back(incoming);
    if ((spec.reads & kReadsPrevious) && i > 1) in.push_back(f[k - 1]);
    if (spec.reads & kReadsSame) in.push_back(f[k]);
    if (w[k] != ir::kNoNode) in.push_back(w[k]);
    incoming = add(fmt::format("b{}", i), spec.backward_bytes[k - 1], spec.backward_cost[k - 1], in,
                   ir::OpKind::kOpaque);
  }
  return g;
}

}  // namespace kiwi::solve::remat
