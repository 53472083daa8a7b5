#include "kiwi/solve/hybrid/layer_dp.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <limits>
#include <map>
#include <vector>

#include "kiwi/solve/hybrid/completion_bound.h"

namespace kiwi::solve::hybrid {
namespace {

struct Label {
  int64_t memory = 0;     // additive bytes of the stage so far (model states + in-flight activations)
  int64_t headroom = 0;   // what its backward pass holds beyond that at its peak (cost::StageMemory::Headroom)
  double cost = 0.0;      // weighted objective so far (exact mode: sum of C_s + G_s so far)
  double stage_seconds = 0.0;  // exact mode: C of the current stage so far
  double slowest = 0.0;        // exact mode: largest C_s of the finished stages
  double stage_optimizer = 0.0;    // exact mode: O of the current stage so far (its optimizer step)
  double slowest_optimizer = 0.0;  // exact mode: largest O_s of the finished stages
  int32_t parent = -1;    // index in the previous layer's labels
  int16_t strategy = -1;
  int16_t layout = 0;     // layout index of `strategy` (CostTables::LayoutIndex)
  int64_t Peak() const { return memory + headroom; }
  double Bottleneck() const { return std::max(slowest, stage_seconds); }
  double OptimizerStep() const { return std::max(slowest_optimizer, stage_optimizer); }
};

// Exact mode: Eq. 8 plus the slowest stage's optimizer step (every stage steps at once after the
// flush, as EstimatePipeline and the simulator have it) of a finished (or a lower bound of an
// unfinished) chain of stages.
double PipelineSeconds(const LayerDpProblem& p, const Label& l) {
  return cost::PipelineIterationSeconds(p.micro_batches, l.Bottleneck(), l.cost, l.OptimizerStep());
}

// A strategy as one layer of one stage sees it: weighted time and the memory terms (Eq. 1, 4).
struct Option : StageTerms {
  int strategy = 0;
  int layout = 0;
  double cost = 0.0;       // weight * c + g (+ the embeddings on the first layer, the head on the last)
  double seconds = 0.0;    // c
  double weight = 1.0;
  double optimizer = 0.0;  // the optimizer step over the layer's states (exact mode's O_s)
};

Option MakeOption(const CostTables& t, const StrategyCost& c, const DpStage& stage, int strategy) {
  Option o;
  static_cast<StageTerms&>(o) = t.StageTermsOf(c.memory, stage.in_flight);
  o.strategy = strategy;
  o.layout = t.LayoutIndex(strategy);
  o.cost = stage.weight * c.microbatch_seconds + stage.optimizer_weight * c.optimizer_seconds + c.sync_seconds;
  o.seconds = c.microbatch_seconds;
  o.weight = stage.weight;
  o.optimizer = c.optimizer_seconds;
  return o;
}

// Options of layer `layer`, without those another option of the same layout beats on every count
// (identical layers share these lists' shape; this is where the 14 strategies of 8 GPUs shrink).
std::vector<Option> LayerOptions(const LayerDpProblem& p, const DpStage& stage, int layer, int64_t budget) {
  const CostTables& t = *p.tables;
  std::vector<Option> all;
  for (int j = 0; j < t.num_strategies(); ++j) {
    if (!p.allowed.empty() && !p.allowed[static_cast<size_t>(j)]) continue;
    if (!t.Places(layer, j)) continue;
    const Option o = MakeOption(t, t.LayerCost(layer, j), stage, j);
    if (o.Peak() <= budget) all.push_back(o);
  }
  std::vector<Option> kept;
  for (size_t a = 0; a < all.size(); ++a) {
    bool dominated = false;
    for (size_t b = 0; b < all.size() && !dominated; ++b) {
      const Option &x = all[a], &y = all[b];
      if (a == b || x.layout != y.layout) continue;
      // After any label of headroom h, an option adds memory + max(h - activations, headroom) to the
      // peak: no more with y for every h when both of its terms are no larger.
      const bool no_worse = y.cost <= x.cost && y.memory <= x.memory && y.Peak() <= x.Peak() &&
                            y.memory - y.activations <= x.memory - x.activations &&
                            (!p.exact || (y.seconds <= x.seconds && y.optimizer <= x.optimizer));
      const bool equal = y.cost == x.cost && y.memory == x.memory && y.headroom == x.headroom &&
                         y.activations == x.activations && y.seconds == x.seconds && y.optimizer == x.optimizer;
      dominated = no_worse && (!equal || b < a);
    }
    if (!dominated) kept.push_back(all[a]);
  }
  return kept;
}

// Keeps the labels no other label beats in every completion of the stage: y beats x when it is no
// slower and holds no more memory and no higher a peak (a completion adds to the peak the larger of
// the label's peak less the completion's activations and the label's memory plus the completion's
// headroom: both no larger with y). Labels are visited cheapest first, so only kept ones can beat a
// label; the kept (memory, peak) pairs that no other kept pair beats form a staircase (peaks falling as
// memory grows), and x is beaten when the staircase's step at its memory is no higher than its peak.
class Staircase {
 public:
  bool Beaten(int64_t memory, int64_t peak) const {
    auto it = steps_.upper_bound(memory);
    return it != steps_.begin() && std::prev(it)->second <= peak;
  }
  void Add(int64_t memory, int64_t peak) {
    auto it = steps_.lower_bound(memory);
    while (it != steps_.end() && it->second >= peak) it = steps_.erase(it);
    steps_[memory] = peak;
  }

