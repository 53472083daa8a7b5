#pragma once
// The one place a cost model is made from a cluster and a read profile (CostFlags::Make for --profile
// FILE, the Python binding for profile text): where the profile times a reference training pass
// (DeviceProfile::reference_step), the per-op time of eager training is calibrated from it here.
#include <string>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/cost/profile.h"
#include "kiwi/util/result.h"

namespace kiwi::cli {

// `source` names the profile in errors ("prof.json: device.reference_step: ...", exit code 2).
Result<cost::CostModel> MakeCostModel(const cost::Cluster& cluster, const cost::CostModelOptions& options,
                                      cost::Profile profile, const std::string& source);

}  // namespace kiwi::cli
