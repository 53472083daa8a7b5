#pragma once
// Recompute sets: which of a layer's forward ops run again before its backward pass instead of keeping
// their outputs (plan::LayerStrategy::recompute, by name). The layer's forward ops and what each keeps
// and costs (its RecomputeMenu) are taken from the training graph once per layer type; any set of them
// is priced here, and solve/remat/recompute_frontier.h chooses the sets worth offering the search.
//
// A set R recomputes its ops from their inputs right before the layer's backward pass (as whole-layer
// checkpointing does, per op): the saved outputs of R's ops are not kept; every input of an op of R
// that is not itself in R must be kept instead (free when the backward keeps it anyway); R's outputs are
// resident while the layer's backward runs. Linears are never recomputed (their recomputation would
// redo Megatron TP's collectives; whole-layer checkpointing covers them), nor the layer's outputs
// (later layers' backward passes read them before this layer's).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiwi/util/result.h"

namespace kiwi::cost {

// One forward op of a layer, or one activation the layer reads from outside it (its input).
struct MenuOp {
  std::string name = {};        // the node's name without the layer's prefix ("mlp.act" of "layer3.mlp.act")
  std::vector<int> inputs = {}; // menu indices of the activations it reads (parameters are always resident)
  int64_t bytes_per_sample = 0; // its output
  bool saved = false;           // the backward pass keeps its output (or the previous layer's does)
  bool replicated = false;      // Megatron TP keeps it whole on every rank (without sequence parallelism)
  bool gathered = false;        // and even with it (the experts' rows: LayerProfile::gathered_activation_bytes_per_sample)
  bool recomputable = false;    // an op of the layer, not a linear, not read by a later layer
  bool attention = false;       // it reads the attention's keys or values (context parallelism's ring feeds it)
  // A mixture's gather of hidden-state rows by the routing (the dispatch to the experts, the combine
  // back to the tokens): under expert parallelism an all-to-all, which recomputing it runs again.
  bool routed = false;
  double seconds_per_sample = 0.0;
  double overhead_seconds = 0.0;  // per micro-batch (CostModel::OverheadIn)
  int kernels = 0;
  bool operator==(const MenuOp&) const = default;
};

struct RecomputeMenu {
  std::vector<MenuOp> ops;      // in execution order: an op's inputs come before it
  // The index of the op called `name`; -1 when there is none.
  int Find(const std::string& name) const;
  bool operator==(const RecomputeMenu&) const = default;
};

// A layer type's menu, shared by the layers of the type (a 10,000-layer stack holds one); two compare
// equal when their menus do.
struct SharedRecomputeMenu {
  std::shared_ptr<const RecomputeMenu> menu;
  bool operator==(const SharedRecomputeMenu& o) const {
    return menu == o.menu || (menu && o.menu && *menu == *o.menu);
  }
};

// What a recompute set changes in its layer, per sample on one device before TP (the `replicated`
// parts are those TP keeps whole without sequence parallelism, the `gathered` ones those it keeps whole
// with it too), and its forward work again.
struct RecomputeCost {
  int64_t dropped_bytes_per_sample = 0;            // saved outputs no longer kept, less the inputs kept for them
  int64_t dropped_replicated_bytes_per_sample = 0;
  int64_t dropped_gathered_bytes_per_sample = 0;
  int64_t recomputed_bytes_per_sample = 0;         // resident during the layer's backward pass
  int64_t recomputed_replicated_bytes_per_sample = 0;
  int64_t recomputed_gathered_bytes_per_sample = 0;
  double seconds_per_sample = 0.0;
  double replicated_seconds_per_sample = 0.0;      // of its ops TP keeps whole (MenuOp::replicated)
  double routed_seconds_per_sample = 0.0;          // of its routed gathers (MenuOp::routed)
  double overhead_seconds = 0.0;
  int kernels = 0;
  bool attention = false;  // it recomputes an op reading keys or values: context parallelism's forward ring runs again
  int routed_gathers = 0;  // the routed gathers it recomputes: under expert parallelism an all-to-all each, again
  bool operator==(const RecomputeCost&) const = default;
};

// Prices the set of menu ops flagged in `in_set` (one flag per op; flags of ops that are not
// recomputable must be false).
RecomputeCost PriceRecomputeSet(const RecomputeMenu& menu, const std::vector<bool>& in_set);

// Prices the set named by `names`; an unknown name, a name twice, or an op that cannot be recomputed
// is bad input, said in one line naming it ("no op \"mlp.x\" in the layer (its recomputable ops: ...)").
Result<RecomputeCost> PriceRecomputeSet(const RecomputeMenu& menu, std::span<const std::string> names);

}  // namespace kiwi::cost
