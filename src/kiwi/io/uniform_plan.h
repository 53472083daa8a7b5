#pragma once
// What frameworks that run one parallelism in every layer (Megatron-LM, torchtitan) need of a kiwi
// layer plan before writing it: every layer's strategy like layer 0's, checkpointing apart (both can
// checkpoint some layers only).
#include <string_view>

#include "kiwi/plan/plan.h"
#include "kiwi/util/result.h"

namespace kiwi::io {

// kBadInput naming the first layer whose strategy, checkpointing apart, differs from layer 0's, as
// "layer 2: strategy TP4xDP2 beside layer 0's TP2xDP4 (FRAMEWORK runs one strategy in every layer),
// which FRAMEWORK cannot express", or that recomputes a set of its ops or offloads its optimizer
// (neither framework can); also for a plan without layers.
Status CheckOneStrategy(const plan::LayerPlan& plan, std::string_view framework);

// "layer N: WHAT, which FRAMEWORK cannot express"
Error Unexpressible(size_t layer, std::string_view what, std::string_view framework);

}  // namespace kiwi::io
