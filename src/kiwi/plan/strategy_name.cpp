#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiwi/plan/plan.h"

namespace kiwi::plan {

namespace {

std::string Name(const LayerStrategy& s, int pp, bool short_sets) {
  std::vector<std::string> parts;
  if (pp > 1) parts.push_back(fmt::format("PP{}", pp));
  if (s.tp > 1) parts.push_back(fmt::format("{}TP{}", s.SequenceParallel() ? "SP-" : "", s.tp));
  const Zero zero = s.ZeroStage();
  if (zero == Zero::kOptimizerStates || zero == Zero::kGradients)
    parts.push_back(fmt::format("{}-DP{}", DataParallelName(zero), s.dp));
  else if (s.dp > 1)
    parts.push_back(fmt::format("{}{}", DataParallelName(zero), s.dp));
  if (s.ep > 1) parts.push_back(fmt::format("EP{}", s.ep));
  if (s.Ulysses()) parts.push_back(fmt::format("ULYSSES{}", s.UlyssesDegree()));
  if (s.RingDegree() > 1) parts.push_back(fmt::format("CP{}", s.RingDegree()));  // the ring's ranks
  std::string name = parts.empty() ? "single" : fmt::format("{}", fmt::join(parts, "x"));
  if (s.offload) name += "+OFFLOAD";
  if (s.checkpoint) return name + "+CKPT";
  if (s.RecomputesSet())
    name += short_sets ? fmt::format("+RC{}", s.recompute.size()) : fmt::format("+RC[{}]", fmt::join(s.recompute, ","));
  return s.SelectiveRecompute() ? name + "+SEL" : name;
}

}  // namespace

std::string StrategyName(const LayerStrategy& s, int pp) { return Name(s, pp, false); }
std::string ShortStrategyName(const LayerStrategy& s, int pp) { return Name(s, pp, true); }

}  // namespace kiwi::plan