 private:
  std::map<int64_t, int64_t> steps_;  // memory -> least peak with at most that memory
};

std::vector<Label> ParetoLabels(std::vector<Label> labels) {
  std::sort(labels.begin(), labels.end(), [](const Label& a, const Label& b) {
    if (a.cost != b.cost) return a.cost < b.cost;
    return a.Peak() < b.Peak();
  });
  Staircase front;
  std::vector<Label> kept;
  for (const Label& x : labels) {
    if (front.Beaten(x.memory, x.Peak())) continue;
    kept.push_back(x);
    front.Add(x.memory, x.Peak());
  }
  return kept;
}

// Whether Thin cuts a state of `size` labels (it needs at least two memory buckets).
bool Thinned(size_t size, size_t max_labels) { return size > max_labels && max_labels >= 2; }

// Exact mode: y beats x when it is also no slower in the current stage, no worse a bottleneck, and no
// slower an optimizer step (its stage's so far, and the slowest of the finished stages).
// Pairwise, but indexed: the kept labels sit sorted by memory, so x is checked only against those with
// no more memory than it; their other terms sit in flat arrays, the scan's hot loop. Labels come
// cheapest first, so the kept ones hold the most memory: few pass the bound. Once more than
// `max_labels` labels are kept the filter stops: the state will be thinned, and an exact run stops at
// its first thinned state (SolveLayerDp), so the rest would be filtered for nothing.
class ExactFront {
 public:
  bool Beaten(const Label& x) const {
    const double x_bottleneck = x.Bottleneck(), x_optimizer_step = x.OptimizerStep();
    const int64_t x_peak = x.Peak();
    const size_t end = static_cast<size_t>(std::upper_bound(memory_.begin(), memory_.end(), x.memory) - memory_.begin());
    for (size_t k = 0; k < end; ++k)
      if (peak_[k] <= x_peak && stage_optimizer_[k] <= x.stage_optimizer && optimizer_step_[k] <= x_optimizer_step &&
          stage_seconds_[k] <= x.stage_seconds && bottleneck_[k] <= x_bottleneck)
        return true;
    return false;
  }

  void Add(const Label& l) {
    const auto at = static_cast<std::ptrdiff_t>(std::upper_bound(memory_.begin(), memory_.end(), l.memory) - memory_.begin());
    memory_.insert(memory_.begin() + at, l.memory);
    peak_.insert(peak_.begin() + at, l.Peak());
    stage_seconds_.insert(stage_seconds_.begin() + at, l.stage_seconds);
    bottleneck_.insert(bottleneck_.begin() + at, l.Bottleneck());
    stage_optimizer_.insert(stage_optimizer_.begin() + at, l.stage_optimizer);
    optimizer_step_.insert(optimizer_step_.begin() + at, l.OptimizerStep());
  }

