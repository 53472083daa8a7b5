// Cluster description files (docs/cluster-format.md) and LoadCluster (preset name or file).
#include "kiwi/io/cluster_json.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiwi/io/file_io.h"
#include "kiwi/io/json_fields.h"
#include "kiwi/util/units.h"

namespace kiwi::io {
namespace {

constexpr std::string_view kVersionKey = "kiwi_cluster_version";
constexpr int64_t kClusterVersion = 1;
constexpr IntRange kCountRange{1, int64_t{1} << 20};
constexpr double kGiga = 1e9;   // "gbps" fields are 10^9 bytes per second
constexpr double kTera = 1e12;  // "peak_tflops" fields are 10^12 FLOP/s
constexpr double kMicro = 1e-6;

// What a rate or a delay of real hardware can be, in the file's units (GB/s, TFLOP/s, us): 0 where
// allowed, else within [min, max]. Beyond these, costs leave the range the solvers plan with (times
// under 10^6 s) and the refusal would name an operator instead of this file (issue 18, item 14).
struct Plausible {
  bool zero_ok;
  double min;
  double max;
};
constexpr Plausible kRate{false, 1e-3, 1e6};  // 1 MB/s .. 1 PB/s
constexpr Plausible kPeak{true, 1e-6, 1e6};   // 1 MFLOP/s .. 10^18 FLOP/s, or 0 = unsupported
constexpr Plausible kDelay{true, 0.0, 1e6};   // up to a second

// A number field in the range `p`, scaled to SI units.
Result<double> ScaledField(const Json& j, const JsonPath& at, std::string_view key, double scale, Plausible p) {
  Result<double> v = NumberField(j, at, key, 0.0);
  if (!v) return v.error();
  if (*v == 0.0 && p.zero_ok) return 0.0;
  if (*v <= 0.0 && !p.zero_ok) return at.BadKey(key, fmt::format("must be positive (got {})", *v));
  if (*v < p.min || *v > p.max)
    return at.BadKey(key, fmt::format("{:g} is not a plausible value: give one in [{:g}, {:g}]{}", *v, p.min, p.max,
                                      p.zero_ok && p.min > 0 ? " or 0" : ""));
  return *v * scale;
}

// A size: bytes as an integer, or a size string ("80GiB"); positive, or >= 0 when `zero_ok`.
Result<int64_t> ReadSize(const Json& j, const JsonPath& at, const char* key, bool zero_ok) {
  Result<const Json*> v = RequireField(j, at, key);
  if (!v) return v.error();
  if ((*v)->is_string()) {
    Result<int64_t> bytes = ParseBytes((*v)->get_ref<const std::string&>(), at.Key(key).path());
    if (!bytes) return BadInput(OneLine(at.source() + ": " + bytes.error().message));
    if (*bytes < 0 || (*bytes == 0 && !zero_ok)) return at.BadKey(key, zero_ok ? "must not be negative" : "must be positive");
    return bytes;
  }
  return ReadInt(**v, at.Key(key), zero_ok ? kNonNegative : kPositive);
}

Status ReadPeakFlops(const Json& device, const JsonPath& device_at, cost::DeviceSpec& spec) {
  Result<const Json*> peak = ObjectField(device, device_at, "peak_tflops");
  if (!peak) return peak.error();
  const JsonPath at = device_at.Key("peak_tflops");
  bool any = false;
  for (const auto& item : (*peak)->items()) {
    const std::optional<ir::DType> dtype = ir::ParseDType(item.key());
    if (!dtype) return at.BadKey(item.key(), "unknown dtype (expected f64, f32, bf16, f16, i64, i32 or u8)");
    Result<double> flops = ScaledField(**peak, at, item.key(), kTera, kPeak);
    if (!flops) return flops.error();
    spec.SetPeakFlops(*dtype, *flops);
    any = any || *flops > 0.0;
  }
  if (!any) return at.Bad("must give a positive peak for at least one dtype");
  return Status::Ok();
}

Result<cost::DeviceSpec> ReadDevice(const Json& doc, const JsonPath& root) {
  Result<const Json*> device = ObjectField(doc, root, "device");
  if (!device) return device.error();
  const Json& j = **device;
  const JsonPath at = root.Key("device");
  KIWI_RETURN_IF_ERROR(
      CheckKnownKeys(j, at, {"name", "memory", "memory_bandwidth_gbps", "peak_tflops", "kernel_launch_us", "reserved",
                             "multiprocessors", "host_link_bandwidth_gbps", "host_memory_bandwidth_gbps"}));
  cost::DeviceSpec spec;
  Result<std::string> name = StringFieldOr(j, at, "name", "device");
  if (!name) return name.error();
  spec.name = std::move(*name);
  Result<int64_t> memory = ReadSize(j, at, "memory", false);
  if (!memory) return memory.error();
  spec.memory_bytes = *memory;
  Result<double> bandwidth = ScaledField(j, at, "memory_bandwidth_gbps", kGiga, kRate);
  if (!bandwidth) return bandwidth.error();
  spec.memory_bandwidth = *bandwidth;
  if (FindField(j, "kernel_launch_us") != nullptr) {
    Result<double> launch = ScaledField(j, at, "kernel_launch_us", kMicro, kDelay);
    if (!launch) return launch.error();
    spec.kernel_launch_seconds = *launch;
  }
  if (FindField(j, "multiprocessors") != nullptr) {
    Result<int64_t> sms = IntField(j, at, "multiprocessors", IntRange{0, 1 << 20});
    if (!sms) return sms.error();
    spec.multiprocessors = static_cast<int>(*sms);
  }
  for (auto [key, field] : {std::pair{"host_link_bandwidth_gbps", &spec.host_link_bandwidth},
                             std::pair{"host_memory_bandwidth_gbps", &spec.host_memory_bandwidth}}) {
    if (FindField(j, key) == nullptr) continue;
    Result<double> rate = ScaledField(j, at, key, kGiga, kRate);
    if (!rate) return rate.error();
    *field = *rate;
  }
  if (FindField(j, "reserved") != nullptr) {
    Result<int64_t> reserved = ReadSize(j, at, "reserved", true);
    if (!reserved) return reserved.error();
    if (*reserved >= spec.memory_bytes) return at.BadKey("reserved", "must be less than the device's memory");
    spec.reserved_bytes = *reserved;
  }
  KIWI_RETURN_IF_ERROR(ReadPeakFlops(j, at, spec));
  return spec;
}

// `required` = the cluster has links of this kind (more than one device per node / more than one node).
Result<cost::Link> ReadLink(const Json& doc, const JsonPath& root, std::string_view key, bool required) {
  const Json* j = FindField(doc, key);
  if (j == nullptr) {
    if (required) return root.BadKey(key, "missing");
    return cost::Link{};
  }
  const JsonPath at = root.Key(key);
  KIWI_RETURN_IF_ERROR(CheckObject(*j, at));
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(*j, at, {"name", "bandwidth_gbps", "latency_us"}));
  cost::Link link;
  Result<std::string> name = StringFieldOr(*j, at, "name", std::string(key));
  if (!name) return name.error();
  link.name = std::move(*name);
  Result<double> bandwidth = ScaledField(*j, at, "bandwidth_gbps", kGiga, kRate);
  if (!bandwidth) return bandwidth.error();
  link.bandwidth = *bandwidth;
  if (FindField(*j, "latency_us") != nullptr) {
    Result<double> latency = ScaledField(*j, at, "latency_us", kMicro, kDelay);
    if (!latency) return latency.error();
    link.latency = *latency;
  }
  return link;
}

Result<cost::Cluster> ReadCluster(const Json& doc, const std::string& source) {
  const JsonPath at(source);
  KIWI_RETURN_IF_ERROR(CheckObject(doc, at));
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(
      doc, at, {kVersionKey, "name", "num_nodes", "devices_per_node", "adapters_per_node", "device", "intra_node",
               "inter_node"}));
  KIWI_RETURN_IF_ERROR(CheckVersion(doc, at, kVersionKey, kClusterVersion));
  cost::Cluster c;
  Result<std::string> name = StringFieldOr(doc, at, "name", std::filesystem::path(source).stem().string());
  if (!name) return name.error();
  c.name = std::move(*name);
  Result<int64_t> nodes = IntFieldOr(doc, at, "num_nodes", 1, kCountRange);
  if (!nodes) return nodes.error();
  Result<int64_t> per_node = IntFieldOr(doc, at, "devices_per_node", 1, kCountRange);
  if (!per_node) return per_node.error();
  if (*nodes * *per_node > std::numeric_limits<int32_t>::max()) return at.Bad("has too many devices");
  c.num_nodes = static_cast<int>(*nodes);
  c.devices_per_node = static_cast<int>(*per_node);
  Result<int64_t> adapters = IntFieldOr(doc, at, "adapters_per_node", 1, kCountRange);
  if (!adapters) return adapters.error();
  c.adapters_per_node = static_cast<int>(*adapters);
  Result<cost::DeviceSpec> device = ReadDevice(doc, at);
  if (!device) return device.error();
  c.device = std::move(*device);
  Result<cost::Link> intra = ReadLink(doc, at, "intra_node", c.devices_per_node > 1);
  if (!intra) return intra.error();
  c.intra_node = std::move(*intra);
  Result<cost::Link> inter = ReadLink(doc, at, "inter_node", c.num_nodes > 1);
  if (!inter) return inter.error();
  c.inter_node = std::move(*inter);
  return c;
}

}  // namespace

Result<cost::Cluster> ParseClusterJson(std::string_view text, const std::string& source) {
  return GuardJson(source, [&]() -> Result<cost::Cluster> {
    Result<Json> doc = ParseJson(text, source);
    if (!doc) return doc.error();
    return ReadCluster(*doc, source);
  });
}

Result<cost::Cluster> ReadClusterFile(const std::string& path) {
  Result<std::string> text = ReadFileText(path);
  if (!text) return text.error();
  return ParseClusterJson(*text, path);
}

Result<cost::Cluster> LoadCluster(const std::string& name_or_path, const std::string& where) {
  Result<cost::Cluster> preset = cost::ClusterPreset(name_or_path);
  if (preset) return preset;
  std::error_code ec;
  if (std::filesystem::is_regular_file(name_or_path, ec)) return ReadClusterFile(name_or_path);
  return BadInput(OneLine(fmt::format("{}: {}", where, preset.error().message)));
}

}  // namespace kiwi::io
