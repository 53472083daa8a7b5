#include "kiwi/solve/hybrid/layer_dp.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include "kiwi/solve/hybrid/completion_bound.h"

namespace kiwi::solve::hybrid {
namespace {

struct Label {
  int64_t memory = 0;     // additive bytes of the stage so far (model states + in-flight activations)
  int64_t recompute = 0;  // largest backward transient of a layer so far (recomputed intermediates, gradients)
  int64_t gather = 0;     // largest SDP parameter gather so far
  double cost = 0.0;      // weighted objective so far (exact mode: sum of C_s + G_s so far)
  double stage_seconds = 0.0;  // exact mode: C of the current stage so far
  double slowest = 0.0;        // exact mode: largest C_s of the finished stages
  double stage_optimizer = 0.0;    // exact mode: O of the current stage so far (its optimizer step)
  double slowest_optimizer = 0.0;  // exact mode: largest O_s of the finished stages
  int32_t parent = -1;    // index in the previous layer's labels
  int16_t strategy = -1;
  int16_t layout = 0;     // layout index of `strategy` (CostTables::LayoutIndex)
  int64_t Peak() const { return cost::StageMemory::StagePeakBytes(memory, recompute, gather); }
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
struct Option {
  int strategy = 0;
  int layout = 0;
  double cost = 0.0;       // weight * c + g (+ the embeddings on the first layer, the head on the last)
  double seconds = 0.0;    // c
  double weight = 1.0;
  double optimizer = 0.0;  // the optimizer step over the layer's states (exact mode's O_s)
  int64_t memory = 0;      // states + in_flight * activations
  int64_t recompute = 0;
  int64_t gather = 0;
};

void Absorb(const StrategyCost& c, const DpStage& stage, Option& o) {
  o.cost += stage.weight * c.microbatch_seconds + stage.optimizer_weight * c.optimizer_seconds + c.sync_seconds;
  o.seconds += c.microbatch_seconds;
  o.optimizer += c.optimizer_seconds;
  o.memory += c.memory.AdditiveBytes(stage.in_flight);
  o.recompute = std::max(o.recompute, c.memory.transient);
  o.gather = std::max(o.gather, c.memory.gathered);
}

// Options of layer `layer`, without those another option of the same layout beats on every count
// (identical layers share these lists' shape; this is where the 14 strategies of 8 GPUs shrink).
std::vector<Option> LayerOptions(const LayerDpProblem& p, const DpStage& stage, int layer, int64_t budget) {
  const CostTables& t = *p.tables;
  std::vector<Option> all;
  for (int j = 0; j < t.num_strategies(); ++j) {
    if (!p.allowed.empty() && !p.allowed[static_cast<size_t>(j)]) continue;
    if (!t.Places(layer, j)) continue;
    Option o{j, t.LayoutIndex(j), 0.0, 0.0, stage.weight, 0.0, 0, 0, 0};
    Absorb(t.LayerCost(layer, j), stage, o);
    if (cost::StageMemory::StagePeakBytes(o.memory, o.recompute, o.gather) <= budget) all.push_back(o);
  }
  std::vector<Option> kept;
  for (size_t a = 0; a < all.size(); ++a) {
    bool dominated = false;
    for (size_t b = 0; b < all.size() && !dominated; ++b) {
      const Option &x = all[a], &y = all[b];
      if (a == b || x.layout != y.layout) continue;
      const bool no_worse = y.cost <= x.cost && y.memory <= x.memory && y.recompute <= x.recompute &&
                            y.gather <= x.gather && (!p.exact || (y.seconds <= x.seconds && y.optimizer <= x.optimizer));
      const bool equal = y.cost == x.cost && y.memory == x.memory && y.recompute == x.recompute &&
                         y.gather == x.gather && y.seconds == x.seconds && y.optimizer == x.optimizer;
      dominated = no_worse && (!equal || b < a);
    }
    if (!dominated) kept.push_back(all[a]);
  }
  return kept;
}

// Keeps the labels no other label beats in every completion of the stage: y beats x when it is no
// slower and y.memory + (y.recompute - x.recompute)^+ + (y.gather - x.gather)^+ <= x.memory. Labels are
// visited cheapest first, so only kept ones can beat a label; per (recompute, gather) class the
// smallest kept memory suffices.
std::vector<Label> ParetoLabels(std::vector<Label> labels) {
  std::sort(labels.begin(), labels.end(), [](const Label& a, const Label& b) {
    if (a.cost != b.cost) return a.cost < b.cost;
    return a.Peak() < b.Peak();
  });
  struct Class { int64_t recompute, gather, memory; };
  std::vector<Class> classes;
  std::vector<Label> kept;
  for (const Label& x : labels) {
    bool beaten = false;
    for (const Class& c : classes)
      if (c.memory + std::max<int64_t>(c.recompute - x.recompute, 0) + std::max<int64_t>(c.gather - x.gather, 0) <= x.memory) {
        beaten = true;
        break;
      }
    if (beaten) continue;
    kept.push_back(x);
    auto it = std::find_if(classes.begin(), classes.end(),
                           [&](const Class& c) { return c.recompute == x.recompute && c.gather == x.gather; });
    if (it == classes.end()) classes.push_back({x.recompute, x.gather, x.memory});
    else it->memory = std::min(it->memory, x.memory);
  }
  return kept;
}

// Whether Thin cuts a state of `size` labels (it needs at least two memory buckets).
bool Thinned(size_t size, size_t max_labels) { return size > max_labels && max_labels >= 2; }

// Exact mode: y beats x when it is also no slower in the current stage, no worse a bottleneck, and no
// slower an optimizer step (its stage's so far, and the slowest of the finished stages).
// Pairwise, but indexed: the kept labels sit per (recompute, gather) class sorted by memory, so x is
// checked only against those of each class whose memory leaves room to beat it (the memory term of
// ParetoLabels is, within a class, a bound on y.memory); their other terms sit in flat arrays, the scan's
// hot loop. Labels come cheapest first, so the kept ones hold the most memory: few pass the bound. Once
// more than `max_labels` labels are kept the filter stops: the state will be thinned, and an exact run
// stops at its first thinned state (SolveLayerDp), so the rest would be filtered for nothing.
class ExactFront {
 public:
  bool Beaten(const Label& x) const {
    const double x_bottleneck = x.Bottleneck(), x_optimizer_step = x.OptimizerStep();
    for (const Class& c : classes_) {
      const int64_t room = x.memory - std::max<int64_t>(c.recompute - x.recompute, 0) - std::max<int64_t>(c.gather - x.gather, 0);
      const size_t end = static_cast<size_t>(std::upper_bound(c.memory.begin(), c.memory.end(), room) - c.memory.begin());
      for (size_t k = 0; k < end; ++k)
        if (c.stage_optimizer[k] <= x.stage_optimizer && c.optimizer_step[k] <= x_optimizer_step &&
            c.stage_seconds[k] <= x.stage_seconds && c.bottleneck[k] <= x_bottleneck)
          return true;
    }
    return false;
  }