 private:
  std::vector<int64_t> memory_;  // ascending
  std::vector<int64_t> peak_;
  std::vector<double> stage_seconds_, bottleneck_, stage_optimizer_, optimizer_step_;
};

std::vector<Label> ExactParetoLabels(std::vector<Label> labels, size_t max_labels) {
  std::sort(labels.begin(), labels.end(), [](const Label& a, const Label& b) {
    if (a.cost != b.cost) return a.cost < b.cost;
    return a.Peak() < b.Peak();
  });
  std::vector<Label> kept;
  ExactFront front;
  for (const Label& x : labels) {
    if (Thinned(kept.size(), max_labels)) break;
    if (front.Beaten(x)) continue;
    kept.push_back(x);
    front.Add(x);
  }
  return kept;
}

// Above `max_labels`, keeps the cheapest label of each of max_labels peak buckets plus every label on
// the (memory, peak) staircase (least peak for its memory, cost aside): whatever completion fits after
// some label also fits after the staircase's label with no more memory and no higher a peak, so
// thinning never makes a feasible stage infeasible.
std::vector<Label> Thin(std::vector<Label> labels, size_t max_labels, bool& thinned) {
  if (!Thinned(labels.size(), max_labels)) return labels;
  thinned = true;
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
  for (const Label& l : labels) {
    lo = std::min(lo, l.Peak());
    hi = std::max(hi, l.Peak());
  }
  const int64_t width = (hi - lo) / static_cast<int64_t>(max_labels - 1) + 1;
  std::vector<bool> keep(labels.size(), false), taken(max_labels, false);
  for (size_t k = 0; k < labels.size(); ++k) {  // cheapest first (ParetoLabels order)
    const size_t bucket = static_cast<size_t>((labels[k].Peak() - lo) / width);
    if (!taken[bucket]) keep[k] = taken[bucket] = true;
  }
  for (size_t k : StaircaseIndices(labels.size(), [&](size_t a) { return labels[a].memory; },
                                   [&](size_t a) { return labels[a].Peak(); }))
    keep[k] = true;
  std::vector<Label> out;
  for (size_t k = 0; k < labels.size(); ++k)
    if (keep[k]) out.push_back(labels[k]);
  return out;
}

}  // namespace

namespace {

// Where a layer's labels come from: labels of the previous layer (`ids` = their indices there), with
// memory reset at a stage start.
struct Sources {
  std::vector<Label> labels;
  std::vector<int32_t> ids;
  bool stage_start = false;
};

// Keeps, per layout, the labels of the previous stage's end that a stage may start from: the
// cheapest (weighted mode), or those with no better (bottleneck, cost) pair (exact mode).
std::vector<int32_t> EntryLabels(const LayerDpProblem& p, const std::vector<Label>& ends, int num_layouts) {
  std::vector<int32_t> order(ends.size());
  for (size_t k = 0; k < ends.size(); ++k) order[k] = static_cast<int32_t>(k);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return ends[static_cast<size_t>(a)].cost < ends[static_cast<size_t>(b)].cost; });
  std::vector<bool> taken(static_cast<size_t>(num_layouts), false);
  std::vector<int32_t> out;
  for (int32_t k : order) {
    const Label& l = ends[static_cast<size_t>(k)];
    if (!p.exact) {  // the cheapest of each layout
      if (!taken[static_cast<size_t>(l.layout)]) out.push_back(k);
      taken[static_cast<size_t>(l.layout)] = true;
      continue;
    }
    // Exact: unless a cheaper kept label of its layout has no worse a bottleneck and optimizer step.
    const bool beaten = std::any_of(out.begin(), out.end(), [&](int32_t j) {
      const Label& y = ends[static_cast<size_t>(j)];
      return y.layout == l.layout && y.slowest <= l.slowest && y.slowest_optimizer <= l.slowest_optimizer;
    });
    if (!beaten) out.push_back(k);
  }
  return out;
}

