#pragma once
// Measured per-operator times (seconds), keyed by operator name, e.g. from torch.profiler.
// File format (read by io/profile_json.h): {"kiwi_profile_version": 1, "unit": "s"|"ms"|"us",
// "ops": {"layer0.attn.qkv": 0.00123, ...}}.
#include <map>
#include <optional>
#include <string>

namespace kiwi::cost {

struct Profile {
  std::map<std::string, double> op_seconds;

  std::optional<double> Find(const std::string& op_name) const {
    auto it = op_seconds.find(op_name);
    if (it == op_seconds.end()) return std::nullopt;
    return it->second;
  }
};

}  // namespace kiwi::cost
