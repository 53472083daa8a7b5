#include "kiwi/solve/hybrid/strategy_space.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

namespace kiwi::solve::hybrid {
namespace {

constexpr Paradigm kParadigms[] = {Paradigm::kTp, Paradigm::kDp, Paradigm::kSdp};

const char* ParadigmName(Paradigm p) {
  switch (p) {
    case Paradigm::kDp: return "DP";
    case Paradigm::kSdp: return "SDP";
    case Paradigm::kTp: return "TP";
  }
  return "?";
}

bool Allowed(Paradigm p, const StrategySpaceOptions& o) {
  switch (p) {
    case Paradigm::kDp: return o.allow_dp;
    case Paradigm::kSdp: return o.allow_sdp;
    case Paradigm::kTp: return o.allow_tp;
  }
  return false;
}

bool Allowed(plan::Zero zero, const StrategySpaceOptions& o) {
  switch (zero) {
    case plan::Zero::kNone: return o.allow_dp;
    case plan::Zero::kOptimizerStates:
    case plan::Zero::kGradients: return o.allow_zero12;
    case plan::Zero::kParameters: return o.allow_sdp;
  }
  return false;
}

bool Uses(const std::vector<TreeLevel>& levels, Paradigm p) {
  return std::any_of(levels.begin(), levels.end(), [p](const TreeLevel& l) { return l.paradigm == p; });
}

// Extends `levels` until the group of `remaining` devices is used up (§III-B construction rules: no
// paradigm twice, degrees from {2, 4, 8, ...}; Takeaway #3: no DP next to SDP unless asked).
void GrowTrees(int remaining, std::vector<TreeLevel>& levels, const StrategySpaceOptions& o,
               std::vector<std::vector<TreeLevel>>& out) {
  if (remaining == 1) {
    out.push_back(levels);
    return;
  }
  for (Paradigm p : kParadigms) {
    if (!Allowed(p, o) || Uses(levels, p)) continue;
    const bool is_data = p == Paradigm::kDp || p == Paradigm::kSdp;
    const Paradigm twin = p == Paradigm::kDp ? Paradigm::kSdp : Paradigm::kDp;
    if (is_data && !o.mix_dp_sdp && Uses(levels, twin)) continue;
    for (int degree = 2; degree <= remaining; degree *= 2) {
      if (remaining % degree != 0) continue;
      if (p == Paradigm::kTp && o.max_tp > 0 && degree > o.max_tp) continue;
      levels.push_back({p, degree});
      GrowTrees(remaining / degree, levels, o, out);
      levels.pop_back();
    }
  }
}

}  // namespace

bool WorthContextParallel(const plan::LayerStrategy& s, int64_t microbatch) {
  return s.cp == 1 || s.cp == s.dp / std::gcd(microbatch, int64_t{s.dp});
}

std::vector<int> PowerOfTwoDivisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n && d > 0; d *= 2)
    if (n % d == 0) out.push_back(d);
  return out;
}

int TreeStrategy::Degree(Paradigm p) const {
  int degree = 1;
  for (const TreeLevel& l : levels)
    if (l.paradigm == p) degree *= l.degree;
  return degree;
}

bool TreeStrategy::TpInnermost() const { return levels.empty() || levels.back().paradigm == Paradigm::kTp || Degree(Paradigm::kTp) == 1; }

plan::LayerStrategy TreeStrategy::ToLayerStrategy() const {
  plan::LayerStrategy s;
  s.tp = Degree(Paradigm::kTp);
  s.dp = Degree(Paradigm::kDp) * Degree(Paradigm::kSdp);
  s.zero = Degree(Paradigm::kSdp) > 1 ? plan::Zero::kParameters : plan::Zero::kNone;
  s.checkpoint = checkpoint;
  return s;
}

std::string TreeStrategy::Name() const {
  std::vector<std::string> parts;
  if (pp > 1) parts.push_back(fmt::format("PP{}", pp));
  for (const TreeLevel& l : levels) parts.push_back(fmt::format("{}{}", ParadigmName(l.paradigm), l.degree));
  std::string name = parts.empty() ? "single" : fmt::format("{}", fmt::join(parts, "-"));
  return checkpoint ? name + "+CKPT" : name;
}

std::vector<TreeStrategy> DecisionTreeStrategies(int num_devices, int pp, const StrategySpaceOptions& options) {
  std::vector<TreeStrategy> out;
  if (pp < 1 || num_devices < 1 || num_devices % pp != 0) return out;
  std::vector<std::vector<TreeLevel>> trees;
  std::vector<TreeLevel> levels;
  GrowTrees(num_devices / pp, levels, options, trees);
  std::stable_sort(trees.begin(), trees.end(),
                   [](const auto& a, const auto& b) { return a.size() < b.size(); });
  for (const auto& tree : trees)
    for (bool checkpoint : {false, true})
      if (!checkpoint || options.allow_checkpoint) out.push_back({pp, tree, checkpoint});
  return out;
}

std::vector<TreeStrategy> DecisionTreeStrategies(int num_devices, const StrategySpaceOptions& options) {
  std::vector<TreeStrategy> out;
  for (int pp : PowerOfTwoDivisors(num_devices)) {
    std::vector<TreeStrategy> trees = DecisionTreeStrategies(num_devices, pp, options);
    out.insert(out.end(), trees.begin(), trees.end());
  }
  return out;
}

std::vector<plan::LayerStrategy> LayerStrategies(int stage_devices, const StrategySpaceOptions& o) {
  std::vector<plan::LayerStrategy> out;
  for (int tp : PowerOfTwoDivisors(stage_devices)) {
    const int dp = stage_devices / tp;
    if (tp > 1 && !o.allow_tp) continue;
    if (o.max_tp > 0 && tp > o.max_tp) continue;
    for (bool sp : {false, true}) {
      if (sp && (tp == 1 || !(o.allow_sequence_parallel || o.tp_sequence_parallel))) continue;
      if (!sp && tp > 1 && o.tp_sequence_parallel) continue;
      for (plan::Zero zero : {plan::Zero::kNone, plan::Zero::kOptimizerStates, plan::Zero::kGradients, plan::Zero::kParameters}) {
        if (dp > 1 && !Allowed(zero, o)) continue;
        if (dp == 1 && zero != plan::Zero::kNone) continue;  // ZeRO over one device shards nothing: DP1
        for (int ep : PowerOfTwoDivisors(dp)) {
          if (ep > 1 && (!o.allow_expert_parallel || o.experts <= 0 || o.experts % ep != 0 || zero == plan::Zero::kParameters))
            continue;
          for (int cp : PowerOfTwoDivisors(dp)) {
            if (cp > 1 && (!o.allow_context_parallel || o.context_sequence <= 0 || o.context_sequence % (2 * cp) != 0 ||
                           ep > 1 || (tp > 1 && !sp)))
              continue;
            for (bool offload : {false, true}) {
              if (offload && (!o.allow_offload || (dp > 1 && zero == plan::Zero::kNone))) continue;
              out.push_back({tp, dp, zero, false, sp, false, ep, cp, offload});
              if (o.allow_selective_recompute) out.push_back({tp, dp, zero, false, sp, true, ep, cp, offload});
              for (const std::vector<std::string>& set : o.recompute_sets)
                out.push_back({tp, dp, zero, false, sp, false, ep, cp, offload, set});
              if (o.allow_checkpoint) out.push_back({tp, dp, zero, true, sp, false, ep, cp, offload});
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace kiwi::solve::hybrid
