// The search spaces of kiwi's search and Galvatron-BMW's Table II rows (search.h Method).
#include <algorithm>
#include <set>

#include "kiwi/solve/hybrid/search.h"

namespace kiwi::solve::hybrid {
namespace {

struct MethodName_ {
  Method method;
  const char* name;
};

constexpr MethodName_ kNames[] = {
    {Method::kKiwi, "kiwi"}, {Method::kBmw, "bmw"}, {Method::kBase, "base"}, {Method::kGalvatron, "galvatron"}, {Method::kDp, "dp"},
    {Method::kSdp, "sdp"}, {Method::kTp, "tp"},     {Method::kPp, "pp"},               {Method::k3d, "3d"},
    {Method::kDpTp, "dp+tp"}, {Method::kDpPp, "dp+pp"},
};

// Pipeline degrees a method may use, at most one stage per layer: powers of two dividing the devices,
// and those leaving a power of two per stage (on 35 DGX nodes, 280 GPUs: 35 stages of 8, Megatron-LM's
// 530B run). On a power-of-two cluster both are the same.
std::vector<int> PipelineDegrees(int num_devices, int num_layers) {
  std::set<int> degrees;
  for (int d : PowerOfTwoDivisors(num_devices)) degrees.insert({d, num_devices / d});
  std::vector<int> out;
  for (int pp : degrees)
    if (pp <= num_layers) out.push_back(pp);
  return out;
}

StrategySpaceOptions Only(bool dp, bool sdp, bool tp, bool checkpoint) {
  StrategySpaceOptions o;
  o.allow_dp = dp;
  o.allow_sdp = sdp;
  o.allow_tp = tp;
  o.allow_checkpoint = checkpoint;
  return o;
}

}  // namespace

std::optional<Method> ParseMethod(std::string_view name) {
  for (const MethodName_& m : kNames)
    if (name == m.name) return m.method;
  return std::nullopt;
}

std::string MethodName(Method method) {
  for (const MethodName_& m : kNames)
    if (m.method == method) return m.name;
  return "?";
}

std::vector<std::string> MethodNames() {
  std::vector<std::string> out;
  for (const MethodName_& m : kNames) out.push_back(m.name);
  return out;
}

std::vector<Method> AllMethods() {
  std::vector<Method> out;
  for (const MethodName_& m : kNames) out.push_back(m.method);
  return out;
}

MethodSpace SpaceOf(Method method, int num_devices, int num_layers) {
  const std::vector<int> all = PipelineDegrees(num_devices, num_layers);
  MethodSpace s;
  s.pp_degrees = all;
  switch (method) {
    case Method::kKiwi:
      s.partitions = PartitionMode::kBiObjective;
      s.strategies.allow_zero12 = true;
      s.strategies.allow_sequence_parallel = true;
      s.strategies.allow_selective_recompute = true;
      s.strategies.allow_expert_parallel = true;
      s.strategies.allow_context_parallel = true;
      s.virtual_stages = {1, 2, 3, 4};  // Megatron-LM's interleaved 1F1B
      break;
    case Method::kBmw:
      s.partitions = PartitionMode::kBiObjective;
      break;
    case Method::kBase:
      break;
    case Method::kGalvatron:
      s.strategies = Only(true, true, true, false);
      break;
    case Method::kDp:
    case Method::kSdp:
    case Method::kTp:  // one strategy over all devices, no gradient accumulation (DDP, FSDP, Megatron)
      s.strategies = Only(method == Method::kDp, method == Method::kSdp, method == Method::kTp, false);
      s.pp_degrees = {1};
      s.accumulate = false;
      break;
    case Method::kPp:  // GPipe over as many stages as it can use; spare devices replicate stages
      s.strategies = Only(true, false, false, false);
      s.pp_degrees = {all.back()};
      s.schedule = plan::PipelineSchedule::kGPipe;
      break;
    case Method::k3d:  // DeepSpeed 3D: 2-way PP x 2-way TP x the rest DP
      s.strategies = Only(true, false, true, false);
      s.pp_degrees = {std::min(2, all.back())};
      s.tp = num_devices / s.pp_degrees.front() >= 2 ? 2 : 1;
      break;
    case Method::kDpTp:
      s.strategies = Only(true, false, true, false);
      s.pp_degrees = {1};
      break;
    case Method::kDpPp:
      s.strategies = Only(true, false, false, false);
      break;
  }
  return s;
}

}  // namespace kiwi::solve::hybrid
