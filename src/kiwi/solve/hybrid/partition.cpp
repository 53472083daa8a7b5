#include "kiwi/solve/hybrid/partition.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "kiwi/solve/hybrid/uniform_plans.h"

namespace kiwi::solve::hybrid {
namespace {

// Maxima of ranges of a fixed array in O(1) after O(n log n) (a sparse table).
class RangeMax {
 public:
  explicit RangeMax(std::vector<int64_t> values) {
    levels_.push_back(std::move(values));
    const size_t n = levels_[0].size();
    for (size_t width = 2; width <= n; width *= 2) {
      const std::vector<int64_t>& prev = levels_.back();
      std::vector<int64_t> next(n - width + 1);
      for (size_t i = 0; i < next.size(); ++i) next[i] = std::max(prev[i], prev[i + width / 2]);
      levels_.push_back(std::move(next));
    }
  }
  int64_t Max(int first, int count) const {  // of [first, first + count), count >= 1
    const size_t level = static_cast<size_t>(std::bit_width(static_cast<unsigned>(count))) - 1;
    const std::vector<int64_t>& row = levels_[level];
    return std::max(row[static_cast<size_t>(first)], row[static_cast<size_t>(first + count) - (size_t{1} << level)]);
  }

 private:
  std::vector<std::vector<int64_t>> levels_;  // levels_[k][i]: max of [i, i + 2^k)
};

// Per-layer terms of a fixed assignment, with prefix sums and range maxima for O(1) stage queries.
class FixedAssignment {
 public:
  FixedAssignment(const CostTables& t, const PipelineConfig& config, const std::vector<int>& strategies)
      : t_(t), config_(config), s_(strategies), n_(static_cast<int>(strategies.size())),
        backward_(BackwardPeaks(t, strategies)) {
    const std::vector<int>& type_of = t.types().type_of;
    seconds_.assign(static_cast<size_t>(n_) + 1, 0.0);
    states_.assign(static_cast<size_t>(n_) + 1, 0);
    activations_.assign(static_cast<size_t>(n_) + 1, 0);
    for (int i = 0; i < n_; ++i) {
      const StrategyCost c = t.LayerCost(i, s_[static_cast<size_t>(i)]);
      double reshard = 0.0;
      if (i > 0) reshard = t.SliceGather(type_of[static_cast<size_t>(i) - 1], Layout(i - 1), Layout(i));
      seconds_[static_cast<size_t>(i) + 1] = seconds_[static_cast<size_t>(i)] + c.microbatch_seconds + reshard;
      states_[static_cast<size_t>(i) + 1] = states_[static_cast<size_t>(i)] + c.memory.model_states;
      activations_[static_cast<size_t>(i) + 1] = activations_[static_cast<size_t>(i)] + c.memory.activations;
    }
  }

  // C_s of layers [first, first + count) as stage s (EstimatePipeline's terms).
  double Seconds(int s, int first, int count) const {
    const int last = first + count - 1;
    double c = seconds_[static_cast<size_t>(last) + 1] - seconds_[static_cast<size_t>(first)];
    if (s + 1 < config_.pp) c += t_.PointToPoint(Type(last), Layout(last));
    if (s > 0) c += t_.PointToPoint(Type(first - 1), Layout(first - 1));
    return c;
  }

  // The peak of layers [first, first + count) as stage s (cost::StageMemory::PeakBytes).
  int64_t Memory(int s, int first, int count) const {
    const int last = first + count - 1;
    cost::StageMemory memory;
    memory.model_states = states_[static_cast<size_t>(last) + 1] - states_[static_cast<size_t>(first)];
    memory.activations = activations_[static_cast<size_t>(last) + 1] - activations_[static_cast<size_t>(first)];
    memory.backward_peak = backward_.Max(first, count) - activations_[static_cast<size_t>(first)];
    return memory.PeakBytes(InFlight(config_, s));
  }

 private:
  // Per layer i: the activations of the layers before it plus its own backward peak, so a stage's
  // backward peak is the range's maximum less the activations before the stage.
  static std::vector<int64_t> BackwardPeaks(const CostTables& t, const std::vector<int>& strategies) {
    std::vector<int64_t> out(strategies.size());
    int64_t before = 0;
    for (size_t i = 0; i < strategies.size(); ++i) {
      const cost::StageMemory m = t.LayerCost(static_cast<int>(i), strategies[i]).memory;
      out[i] = before + m.backward_peak;
      before += m.activations;
    }
    return out;
  }

  int Type(int i) const { return t_.types().type_of[static_cast<size_t>(i)]; }
  int Layout(int i) const { return t_.LayoutIndex(s_[static_cast<size_t>(i)]); }

