#include "kiwi/solve/hybrid/uniform_plans.h"

#include "kiwi/solve/hybrid/strategy_space.h"

namespace kiwi::solve {

std::vector<int> EvenPartition(int num_layers, int num_stages) {
  std::vector<int> parts(static_cast<size_t>(num_stages), num_layers / num_stages);
  for (int i = 0; i < num_layers % num_stages; ++i) ++parts[static_cast<size_t>(i)];
  return parts;
}

std::vector<NamedLayerPlan> UniformLayerPlans(const UniformPlanOptions& o) {
  std::vector<NamedLayerPlan> plans;
  for (int pp : hybrid::PowerOfTwoDivisors(o.num_devices)) {
    if (pp > o.num_layers) continue;
    const int stage_devices = o.num_devices / pp;
    for (int tp : hybrid::PowerOfTwoDivisors(stage_devices)) {
      const int dp = stage_devices / tp;
      if (o.global_batch % dp != 0) continue;
      for (plan::Zero zero : {plan::Zero::kNone, plan::Zero::kOptimizerStates, plan::Zero::kGradients, plan::Zero::kParameters}) {
        if (zero != plan::Zero::kNone && dp == 1) continue;
        if (zero == plan::Zero::kParameters ? !o.allow_sdp : zero != plan::Zero::kNone && !o.allow_zero12) continue;
        for (bool checkpoint : {false, true}) {
          if (checkpoint && !o.allow_checkpoint) continue;
          const plan::LayerStrategy strategy{tp, dp, zero, checkpoint};
          plan::LayerPlan p;
          p.layers.assign(static_cast<size_t>(o.num_layers), strategy);
          p.pp_degree = pp;
          p.pp_partition = EvenPartition(o.num_layers, pp);
          p.global_batch = o.global_batch;
          p.micro_batches = pp == 1 ? 1 : static_cast<int>(o.global_batch / dp);
          plans.push_back({plan::StrategyName(strategy, pp), std::move(p)});
        }
      }
    }
  }
  return plans;
}

}  // namespace kiwi::solve
