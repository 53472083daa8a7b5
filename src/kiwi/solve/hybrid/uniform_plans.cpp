#include "kiwi/solve/hybrid/uniform_plans.h"

#include <fmt/format.h>

#include "kiwi/solve/hybrid/strategy_space.h"

namespace kiwi::solve {

std::vector<int> EvenPartition(int num_layers, int num_stages) {
  std::vector<int> parts(static_cast<size_t>(num_stages), num_layers / num_stages);
  for (int i = 0; i < num_layers % num_stages; ++i) ++parts[static_cast<size_t>(i)];
  return parts;
}

plan::LayerPlan ExpandUniform(plan::LayerPlan compact, int num_layers) {
  if (!compact.layers.empty()) compact.layers.assign(static_cast<size_t>(num_layers), compact.layers.front());
  return compact;
}

std::vector<NamedLayerPlan> UniformLayerPlans(const UniformPlanOptions& o) {
  hybrid::StrategySpaceOptions space;  // the hybrid search's per-layer space, one strategy for all layers
  space.allow_sdp = o.allow_sdp;
  space.allow_zero12 = o.allow_zero12;
  space.allow_sequence_parallel = o.allow_sequence_parallel;
  space.allow_checkpoint = o.allow_checkpoint;
  space.allow_selective_recompute = o.allow_selective_recompute;
  space.allow_expert_parallel = o.experts > 0;
  space.experts = o.experts;
  space.allow_context_parallel = o.context_sequence > 0;
  space.context_sequence = o.context_sequence;
  space.recompute_sets = o.recompute_sets;
  space.max_tp = o.max_tp;
  std::vector<NamedLayerPlan> plans;
  for (int pp : hybrid::PowerOfTwoDivisors(o.num_devices)) {
    if (pp > o.num_layers) continue;
    for (const plan::LayerStrategy& strategy : hybrid::LayerStrategies(o.num_devices / pp, space)) {
      if (o.global_batch % strategy.Replicas() != 0) continue;
      if (!hybrid::WorthContextParallel(strategy, o.global_batch)) continue;
      plan::LayerPlan p;
      p.layers.assign(o.compact ? 1 : static_cast<size_t>(o.num_layers), strategy);
      p.pp_degree = pp;
      p.pp_partition = EvenPartition(o.num_layers, pp);
      p.global_batch = o.global_batch;
      const int64_t per_replica = o.global_batch / strategy.Replicas();
      if (!o.sweep_micro_batches) {
        p.micro_batches = pp == 1 ? 1 : static_cast<int>(per_replica);
        plans.push_back({plan::StrategyName(strategy, pp), std::move(p)});
        continue;
      }
      for (int64_t m = 1; m <= per_replica; ++m) {
        if (per_replica % m != 0) continue;
        p.micro_batches = static_cast<int>(m);
        p.virtual_stages = 1;
        p.pp_partition = EvenPartition(o.num_layers, pp);
        const std::string name = plan::StrategyName(strategy, pp);
        plans.push_back({fmt::format("{} m{}", name, m), p});
        if (!o.interleave || pp == 1 || m % pp != 0) continue;
        for (int v = 2; pp * v <= o.num_layers; ++v) {
          if (o.num_layers % (pp * v) != 0) continue;
          p.virtual_stages = v;
          p.pp_partition = EvenPartition(o.num_layers, pp * v);
          plans.push_back({fmt::format("{} m{} v{}", name, m, v), p});
        }
      }
    }
  }
  return plans;
}

}  // namespace kiwi::solve