// A stage starts from the labels the previous stage ended in; both stages pay for the boundary sends
// (forward activation, backward gradient), each with its own weight (Eq. 8's C_s).
Sources StageEntry(const LayerDpProblem& p, const std::vector<Label>& previous, int last_layer, double weight_before,
                   double weight_after) {
  const CostTables& t = *p.tables;
  const int type = t.types().type_of[static_cast<size_t>(last_layer)];
  std::vector<Label> ends = previous;
  for (Label& l : ends) {  // the previous stage finishes with its send
    const double send = t.PointToPoint(type, l.layout);
    l.cost += weight_before * send;
    l.stage_seconds += send;
    l.slowest = l.Bottleneck();
    l.slowest_optimizer = l.OptimizerStep();
  }
  Sources s;
  s.stage_start = true;
  for (int32_t k : EntryLabels(p, ends, t.num_layouts())) {
    Label entry = ends[static_cast<size_t>(k)];
    const double receive = t.PointToPoint(type, entry.layout);
    entry.cost += weight_after * receive;
    entry.stage_seconds = receive;
    entry.stage_optimizer = 0.0;
    entry.memory = entry.headroom = 0;
    s.labels.push_back(entry);
    s.ids.push_back(k);
  }
  return s;
}

// The rest of a layer's stage priced within the bytes a label leaves it (completion_bound.h): a label
// that spent the memory its stage's later layers need for their fast options is cut early. A stage's
// peak is at least the label's memory plus the rest's memory, and at least the label's peak plus the
// rest's memory less its activations (Append): two knapsacks, each a bound.
struct StageRest {
  CompletionBound after_memory;  // options at their memory, within budget - label memory
  CompletionBound after_peak;    // options at memory - activations, within budget - label peak
  void Prepend(const std::vector<Option>& options, double Option::*term) {
    std::vector<CostPoint> by_memory, by_rest;
    for (const Option& o : options) {
      by_memory.push_back({o.memory, o.*term});
      by_rest.push_back({o.memory - o.activations, o.*term});
    }
    after_memory.Prepend(by_memory);
    after_peak.Prepend(by_rest);
  }
  double LeastCost(const Label& l, int64_t budget) const {
    return std::max(after_memory.LeastCost(budget - l.memory), after_peak.LeastCost(budget - l.Peak()));
  }
};

// Per layer: its options, the cheapest cost of all later layers and the least memory the rest of
// its stage needs (labels that cannot finish within the budget or below the cutoff are dropped).
struct LayerBounds {
  std::vector<std::vector<Option>> options;
  std::vector<double> later_cost;
  std::vector<StageRest> stage_rest;          // on the objective's terms (cost)
  std::vector<StageRest> stage_rest_seconds;  // exact mode: on C
  std::vector<double> later_stages_cost;  // the cheapest cost of the stages after the layer's
  std::vector<int64_t> later_memory;      // the least memory the rest of the layer's stage adds
  std::vector<int64_t> later_rest;        // and the least memory less activations
  // What the rest of the layer's stage frees and holds at least before the layer's backward pass runs:
  // a label's headroom below it adds nothing to any completion's peak (Append), so it is raised to it
  // and labels that differ only below it are one (the stage's last layer: 0, its peak exact).
  std::vector<int64_t> masked;
  std::vector<bool> stage_end;  // the last layer of its stage
  // The layer before its stage's last: a label's memory and peak matter only through which of the last
  // layer's options fit after it (memory <= budget - o.memory - o.headroom, peak <= budget - o.memory +
  // o.activations), so each is raised to the next of those bounds (ascending): labels that admit the
  // same options are one. Empty elsewhere.
  std::vector<std::vector<int64_t>> memory_steps, peak_steps;
  // `l` raised so (layer before a stage's last); false when no option of the last layer fits after it.
  bool RaiseToSteps(int layer, Label& l) const {
    const std::vector<int64_t>& m = memory_steps[static_cast<size_t>(layer)];
    if (m.empty()) return true;
    const std::vector<int64_t>& p = peak_steps[static_cast<size_t>(layer)];
    const auto memory = std::lower_bound(m.begin(), m.end(), l.memory);
    const auto peak = std::lower_bound(p.begin(), p.end(), l.Peak());
    if (memory == m.end() || peak == p.end()) return false;
    l.headroom = *peak - *memory;
    l.memory = *memory;
    return true;
  }
  std::vector<double> later_stage_seconds;  // exact mode: least C the rest of the layer's stage adds
  std::vector<double> later_stages_slowest; // exact mode: least C of the slowest later stage
  // Whether the stage can still finish within `budget` after label `l` at `layer`.
  bool Fits(int layer, const Label& l, int64_t budget) const {
    const size_t i = static_cast<size_t>(layer);
    return l.memory + later_memory[i] <= budget && l.Peak() + later_rest[i] <= budget;
  }
};