  const CostTables& t_;
  PipelineConfig config_;
  const std::vector<int>& s_;
  int n_;
  RangeMax backward_;
  std::vector<double> seconds_;
  std::vector<int64_t> states_, activations_;
};

std::vector<int64_t> SortedUnique(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

void AppendPartitions(int layers, int stages, Partition& prefix, std::vector<Partition>& out) {
  if (stages == 1) {
    prefix.push_back(layers);
    out.push_back(prefix);
    prefix.pop_back();
    return;
  }
  for (int count = 1; count <= layers - (stages - 1); ++count) {
    prefix.push_back(count);
    AppendPartitions(layers - count, stages - 1, prefix, out);
    prefix.pop_back();
  }
}

}  // namespace

Partition LinearPartition(int num_layers, int num_stages, const std::function<double(int, int, int)>& cost,
                          bool grows, Clock::time_point deadline) {
  const double inf = std::numeric_limits<double>::infinity();
  const size_t n = static_cast<size_t>(num_layers);
  // best[s][i]: the smallest max cost of layers [0, i) on stages [0, s); cut[s][i]: where stage s-1 starts.
  std::vector<std::vector<double>> best(static_cast<size_t>(num_stages) + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(n + 1, 0));
  best[0][0] = 0.0;
  int64_t calls = 0;
  for (int s = 1; s <= num_stages; ++s)
    for (int i = s; i <= num_layers - (num_stages - s); ++i)
      for (int j = i - 1; j >= s - 1; --j) {
        if (++calls % 65536 == 0 && Clock::now() > deadline) return EvenPartition(num_layers, num_stages);
        const double before = best[static_cast<size_t>(s) - 1][static_cast<size_t>(j)];
        const double stage = cost(s - 1, j, i - j);
        // A growing stage costs at least this for every earlier start: none of them can do better.
        if (grows && stage >= best[static_cast<size_t>(s)][static_cast<size_t>(i)]) break;
        if (before == inf) continue;
        const double value = std::max(before, stage);
        if (value < best[static_cast<size_t>(s)][static_cast<size_t>(i)]) {
          best[static_cast<size_t>(s)][static_cast<size_t>(i)] = value;
          cut[static_cast<size_t>(s)][static_cast<size_t>(i)] = j;
        }
      }
  Partition p(static_cast<size_t>(num_stages), 0);
  int end = num_layers;
  for (int s = num_stages; s >= 1; --s) {
    const int start = cut[static_cast<size_t>(s)][static_cast<size_t>(end)];
    p[static_cast<size_t>(s) - 1] = end - start;
    end = start;
  }
  return p;
}

Partition MemoryBalancedPartition(const CostTables& t, const PipelineConfig& config, const std::vector<int>& strategies,
                                  Clock::time_point deadline) {
  const FixedAssignment a(t, config, strategies);
  return LinearPartition(static_cast<int>(strategies.size()), config.pp, [&](int s, int first, int count) {
    return static_cast<double>(a.Memory(s, first, count));
  }, /*grows=*/true, deadline);
}

// Not `grows`: a stage's point-to-point terms depend on the layers at its ends.
Partition TimeBalancedPartition(const CostTables& t, const PipelineConfig& config, const std::vector<int>& strategies,
                                Clock::time_point deadline) {
  const FixedAssignment a(t, config, strategies);
  return LinearPartition(static_cast<int>(strategies.size()), config.pp,
                         [&](int s, int first, int count) { return a.Seconds(s, first, count); }, false, deadline);
}

StagePeakBounds::StagePeakBounds(const CostTables& t, const PipelineConfig& config, const std::vector<bool>& allowed)
    : num_layers_(static_cast<int>(t.types().type_of.size())), num_stages_(config.pp),
      num_types_(t.types().num_types()), type_of_(t.types().type_of) {
  auto ok = [&](int j) { return allowed.empty() || allowed[static_cast<size_t>(j)]; };
  options_.resize(static_cast<size_t>(num_stages_) * static_cast<size_t>(num_types_ + 2));
  std::vector<int64_t> headrooms{0};
  for (int s = 0; s < num_stages_; ++s) {
    const int in_flight = InFlight(config, s);
    // Per type once (a 10,000-layer stack has a handful of types), and the first and last layers, which
    // carry the embeddings and the head (CostTables::LayerCost).
    for (int k = 0; k < num_types_ + 2; ++k) {
      std::vector<StageTerms>& out = options_[static_cast<size_t>(s * (num_types_ + 2) + k)];
      for (int j = 0; j < t.num_strategies(); ++j) {
        if (!ok(j)) continue;
        const cost::StageMemory m = k < num_types_ ? t.Cost(k, j).memory : t.LayerCost(k == num_types_ ? 0 : num_layers_ - 1, j).memory;
        out.push_back(t.StageTermsOf(m, in_flight));  // as the layer DP prices it
        headrooms.push_back(out.back().headroom);
      }
    }
  }
  caps_ = SortedUnique(headrooms);
  const size_t stride = static_cast<size_t>(num_layers_) + 1;
  prefix_.assign(caps_.size() * static_cast<size_t>(num_stages_) * stride, 0);
  for (size_t c = 0; c < caps_.size(); ++c)
    for (int s = 0; s < num_stages_; ++s) {
      int64_t* row = &prefix_[(c * static_cast<size_t>(num_stages_) + static_cast<size_t>(s)) * stride];
      for (int i = 0; i < num_layers_; ++i) {
        int64_t least = kUnreachable;  // the layer's least memory with its headroom within the cap
        for (const StageTerms& o : OptionsOf(s, i))
          if (o.headroom <= caps_[c]) least = std::min(least, o.memory);
        row[i + 1] = std::min(row[i] + least, kUnreachable);
      }
    }
}

const std::vector<StageTerms>& StagePeakBounds::OptionsOf(int stage, int layer) const {
  const int k = layer == 0 ? num_types_ : layer + 1 == num_layers_ ? num_types_ + 1 : type_of_[static_cast<size_t>(layer)];
  return options_[static_cast<size_t>(stage * (num_types_ + 2) + k)];
}

int64_t StagePeakBounds::CappedStagePeak(int stage, int first, int count) const {
  const size_t stride = static_cast<size_t>(num_layers_) + 1;
  int64_t best = kUnreachable;
  for (size_t c = 0; c < caps_.size(); ++c) {
    const int64_t* row = &prefix_[(c * static_cast<size_t>(num_stages_) + static_cast<size_t>(stage)) * stride];
    const int64_t sum = row[first + count] - row[first];
    if (row[first + count] >= kUnreachable || sum >= kUnreachable) continue;
    best = std::min(best, sum + caps_[c]);
  }
  return best;
}

// Layer by layer, the (memory, peak) pairs of the stage so far that no other has both of no larger
// (what a later layer adds to the peak grows with both: layer_dp.cpp's labels, costs aside).
int64_t StagePeakBounds::StagePeak(int stage, int first, int count) const {
  std::vector<StageTerms> front{StageTerms{}}, next;
  for (int i = first; i < first + count; ++i) {
    next.clear();
    for (const StageTerms& p : front)
      for (const StageTerms& o : OptionsOf(stage, i)) {
        next.push_back(p);
        next.back().Append(o);
      }
    if (next.empty()) return kUnreachable;
    front.clear();
    for (size_t k : StaircaseIndices(next.size(), [&](size_t a) { return next[a].memory; },
                                     [&](size_t a) { return next[a].Peak(); }))
      front.push_back(next[k]);
  }
  return front.back().Peak();  // the staircase's last step has the least peak
}

int64_t StagePeakBounds::Peak(const Partition& partition) const {
  int64_t peak = 0;
  int first = 0;
  for (size_t s = 0; s < partition.size(); ++s) {
    peak = std::max(peak, StagePeak(static_cast<int>(s), first, partition[s]));
    first += partition[s];
  }
  return peak;
}

Partition StagePeakBounds::BestPartition(Clock::time_point deadline) const {
  return LinearPartition(num_layers_, num_stages_, [this](int s, int first, int count) {
    return static_cast<double>(CappedStagePeak(s, first, count));
  }, /*grows=*/true, deadline);
}

std::vector<Partition> AllPartitions(int num_layers, int num_stages) {
  std::vector<Partition> out;
  if (num_stages < 1 || num_layers < num_stages) return out;
  Partition prefix;
  AppendPartitions(num_layers, num_stages, prefix, out);
  return out;
}

std::vector<Partition> AdjustPartition(const CostTables& t, const PipelineConfig& config, const Partition& partition,
                                       const std::vector<int>& strategies, int64_t budget, Clock::time_point deadline) {
  const PipelineEstimate now = EstimatePipeline(t, config, partition, strategies);
  const int slowest = now.SlowestStage();
  const double slowest_seconds = now.stage_seconds[static_cast<size_t>(slowest)];
  const Partition balanced = TimeBalancedPartition(t, config, strategies, deadline);
  const int64_t memory_cap = EstimatePipeline(t, config, balanced, strategies).peak_memory_bytes;
  std::vector<Partition> moves;
  for (int neighbour : {slowest - 1, slowest + 1}) {
    if (neighbour < 0 || neighbour >= config.pp || partition[static_cast<size_t>(slowest)] < 2) continue;
    Partition next = partition;
    --next[static_cast<size_t>(slowest)];
    ++next[static_cast<size_t>(neighbour)];
    const PipelineEstimate e = EstimatePipeline(t, config, next, strategies);
    const double longest = *std::max_element(e.stage_seconds.begin(), e.stage_seconds.end());
    if (longest < slowest_seconds && e.peak_memory_bytes <= budget && e.peak_memory_bytes <= memory_cap)
      moves.push_back(std::move(next));
  }
  return moves;
}

}  // namespace kiwi::solve::hybrid
