#pragma once
// `kiwi plan`'s search over everything kiwi knows, at the user's global batch: kiwi's per-layer search
// and, on the same cost model and simulator, the best plan of each named alternative a practitioner
// would otherwise pick:
//  - "Megatron-LM": its 3D grid, every layer the same: TP (within a node; with or without sequence
//    parallelism) x PP x DP (plain or the distributed optimizer, ZeRO-1) x micro-batches x interleaving,
//    full / selective / no recomputation, and EP / CP where the model has experts / ring attention,
//    searched exhaustively;
//  - "FSDP (ZeRO-3)" and "FSDP (ZeRO-3) + CKPT": every layer ZeRO-3 over all devices, micro-batches
//    searched;
//  - "Galvatron-BMW" and "DeepSpeed 3D": hybrid::Method::kBmw and k3d (Table II's rows);
//  - "uniform": kiwi's uniform plans (every layer one strategy of kiwi's space).
// The planners are layer_planners.h's registry, each run through RunVerified (its plan checked by the
// simulator); the best plan is the fastest that fits. The alternatives run first, and kiwi's search
// then looks only for plans faster than their best.
//
//   Result<PlanAllResult> r = PlanAll(model, cluster, cost_model, {.memory_budget_bytes = b, .global_batch = 8});
//   if (r && r->best >= 0) Use(r->candidates[r->best].plan);
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/plan/plan.h"
#include "kiwi/sim/layer_simulator.h"
#include "kiwi/solve/hybrid/layer_planners.h"
#include "kiwi/solve/hybrid/uniform_plans.h"
#include "kiwi/util/result.h"

namespace kiwi::solve::hybrid {

struct PlanAllOptions {
  int64_t memory_budget_bytes = 0;
  int64_t global_batch = 1;  // kept: a training hyperparameter
  double time_limit_seconds = 60.0;  // for everything; kiwi's search gets what the alternatives leave
  std::function<void(const std::string&)> progress = {};  // one line per finished candidate; may be empty
  // kiwi's search (run last) looks only for plans faster than the alternatives' best, skipping what
  // cannot beat it (llama3-405b on 1,024 GPUs: 13 s to the plan it found in 50 s alone); when none is
  // faster its row says so. false: it searches on its own, as `kiwi hybrid` does.
  bool seed_with_alternatives = true;
  // A configuration of the user's (`kiwi plan --compare-to`, io/megatron_args.h) simulated beside the
  // planners as one more candidate, last, named `compare_name`; kiwi's search looks for plans faster
  // than it too. Its batch must be `global_batch`.
  const plan::LayerPlan* compare_to = nullptr;
  std::string compare_name = "yours";
};

struct PlanAllResult {
  std::vector<PlanCandidate> candidates;  // kiwi's first, then the alternatives in the order above
  int best = -1;                          // the fastest that fits, the first on ties; -1: none fits
};

// kBadInput as SearchHybridPlan's, for a batch no plan divides, and for a compare_to plan the simulator
// refuses (naming compare_name).
Result<PlanAllResult> PlanAll(const cost::LayerModel& model, const cost::Cluster& cluster,
                              const cost::CostModel& cost_model, const PlanAllOptions& options);

}  // namespace kiwi::solve::hybrid