// Exact mode: Eq. 8 of any completion of `l` is at least this.
double ExactBound(const LayerDpProblem& p, const LayerBounds& b, int layer, const Label& l) {
  const size_t i = static_cast<size_t>(layer);
  const double rest_seconds = std::max(b.later_stage_seconds[i], b.stage_rest_seconds[i].LeastCost(l, p.budget));
  const double slowest = std::max({l.slowest, l.stage_seconds + rest_seconds, b.later_stages_slowest[i]});
  const double rest_cost = std::max(b.later_cost[i], b.stage_rest[i].LeastCost(l, p.budget) + b.later_stages_cost[i]);
  return cost::PipelineIterationSeconds(p.micro_batches, slowest, l.cost + rest_cost, l.OptimizerStep());
}

std::vector<Label> Extend(const LayerDpProblem& p, const Sources& sources, const LayerBounds& bounds, int layer,
                          LayerDpResult& r) {
  const CostTables& t = *p.tables;
  const int prev_type = layer > 0 ? t.types().type_of[static_cast<size_t>(layer) - 1] : 0;
  const double cutoff = p.cutoff - bounds.later_cost[static_cast<size_t>(layer)];
  const bool bounded = p.cutoff < std::numeric_limits<double>::infinity();
  const StageRest& stage_rest = bounds.stage_rest[static_cast<size_t>(layer)];
  const double rest_cutoff = p.cutoff - bounds.later_stages_cost[static_cast<size_t>(layer)];
  std::vector<std::vector<Label>> by_layout(static_cast<size_t>(t.num_layouts()));
  for (size_t k = 0; k < sources.labels.size(); ++k) {
    const Label& src = sources.labels[k];
    for (const Option& o : bounds.options[static_cast<size_t>(layer)]) {
      Label l;
      l.memory = src.memory;
      l.headroom = src.headroom;
      l.headroom = cost::AppendedHeadroom(l.headroom, o.activations, o.headroom);  // o follows the label
      l.memory += o.memory;
      l.headroom = std::max(l.headroom, bounds.masked[static_cast<size_t>(layer)]);
      if (!bounds.RaiseToSteps(layer, l)) continue;
      if (!bounds.Fits(layer, l, p.budget)) continue;
      // A finished stage's memory is its own (it fits): the next starts from none, so labels that
      // differ only in it are one.
      if (bounds.stage_end[static_cast<size_t>(layer)]) l.memory = l.headroom = 0;
      const double reshard = layer > 0 ? t.SliceGather(prev_type, src.layout, o.layout) : 0.0;
      l.cost = src.cost + o.cost + o.weight * reshard;
      l.stage_seconds = src.stage_seconds + o.seconds + reshard;
      l.slowest = src.slowest;
      l.stage_optimizer = src.stage_optimizer + o.optimizer;
      l.slowest_optimizer = src.slowest_optimizer;
      if (p.exact ? bounded && ExactBound(p, bounds, layer, l) >= p.cutoff
                  : l.cost >= cutoff || (bounded && l.cost + stage_rest.LeastCost(l, p.budget) >= rest_cutoff)) {
        r.cut_off = true;
        continue;
      }
      l.parent = sources.ids[k];
      l.strategy = static_cast<int16_t>(o.strategy);
      l.layout = static_cast<int16_t>(o.layout);
      by_layout[static_cast<size_t>(o.layout)].push_back(l);
    }
  }
  std::vector<Label> out;
  for (std::vector<Label>& labels : by_layout) {
    std::vector<Label> kept =
        Thin(p.exact ? ExactParetoLabels(std::move(labels), p.max_labels) : ParetoLabels(std::move(labels)), p.max_labels,
             r.thinned);
    out.insert(out.end(), kept.begin(), kept.end());
  }
  return out;
}

