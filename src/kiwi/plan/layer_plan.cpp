// What the layer plan's readers (io/plan_json.cpp, sim/layer_simulator.cpp) say of a partition of the
// wrong length: plan.h PartitionLengthError.
#include <fmt/format.h>

#include "kiwi/plan/plan.h"

namespace kiwi::plan {

std::string PartitionLengthError(const LayerPlan& plan) {
  if (plan.virtual_stages == 1)
    return fmt::format("has {} stages, pp_degree is {}", plan.pp_partition.size(), plan.pp_degree);
  return fmt::format("has {} chunks, pp_degree {} x virtual_stages {} is {}", plan.pp_partition.size(), plan.pp_degree,
                     plan.virtual_stages, plan.NumChunks());
}

}  // namespace kiwi::plan
