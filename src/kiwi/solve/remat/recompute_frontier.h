#pragma once
// The Pareto frontier of a layer's recompute sets (cost/recompute_set.h): which of its forward ops to
// run again before its backward pass, trading activation bytes kept against recompute seconds. For a
// price lambda (bytes per second) the set minimizing kept bytes + lambda x recompute seconds is a
// minimum-weight closure (Picard 1976) solved exactly as a minimum s-t cut; sweeping lambda over the
// ops' own bytes-per-second ratios and a grid between them yields every set on the lower convex hull
// of (recompute seconds, bytes kept) — the frontier the layer-level search picks from per layer type.
//
// The closure's variables: x_v = 1 when op v is recomputed (weight lambda t_v, less its bytes when the
// backward keeps it), y_u = 1 when the input u of a recomputed op, which the backward would not keep,
// is kept for it (weight b_u; with x_u = 1 it is recomputed instead: y_u >= x_u, and x_u's weight
// carries -b_u so that recomputing u costs no bytes); every recomputed op forces its inputs' y.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiwi/cost/layer_profile.h"
#include "kiwi/cost/recompute_set.h"

namespace kiwi::solve::remat {

struct FrontierSet {
  std::vector<std::string> ops;  // menu names, in the menu's (execution) order
  cost::RecomputeCost cost;      // PriceRecomputeSet of them
};

// The minimum-weight closure of one lambda (bytes per second of recompute), as menu flags.
std::vector<bool> CheapestRecomputeSet(const cost::RecomputeMenu& menu, double lambda);

// The frontier's sets, fewest recompute seconds first, each dropping strictly more bytes than the one
// before (the empty set is left out); at most `max_sets` of them, spread over the frontier and always
// with its last (most bytes dropped) set; 0: all.
std::vector<FrontierSet> RecomputeFrontier(const cost::RecomputeMenu& menu, int max_sets = 0);

// The sets a layer-level search offers a model: up to `per_layer` of each distinct layer menu's frontier,
// those every layer can run (a set naming ops some layer lacks would be a choice for some layers only);
// none when a layer has no menu (a model read from profiles) or `per_layer` is 0.
std::vector<std::vector<std::string>> CommonRecomputeSets(std::span<const cost::LayerProfile> layers, int per_layer);

}  // namespace kiwi::solve::remat