Sources AllOf(const std::vector<Label>& labels) {
  Sources s;
  s.labels = labels;
  s.ids.resize(labels.size());
  for (size_t k = 0; k < labels.size(); ++k) s.ids[k] = static_cast<int32_t>(k);
  return s;
}

// The options of every layer (identical layers of a stage share one list) and the bounds.
LayerBounds MakeBounds(const LayerDpProblem& p) {
  const std::vector<int>& type_of = p.tables->types().type_of;
  const size_t layers = type_of.size();
  LayerBounds b;
  b.options.resize(layers);
  b.later_cost.assign(layers, 0.0);
  b.later_memory.assign(layers, 0);
  b.later_rest.assign(layers, 0);
  b.masked.assign(layers, 0);
  b.stage_end.assign(layers, false);
  b.memory_steps.assign(layers, {});
  b.peak_steps.assign(layers, {});
  b.later_stage_seconds.assign(layers, 0.0);
  b.later_stages_slowest.assign(layers, 0.0);
  b.stage_rest.assign(layers, StageRest{});
  b.stage_rest_seconds.assign(layers, StageRest{});
  b.later_stages_cost.assign(layers, 0.0);
  std::vector<double> cheapest(layers, 0.0), fastest(layers, 0.0), stage_fastest;
  std::vector<int64_t> smallest(layers, 0), smallest_rest(layers, 0), least_activations(layers, 0), least_backward(layers, 0);
  for (const DpStage& stage : p.stages) {
    std::vector<std::vector<Option>> by_type(static_cast<size_t>(p.tables->types().num_types()));
    for (int i = stage.first; i < stage.first + stage.count; ++i) {
      std::vector<Option>& shared = by_type[static_cast<size_t>(type_of[static_cast<size_t>(i)])];
      const bool own = i == 0 || i + 1 == static_cast<int>(layers);  // with the embeddings / the head
      if (own) b.options[static_cast<size_t>(i)] = LayerOptions(p, stage, i, p.budget);
      else if (shared.empty()) shared = LayerOptions(p, stage, i, p.budget);
      if (!own) b.options[static_cast<size_t>(i)] = shared;
      const size_t u = static_cast<size_t>(i);
      cheapest[u] = fastest[u] = std::numeric_limits<double>::infinity();
      smallest[u] = smallest_rest[u] = least_activations[u] = least_backward[u] = std::numeric_limits<int64_t>::max() / 4;
      for (const Option& o : b.options[u]) {
        cheapest[u] = std::min(cheapest[u], o.cost);
        fastest[u] = std::min(fastest[u], o.seconds);
        smallest[u] = std::min(smallest[u], o.memory);
        smallest_rest[u] = std::min(smallest_rest[u], o.memory - o.activations);
        least_activations[u] = std::min(least_activations[u], o.activations);
        least_backward[u] = std::min(least_backward[u], o.activations + o.headroom);
      }
    }
    const size_t end = static_cast<size_t>(stage.first + stage.count - 1);
    b.stage_end[end] = true;
    if (stage.count > 1) {
      for (const Option& o : b.options[end]) {
        b.memory_steps[end - 1].push_back(p.budget - o.memory - o.headroom);
        b.peak_steps[end - 1].push_back(p.budget - o.memory + o.activations);
      }
      for (std::vector<int64_t>* v : {&b.memory_steps[end - 1], &b.peak_steps[end - 1]}) {
        std::sort(v->begin(), v->end());
        v->erase(std::unique(v->begin(), v->end()), v->end());
      }
    }
    StageRest rest, rest_seconds;
    // The rest of the stage after layer i frees its activations and holds at least its last layer's
    // backward (activations + headroom) before layer i's backward runs.
    int64_t masked = least_backward[static_cast<size_t>(stage.first + stage.count - 1)];
    for (int i = stage.first + stage.count - 2; i >= stage.first; --i) {
      const size_t u = static_cast<size_t>(i);
      b.masked[u] = masked;
      masked = std::min(masked + least_activations[u], std::numeric_limits<int64_t>::max() / 4);
      b.later_memory[u] = b.later_memory[u + 1] + smallest[u + 1];
      b.later_rest[u] = b.later_rest[u + 1] + smallest_rest[u + 1];
      b.later_stage_seconds[u] = b.later_stage_seconds[u + 1] + fastest[u + 1];
      rest.Prepend(b.options[u + 1], &Option::cost);
      b.stage_rest[u] = rest;
      if (p.exact) {
        rest_seconds.Prepend(b.options[u + 1], &Option::seconds);
        b.stage_rest_seconds[u] = rest_seconds;
      }
    }
    stage_fastest.push_back(b.later_stage_seconds[static_cast<size_t>(stage.first)] + fastest[static_cast<size_t>(stage.first)]);
  }
  double slowest_after = 0.0;  // the slowest of the stages after the current one, at their fastest
  for (size_t s = p.stages.size(); s-- > 0;) {
    for (int i = p.stages[s].first; i < p.stages[s].first + p.stages[s].count; ++i)
      b.later_stages_slowest[static_cast<size_t>(i)] = slowest_after;
    slowest_after = std::max(slowest_after, stage_fastest[s]);
  }
  for (size_t i = layers - 1; i-- > 0;) b.later_cost[i] = b.later_cost[i + 1] + cheapest[i + 1];
  for (const DpStage& stage : p.stages)
    for (int i = stage.first; i < stage.first + stage.count; ++i)
      b.later_stages_cost[static_cast<size_t>(i)] = b.later_cost[static_cast<size_t>(stage.first + stage.count - 1)];
  return b;
}

}  // namespace

