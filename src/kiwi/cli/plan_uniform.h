#pragma once
// `kiwi plan --uniform`: the uniform layer-level plans listed (plan_uniform.cpp).
#include <cstdint>
#include <string>

#include "kiwi/cli/common.h"
#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/models/presets.h"

namespace kiwi::cli {

struct UniformPlansRequest {
  const ModelFlags& model;
  std::string hf_config;  // --hf-config as given, or ""
  const models::ModelSpec& spec;
  const cost::Cluster& cluster;
  std::string cluster_flag;  // --cluster as given (the plan file records its ClusterReference)
  const cost::CostModel& cost_model;
  const cost::LayerModel& layer_model;
  int64_t budget = 0;
  double seconds = 0.0;  // time limit
  std::string out;
  bool json = false;
};

// Exit code: 0, or ReportError's.
int RunUniformPlans(const UniformPlansRequest& request);

}  // namespace kiwi::cli
