#include "kiwi/solve/sharding/message_passing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace kiwi::solve::sharding {
namespace {

size_t Z(int64_t i) { return static_cast<size_t>(i); }

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int32_t kSweepsPerCheck = 5;        // sweep pairs between two evaluations of the bound
constexpr double kConverged = 1e-9;           // relative rise of the bound below which sweeping stops

double Priced(int64_t cost) { return cost >= ir::kForbiddenCost ? kForbiddenPriced : static_cast<double>(cost); }

}  // namespace

// The core's unary costs as doubles and one message per edge direction.
class MessageState {
 public:
  explicit MessageState(const ReducedProblem& core) : core_(core), unary_(core.nodes.size()) {
    SetPrices({});
    to_u_.resize(core.edges.size());
    to_v_.resize(core.edges.size());
    for (size_t e = 0; e < core.edges.size(); ++e) {
      to_u_[e].assign(Z(core.nodes[Z(core.edges[e].u)].strategies()), 0.0);
      to_v_[e].assign(Z(core.nodes[Z(core.edges[e].v)].strategies()), 0.0);
    }
    weight_.resize(core.nodes.size(), 1.0);
    for (size_t i = 0; i < core.nodes.size(); ++i) {
      int32_t before = 0, after = 0;
      for (const Incidence& in : core.nodes[i].incident) (Z(in.neighbor) < i ? before : after) += 1;
      weight_[i] = 1.0 / std::max({before, after, 1});  // 1 / the node's number of monotonic chains
    }
  }

  void SetPrices(const NodePrices& prices) {
    for (size_t i = 0; i < unary_.size(); ++i) {
      const std::vector<int64_t>& cost = core_.nodes[i].cost;
      unary_[i].resize(cost.size());
      for (size_t s = 0; s < cost.size(); ++s) unary_[i][s] = Priced(cost[s]) + (prices.empty() ? 0.0 : prices[i][s]);
    }
  }

  // One forward and one backward sweep.
  void Sweep() {
    const size_t n = unary_.size();
    for (size_t i = 0; i < n; ++i) Send(i, true);
    for (size_t i = n; i-- > 0;) Send(i, false);
  }

  // The same costs reparametrised: per edge (and per node without edges) the terms whose sum over an
  // assignment is its cost; Bound() is the sum of their minima.
  void Terms(std::vector<std::vector<double>>& edge_terms, std::vector<std::vector<double>>& node_terms) {
    std::vector<std::vector<double>> belief(unary_.size());
    node_terms.assign(unary_.size(), {});
    for (size_t i = 0; i < unary_.size(); ++i) {
      Belief(i, belief[i]);
      const size_t degree = core_.nodes[i].incident.size();
      if (degree == 0) node_terms[i] = belief[i];
      for (double& b : belief[i]) b /= static_cast<double>(std::max<size_t>(degree, 1));
    }
    edge_terms.resize(core_.edges.size());
    for (size_t e = 0; e < core_.edges.size(); ++e) {
      const ReducedEdge& edge = core_.edges[e];
      const std::vector<double>& bu = belief[Z(edge.u)];
      const std::vector<double>& bv = belief[Z(edge.v)];
      edge_terms[e].resize(bu.size() * bv.size());
      for (size_t a = 0; a < bu.size(); ++a)
        for (size_t b = 0; b < bv.size(); ++b)
          edge_terms[e][a * bv.size() + b] = bu[a] - to_u_[e][a] + edge.priced[a * bv.size() + b] + bv[b] - to_v_[e][b];
    }
  }

