#include "kiwi/cost/recompute_set.h"

#include <fmt/format.h>

namespace kiwi::cost {

int RecomputeMenu::Find(const std::string& name) const {
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].name == name) return static_cast<int>(i);
  return -1;
}

RecomputeCost PriceRecomputeSet(const RecomputeMenu& menu, const std::vector<bool>& in_set) {
  RecomputeCost c;
  std::vector<bool> kept(menu.ops.size(), false);  // inputs kept for the set that the backward would not keep
  const auto add = [](int64_t& total, int64_t& replicated, int64_t& gathered, const MenuOp& op, int64_t sign) {
    total += sign * op.bytes_per_sample;
    if (op.replicated) replicated += sign * op.bytes_per_sample;
    if (op.gathered) gathered += sign * op.bytes_per_sample;
  };
  for (size_t i = 0; i < menu.ops.size(); ++i) {
    if (!in_set[i]) continue;
    const MenuOp& op = menu.ops[i];
    c.seconds_per_sample += op.seconds_per_sample;
    if (op.replicated) c.replicated_seconds_per_sample += op.seconds_per_sample;  // a recomputable op is no linear: whole in, whole out
    c.overhead_seconds += op.overhead_seconds;
    c.kernels += op.kernels;
    c.attention = c.attention || op.attention;
    c.routed_gathers += op.routed ? 1 : 0;
    if (op.routed) c.routed_seconds_per_sample += op.seconds_per_sample;
    add(c.recomputed_bytes_per_sample, c.recomputed_replicated_bytes_per_sample, c.recomputed_gathered_bytes_per_sample, op, 1);
    if (op.saved)
      add(c.dropped_bytes_per_sample, c.dropped_replicated_bytes_per_sample, c.dropped_gathered_bytes_per_sample, op, 1);
    for (int in : op.inputs) {
      const size_t k = static_cast<size_t>(in);
      if (in_set[k] || menu.ops[k].saved || kept[k]) continue;
      kept[k] = true;
      add(c.dropped_bytes_per_sample, c.dropped_replicated_bytes_per_sample, c.dropped_gathered_bytes_per_sample,
          menu.ops[k], -1);
    }
  }
  return c;
}

Result<RecomputeCost> PriceRecomputeSet(const RecomputeMenu& menu, std::span<const std::string> names) {
  std::vector<bool> in_set(menu.ops.size(), false);
  for (const std::string& name : names) {
    const int i = menu.Find(name);
    if (i < 0 || !menu.ops[static_cast<size_t>(i)].recomputable) {
      std::string choices;
      for (const MenuOp& op : menu.ops)
        if (op.recomputable) choices += (choices.empty() ? "" : ", ") + op.name;
      return BadInput(fmt::format("{} \"{}\" in the layer (its recomputable ops: {})",
                                  i < 0 ? "no op" : "cannot recompute the op", name, choices.empty() ? "none" : choices));
    }
    if (in_set[static_cast<size_t>(i)]) return BadInput(fmt::format("\"{}\" is named twice", name));
    in_set[static_cast<size_t>(i)] = true;
  }
  return PriceRecomputeSet(menu, in_set);
}

}  // namespace kiwi::cost
