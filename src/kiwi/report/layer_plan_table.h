#pragma once
// A layer-level plan's strategies along the model: consecutive layers of one stage with one strategy
// as one row ("0-23  0  TP2xDP4+CKPT").
#include <string>

#include "kiwi/plan/plan.h"

namespace kiwi::report {

std::string LayerPlanTable(const plan::LayerPlan& plan);

}  // namespace kiwi::report