  void Add(const Label& l) {
    auto it = std::find_if(classes_.begin(), classes_.end(),
                           [&](const Class& c) { return c.recompute == l.recompute && c.gather == l.gather; });
    if (it == classes_.end()) {
      classes_.push_back({l.recompute, l.gather, {}, {}, {}, {}, {}});
      it = classes_.end() - 1;
    }
    Class& c = *it;
    const auto at = static_cast<std::ptrdiff_t>(std::upper_bound(c.memory.begin(), c.memory.end(), l.memory) - c.memory.begin());
    c.memory.insert(c.memory.begin() + at, l.memory);
    c.stage_seconds.insert(c.stage_seconds.begin() + at, l.stage_seconds);
    c.bottleneck.insert(c.bottleneck.begin() + at, l.Bottleneck());
    c.stage_optimizer.insert(c.stage_optimizer.begin() + at, l.stage_optimizer);
    c.optimizer_step.insert(c.optimizer_step.begin() + at, l.OptimizerStep());
  }

 private:
  struct Class {
    int64_t recompute, gather;
    std::vector<int64_t> memory;  // ascending
    std::vector<double> stage_seconds, bottleneck, stage_optimizer, optimizer_step;
  };
  std::vector<Class> classes_;
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

// Above `max_labels`, keeps the cheapest label of each of max_labels memory buckets plus, for every
// (recompute, gather) class, the label with the least memory: whatever completion fits after some
// label also fits after that one, so thinning never makes a feasible stage infeasible.
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
  std::vector<size_t> class_min;  // index of the least-memory label of each class
  for (size_t k = 0; k < labels.size(); ++k) {  // cheapest first (ParetoLabels order)
    const size_t bucket = static_cast<size_t>((labels[k].Peak() - lo) / width);
    if (!taken[bucket]) keep[k] = taken[bucket] = true;
    auto same = [&](size_t c) {
      return labels[c].recompute == labels[k].recompute && labels[c].gather == labels[k].gather;
    };
    auto it = std::find_if(class_min.begin(), class_min.end(), same);
    if (it == class_min.end()) class_min.push_back(k);
    else if (labels[k].memory < labels[*it].memory) *it = k;
  }
  for (size_t c : class_min) keep[c] = true;
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
    entry.memory = entry.recompute = entry.gather = 0;
    s.labels.push_back(entry);
    s.ids.push_back(k);
  }
  return s;
}

// Per layer: its options, the cheapest cost of all later layers and the least memory the rest of
// its stage needs (labels that cannot finish within the budget or below the cutoff are dropped).
struct LayerBounds {
  std::vector<std::vector<Option>> options;
  std::vector<double> later_cost;
  // The rest of the layer's stage priced within the bytes a label leaves it (completion_bound.h): a
  // label that spent the memory its stage's later layers need for their fast options is cut early.
  std::vector<CompletionBound> stage_rest;          // on the objective's terms (cost)
  std::vector<CompletionBound> stage_rest_seconds;  // exact mode: on C
  std::vector<double> later_stages_cost;  // the cheapest cost of the stages after the layer's
  std::vector<int64_t> later_memory;
  std::vector<double> later_stage_seconds;  // exact mode: least C the rest of the layer's stage adds
  std::vector<double> later_stages_slowest; // exact mode: least C of the slowest later stage
};

// Exact mode: Eq. 8 of any completion of `l` is at least this.
double ExactBound(const LayerDpProblem& p, const LayerBounds& b, int layer, const Label& l) {
  const size_t i = static_cast<size_t>(layer);
  const int64_t left = p.budget - l.Peak();
  const double rest_seconds = std::max(b.later_stage_seconds[i], b.stage_rest_seconds[i].LeastCost(left));
  const double slowest = std::max({l.slowest, l.stage_seconds + rest_seconds, b.later_stages_slowest[i]});
  const double rest_cost = std::max(b.later_cost[i], b.stage_rest[i].LeastCost(left) + b.later_stages_cost[i]);
  return cost::PipelineIterationSeconds(p.micro_batches, slowest, l.cost + rest_cost, l.OptimizerStep());
}

std::vector<Label> Extend(const LayerDpProblem& p, const Sources& sources, const LayerBounds& bounds, int layer,
                          LayerDpResult& r) {
  const CostTables& t = *p.tables;
  const int prev_type = layer > 0 ? t.types().type_of[static_cast<size_t>(layer) - 1] : 0;
  const double cutoff = p.cutoff - bounds.later_cost[static_cast<size_t>(layer)];
  const bool bounded = p.cutoff < std::numeric_limits<double>::infinity();
  const CompletionBound& stage_rest = bounds.stage_rest[static_cast<size_t>(layer)];
  const double rest_cutoff = p.cutoff - bounds.later_stages_cost[static_cast<size_t>(layer)];
  const int64_t budget = p.budget - bounds.later_memory[static_cast<size_t>(layer)];
  std::vector<std::vector<Label>> by_layout(static_cast<size_t>(t.num_layouts()));
  for (size_t k = 0; k < sources.labels.size(); ++k) {
    const Label& src = sources.labels[k];
    for (const Option& o : bounds.options[static_cast<size_t>(layer)]) {
      Label l;
      l.memory = src.memory + o.memory;
      l.recompute = std::max(src.recompute, o.recompute);
      l.gather = std::max(src.gather, o.gather);
      if (l.Peak() > budget) continue;
      const double reshard = layer > 0 ? t.SliceGather(prev_type, src.layout, o.layout) : 0.0;
      l.cost = src.cost + o.cost + o.weight * reshard;
      l.stage_seconds = src.stage_seconds + o.seconds + reshard;
      l.slowest = src.slowest;
      l.stage_optimizer = src.stage_optimizer + o.optimizer;
      l.slowest_optimizer = src.slowest_optimizer;
      if (p.exact ? bounded && ExactBound(p, bounds, layer, l) >= p.cutoff
                  : l.cost >= cutoff || (bounded && l.cost + stage_rest.LeastCost(p.budget - l.Peak()) >= rest_cutoff)) {
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
  b.later_stage_seconds.assign(layers, 0.0);
  b.later_stages_slowest.assign(layers, 0.0);
  b.stage_rest.assign(layers, CompletionBound{});
  b.stage_rest_seconds.assign(layers, CompletionBound{});
  b.later_stages_cost.assign(layers, 0.0);
  std::vector<double> cheapest(layers, 0.0), fastest(layers, 0.0), stage_fastest;
  std::vector<int64_t> smallest(layers, 0);
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
      smallest[u] = std::numeric_limits<int64_t>::max() / 4;
      for (const Option& o : b.options[u]) {
        cheapest[u] = std::min(cheapest[u], o.cost);
        fastest[u] = std::min(fastest[u], o.seconds);
        smallest[u] = std::min(smallest[u], o.memory);
      }
    }
    CompletionBound rest, rest_seconds;
    for (int i = stage.first + stage.count - 2; i >= stage.first; --i) {
      const size_t u = static_cast<size_t>(i);
      b.later_memory[u] = b.later_memory[u + 1] + smallest[u + 1];
      b.later_stage_seconds[u] = b.later_stage_seconds[u + 1] + fastest[u + 1];
      std::vector<CostPoint> costs, seconds;
      for (const Option& o : b.options[u + 1]) {
        costs.push_back({o.memory, o.cost});
        if (p.exact) seconds.push_back({o.memory, o.seconds});
      }
      rest.Prepend(costs);
      b.stage_rest[u] = rest;
      if (p.exact) {
        rest_seconds.Prepend(seconds);
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