LayerDpResult SolveLayerDp(const LayerDpProblem& p) {
  LayerDpResult r;
  const int layers = static_cast<int>(p.tables->types().type_of.size());
  const LayerBounds bounds = MakeBounds(p);
  std::vector<std::vector<Label>> pools(static_cast<size_t>(layers));
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const DpStage& stage = p.stages[s];
    for (int i = stage.first; i < stage.first + stage.count; ++i) {
      if (std::chrono::steady_clock::now() > p.deadline) {
        r.timed_out = true;
        return r;
      }
      Sources sources;
      if (i == 0) {
        sources.labels.push_back(Label{});
        sources.ids.push_back(-1);
      } else if (i == stage.first) {
        sources = StageEntry(p, pools[static_cast<size_t>(i) - 1], i - 1, p.stages[s - 1].weight, stage.weight);
      } else {
        sources = AllOf(pools[static_cast<size_t>(i) - 1]);
      }
      pools[static_cast<size_t>(i)] = Extend(p, sources, bounds, i, r);
      r.labels += static_cast<int64_t>(pools[static_cast<size_t>(i)].size());
      // Exact mode runs to prove the weighted runs' plan optimal or to beat it; once a state is thinned
      // it can do neither for sure, so it stops there (seconds per run on 80-layer models, where it
      // never found a better plan): the weighted runs' plan stands, unproven.
      if (p.exact && r.thinned) {
        r.cut_off = false;
        return r;
      }
      if (pools[static_cast<size_t>(i)].empty()) return r;  // nothing fits (or beats the cutoff)
    }
  }
  r.cut_off = false;
  const std::vector<Label>& last = pools.back();
  auto value = [&](const Label& l) { return p.exact ? PipelineSeconds(p, l) : l.cost; };
  size_t best = 0;
  for (size_t k = 1; k < last.size(); ++k)
    if (value(last[k]) < value(last[best])) best = k;
  r.feasible = true;
  r.objective = value(last[best]);
  r.strategies.assign(static_cast<size_t>(layers), -1);
  int32_t id = static_cast<int32_t>(best);
  for (int i = layers - 1; i >= 0; --i) {
    const Label& l = pools[static_cast<size_t>(i)][static_cast<size_t>(id)];
    r.strategies[static_cast<size_t>(i)] = l.strategy;
    id = l.parent;
  }
  return r;
}

}  // namespace kiwi::solve::hybrid