  // The reparametrised costs' per-edge minima, each node's belief split evenly over its edges.
  double Bound() {
    std::vector<std::vector<double>> belief(unary_.size());
    double bound = 0.0;
    for (size_t i = 0; i < unary_.size(); ++i) {
      Belief(i, belief[i]);
      const size_t degree = core_.nodes[i].incident.size();
      if (degree == 0) bound += *std::min_element(belief[i].begin(), belief[i].end());
      for (double& b : belief[i]) b /= static_cast<double>(std::max<size_t>(degree, 1));
    }
    for (size_t e = 0; e < core_.edges.size(); ++e) {
      const ReducedEdge& edge = core_.edges[e];
      const std::vector<double>& bu = belief[Z(edge.u)];
      const std::vector<double>& bv = belief[Z(edge.v)];
      double low = kInf;
      for (size_t a = 0; a < bu.size(); ++a) {
        const double left = bu[a] - to_u_[e][a];
        const double* row = edge.priced.data() + a * bv.size();
        for (size_t b = 0; b < bv.size(); ++b) low = std::min(low, left + row[b] + bv[b] - to_v_[e][b]);
      }
      bound += low;
    }
    return bound;
  }

 private:
  // Into node i along `in`, and out of it.
  std::vector<double>& In(const Incidence& in) { return in.self_is_u ? to_u_[Z(in.edge)] : to_v_[Z(in.edge)]; }
  std::vector<double>& Out(const Incidence& in) { return in.self_is_u ? to_v_[Z(in.edge)] : to_u_[Z(in.edge)]; }
  // Row x_self of the edge's matrix, over the neighbour's strategies.
  const double* Row(const Incidence& in, size_t x_self) const {
    const ReducedEdge& e = core_.edges[Z(in.edge)];
    return (in.self_is_u ? e.priced.data() : e.priced_t.data()) + x_self * Z(core_.nodes[Z(in.neighbor)].strategies());
  }

  // The unary plus every incoming message.
  void Belief(size_t i, std::vector<double>& b) {
    b = unary_[i];
    for (const Incidence& in : core_.nodes[i].incident) {
      const std::vector<double>& m = In(in);
      for (size_t x = 0; x < b.size(); ++x) b[x] += m[x];
    }
  }

  // Node i's messages to its later (forward) or earlier neighbours, normalised to a least entry of 0.
  void Send(size_t i, bool forward) {
    Belief(i, belief_);
    for (const Incidence& in : core_.nodes[i].incident) {
      if ((Z(in.neighbor) > i) != forward) continue;
      const std::vector<double>& back = In(in);
      std::vector<double>& out = Out(in);
      std::fill(out.begin(), out.end(), kInf);
      for (size_t x = 0; x < belief_.size(); ++x) {
        const double a = weight_[i] * belief_[x] - back[x];
        const double* row = Row(in, x);
        for (size_t y = 0; y < out.size(); ++y) out[y] = std::min(out[y], a + row[y]);
      }
      const double low = *std::min_element(out.begin(), out.end());
      for (double& v : out) v -= low;
    }
  }

  const ReducedProblem& core_;
  std::vector<std::vector<double>> unary_;
  std::vector<std::vector<double>> to_u_, to_v_;  // per edge: the message into u, into v
  std::vector<double> weight_;
  std::vector<double> belief_;  // scratch
};

MessagePassing::MessagePassing(const ReducedProblem& core) : state_(std::make_unique<MessageState>(core)) {}
MessagePassing::~MessagePassing() = default;

void MessagePassing::SetPrices(const NodePrices& prices) { state_->SetPrices(prices); }

void MessagePassing::Reparametrised(std::vector<std::vector<double>>& edge_terms,
                                    std::vector<std::vector<double>>& node_terms) {
  state_->Terms(edge_terms, node_terms);
}

MessagePassingBound MessagePassing::LowerBound(double seconds) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  MessagePassingBound out;
  out.lower_bound = state_->Bound();
  while (true) {
    for (int32_t k = 0; k < kSweepsPerCheck; ++k) {
      state_->Sweep();
      ++out.sweeps;
      if (Clock::now() >= end) break;
    }
    const double bound = state_->Bound();
    const bool rising = bound > out.lower_bound + kConverged * std::max(1.0, std::abs(out.lower_bound));
    out.lower_bound = std::max(out.lower_bound, bound);
    if (!rising || Clock::now() >= end) break;
  }
  return out;
}

}  // namespace kiwi::solve::sharding
