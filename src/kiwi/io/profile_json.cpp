// Profile files (cost/profile.h, docs/cluster-format.md): {"kiwi_profile_version": 1, "unit": "ms",
// "ops": {...}, "device": {...}, "collectives": [...]}.
#include <algorithm>
#include <array>
#include <map>
#include <utility>
#include <vector>
#include <cmath>

#include <fmt/format.h>

#include "kiwi/io/cluster_json.h"
#include "kiwi/io/file_io.h"
#include "kiwi/io/json_fields.h"

namespace kiwi::io {
namespace {

constexpr std::string_view kVersionKey = "kiwi_profile_version";
constexpr int64_t kProfileVersion = 1;

struct TimeUnit {
  std::string_view name;
  double seconds;
};
constexpr std::array<TimeUnit, 3> kTimeUnits = {{{"s", 1.0}, {"ms", 1e-3}, {"us", 1e-6}}};

Result<double> ReadUnit(const Json& doc, const JsonPath& at) {
  // Required: a missing unit would silently scale every time by 10^3 or 10^6.
  Result<std::string> unit = StringField(doc, at, "unit");
  if (!unit) return unit.error();
  for (const TimeUnit& u : kTimeUnits)
    if (*unit == u.name) return u.seconds;
  return at.BadKey("unit", fmt::format("must be \"s\", \"ms\" or \"us\" (got \"{}\")", *unit));
}

// A timed row's "dtype" and "time" (positive, in the file's unit).
Status ReadTiming(const Json& row, const JsonPath& row_at, double scale, ir::DType& dtype, double& seconds) {
  Result<std::string> name = StringField(row, row_at, "dtype");
  if (!name) return name.error();
  std::optional<ir::DType> parsed = ir::ParseDType(*name);
  if (!parsed) return row_at.BadKey("dtype", fmt::format("unknown dtype \"{}\" (e.g. f32, bf16, f16)", *name));
  dtype = *parsed;
  Result<double> t = NumberField(row, row_at, "time", 0.0);
  if (!t) return t.error();
  if (*t <= 0.0) return row_at.BadKey("time", "must be positive");
  seconds = *t * scale;
  return Status::Ok();
}

// A GEMM-like table: [{"op", "m", "n", "k", "dtype", "time"}, ...], times in the file's unit ("op" optional).
Result<std::vector<cost::GemmSample>> ReadGemmTable(const Json& device, const JsonPath& at, std::string_view key,
                                                    double scale) {
  std::vector<cost::GemmSample> out;
  if (!FindField(device, key)) return out;
  Result<const Json*> rows = ArrayField(device, at, key);
  if (!rows) return rows.error();
  const JsonPath table_at = at.Key(key);
  for (size_t i = 0; i < (*rows)->size(); ++i) {
    const Json& row = (**rows)[i];
    const JsonPath row_at = table_at.Index(i);
    KIWI_RETURN_IF_ERROR(CheckObject(row, row_at));
    KIWI_RETURN_IF_ERROR(CheckKnownKeys(row, row_at, {"op", "m", "n", "k", "dtype", "time"}));
    cost::GemmSample sample;
    Result<std::string> op = StringFieldOr(row, row_at, "op", "");
    if (!op) return op.error();
    sample.op = *op;
    for (auto [name, field] : {std::pair{"m", &sample.m}, std::pair{"n", &sample.n}, std::pair{"k", &sample.k}}) {
      Result<int64_t> v = IntField(row, row_at, name, {1, int64_t{1} << 40});
      if (!v) return v.error();
      *field = *v;
    }
    KIWI_RETURN_IF_ERROR(ReadTiming(row, row_at, scale, sample.dtype, sample.seconds));
    out.push_back(sample);
  }
  return out;
}

// "attention": [{"op", "batch_heads", "seq", "head_dim", "causal", "dropout", "dtype", "time"}, ...].
Result<std::vector<cost::AttentionSample>> ReadAttentionTable(const Json& device, const JsonPath& at, double scale) {
  std::vector<cost::AttentionSample> out;
  if (!FindField(device, "attention")) return out;
  Result<const Json*> rows = ArrayField(device, at, "attention");
  if (!rows) return rows.error();
  const JsonPath table_at = at.Key("attention");
  for (size_t i = 0; i < (*rows)->size(); ++i) {
    const Json& row = (**rows)[i];
    const JsonPath row_at = table_at.Index(i);
    KIWI_RETURN_IF_ERROR(CheckObject(row, row_at));
    KIWI_RETURN_IF_ERROR(
        CheckKnownKeys(row, row_at, {"op", "batch_heads", "seq", "head_dim", "causal", "dropout", "dtype", "time"}));
    cost::AttentionSample sample;
    Result<std::string> op = StringField(row, row_at, "op");
    if (!op) return op.error();
    if (*op != "attention" && *op != "attention_grad")
      return row_at.BadKey("op", fmt::format("must be \"attention\" or \"attention_grad\" (got \"{}\")", *op));
    sample.op = *op;
    for (auto [name, field] : {std::pair{"batch_heads", &sample.batch_heads}, std::pair{"seq", &sample.seq},
                               std::pair{"head_dim", &sample.head_dim}}) {
      Result<int64_t> v = IntField(row, row_at, name, {1, int64_t{1} << 40});
      if (!v) return v.error();
      *field = *v;
    }
    Result<bool> causal = BoolFieldOr(row, row_at, "causal", false);
    if (!causal) return causal.error();
    sample.causal = *causal;
    Result<double> dropout = NumberFieldOr(row, row_at, "dropout", 0.0, 0.0);
    if (!dropout) return dropout.error();
    if (*dropout >= 1.0) return row_at.BadKey("dropout", fmt::format("must be in [0, 1) (got {})", *dropout));
    sample.dropout = *dropout;
    KIWI_RETURN_IF_ERROR(ReadTiming(row, row_at, scale, sample.dtype, sample.seconds));
    out.push_back(sample);
  }
  return out;
}

constexpr std::array<std::pair<std::string_view, cost::Collective>, 5> kCollectiveNames = {{
    {"all_reduce", cost::Collective::kAllReduce},
    {"all_gather", cost::Collective::kAllGather},
    {"reduce_scatter", cost::Collective::kReduceScatter},
    {"all_to_all", cost::Collective::kAllToAll},
    {"send_recv", cost::Collective::kPointToPoint},
}};

// "collectives": [{"op", "devices", "bytes", "time"}, ...].
Result<std::vector<cost::CollectiveSample>> ReadCollectives(const Json& doc, const JsonPath& at, double scale) {
  std::vector<cost::CollectiveSample> out;
  if (!FindField(doc, "collectives")) return out;
  Result<const Json*> rows = ArrayField(doc, at, "collectives");
  if (!rows) return rows.error();
  const JsonPath table_at = at.Key("collectives");
  for (size_t i = 0; i < (*rows)->size(); ++i) {
    const Json& row = (**rows)[i];
    const JsonPath row_at = table_at.Index(i);
    KIWI_RETURN_IF_ERROR(CheckObject(row, row_at));
    KIWI_RETURN_IF_ERROR(CheckKnownKeys(row, row_at, {"op", "devices", "bytes", "time"}));
    cost::CollectiveSample sample;
    Result<std::string> op = StringField(row, row_at, "op");
    if (!op) return op.error();
    const auto named = std::find_if(kCollectiveNames.begin(), kCollectiveNames.end(),
                                    [&](const auto& n) { return n.first == *op; });
    if (named == kCollectiveNames.end())
      return row_at.BadKey("op", fmt::format("must be all_reduce, all_gather, reduce_scatter, all_to_all or "
                                             "send_recv (got \"{}\")", *op));
    sample.op = named->second;
    Result<int64_t> devices = IntField(row, row_at, "devices", {2, 1 << 20});
    if (!devices) return devices.error();
    sample.devices = static_cast<int>(*devices);
    Result<int64_t> bytes = IntField(row, row_at, "bytes", kPositive);
    if (!bytes) return bytes.error();
    sample.bytes = *bytes;
    Result<double> t = NumberField(row, row_at, "time", 0.0);
    if (!t) return t.error();
    sample.seconds = *t * scale;
    out.push_back(sample);
  }
  return out;
}

// An optional object of numbers by name ({"relu": 12.5, ...}), each >= 0 (> 0 with `positive`), times `scale`.
Result<std::map<std::string, double>> ReadNumbersByName(const Json& object, const JsonPath& at, std::string_view key,
                                                        double scale, bool positive) {
  std::map<std::string, double> out;
  if (!FindField(object, key)) return out;
  Result<const Json*> items = ObjectField(object, at, key);
  if (!items) return items.error();
  const JsonPath items_at = at.Key(key);
  for (const auto& item : (*items)->items()) {
    Result<double> v = ReadNumber(item.value(), items_at.Key(item.key()), 0.0);
    if (!v) return v.error();
    if (positive && *v <= 0.0) return items_at.BadKey(item.key(), "must be positive");
    out[item.key()] = *v * scale;
  }
  return out;
}

// "reference_step": {"model": "gpt", "layers", "hidden", "heads", "seq", "batch", "vocab", "time"}: a small
// model's timed training pass (cost::ReferenceStep), its time in the file's unit.
Result<cost::ReferenceStep> ReadReferenceStep(const Json& device, const JsonPath& device_at, double scale) {
  Result<const Json*> object = ObjectField(device, device_at, "reference_step");
  if (!object) return object.error();
  const Json& r = **object;
  const JsonPath at = device_at.Key("reference_step");
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(r, at, {"model", "layers", "hidden", "heads", "seq", "batch", "vocab", "time"}));
  cost::ReferenceStep step;
  Result<std::string> model = StringField(r, at, "model");
  if (!model) return model.error();
  if (*model != "gpt") return at.BadKey("model", fmt::format("must be \"gpt\" (got \"{}\")", *model));
  step.model = *model;
  // A small model: its IR is built and priced each time the profile is loaded.
  Result<int64_t> layers = IntField(r, at, "layers", IntRange{1, 64});
  if (!layers) return layers.error();
  step.layers = static_cast<int>(*layers);
  constexpr IntRange kSize{1, 1 << 16};
  for (auto [key, field] : {std::pair<std::string_view, int64_t*>{"hidden", &step.hidden}, {"heads", &step.heads},
                            {"seq", &step.seq}, {"batch", &step.batch}, {"vocab", &step.vocab}}) {
    Result<int64_t> v = IntField(r, at, key, kSize);
    if (!v) return v.error();
    *field = *v;
  }
  Result<double> t = NumberField(r, at, "time", 0.0);
  if (!t) return t.error();
  if (*t <= 0.0) return at.BadKey("time", "must be positive");
  step.seconds = *t * scale;
  return step;
}

// "device": {"name", "gemm", "conv", "attention", "memory_bandwidth_gbps", "op_bandwidth_gbps", "optimizer_time_per_tensor",
// "kernel_time", "reference_step", "op_time", "runner_op_time", "overhead"}.
Result<cost::DeviceProfile> ReadDevice(const Json& doc, const JsonPath& root, double scale) {
  cost::DeviceProfile device;
  if (!FindField(doc, "device")) return device;
  Result<const Json*> object = ObjectField(doc, root, "device");
  if (!object) return object.error();
  const Json& d = **object;
  const JsonPath at = root.Key("device");
  KIWI_RETURN_IF_ERROR(
      CheckKnownKeys(d, at, {"name", "gemm", "conv", "attention", "memory_bandwidth_gbps", "op_bandwidth_gbps",
                             "optimizer_time_per_tensor", "kernel_time", "reference_step", "op_time", "runner_op_time",
                             "overhead"}));
  Result<std::string> name = StringFieldOr(d, at, "name", "");
  if (!name) return name.error();
  device.name = *name;
  Result<std::vector<cost::GemmSample>> gemm = ReadGemmTable(d, at, "gemm", scale);
  if (!gemm) return gemm.error();
  device.gemm = std::move(*gemm);
  Result<std::vector<cost::GemmSample>> conv = ReadGemmTable(d, at, "conv", scale);
  if (!conv) return conv.error();
  device.conv = std::move(*conv);
  Result<std::vector<cost::AttentionSample>> attention = ReadAttentionTable(d, at, scale);
  if (!attention) return attention.error();
  device.attention = std::move(*attention);
  if (FindField(d, "memory_bandwidth_gbps")) {
    Result<double> gbps = NumberField(d, at, "memory_bandwidth_gbps", 0.0);
    if (!gbps) return gbps.error();
    if (*gbps <= 0.0) return at.BadKey("memory_bandwidth_gbps", "must be positive");
    device.memory_bandwidth = *gbps * 1e9;
  }
  Result<std::map<std::string, double>> op_bandwidth = ReadNumbersByName(d, at, "op_bandwidth_gbps", 1e9, true);
  if (!op_bandwidth) return op_bandwidth.error();
  device.op_bandwidth = std::move(*op_bandwidth);
  Result<std::map<std::string, double>> per_tensor = ReadNumbersByName(d, at, "optimizer_time_per_tensor", scale, false);
  if (!per_tensor) return per_tensor.error();
  device.optimizer_tensor_seconds = std::move(*per_tensor);
  if (FindField(d, "kernel_time")) {
    Result<double> t = NumberField(d, at, "kernel_time", 0.0);
    if (!t) return t.error();
    device.kernel_seconds = *t * scale;
  }
  if (FindField(d, "reference_step")) {
    Result<cost::ReferenceStep> step = ReadReferenceStep(d, at, scale);
    if (!step) return step.error();
    device.reference_step = *step;
  }
  for (auto [key, field] : {std::pair<std::string_view, std::optional<double>*>{"op_time", &device.op_seconds},
                            {"runner_op_time", &device.runner_op_seconds}}) {
    if (!FindField(d, key)) continue;
    Result<double> t = NumberField(d, at, key, 0.0);
    if (!t) return t.error();
    *field = *t * scale;
  }
  Result<std::string> overhead = StringFieldOr(d, at, "overhead", "additive");
  if (!overhead) return overhead.error();
  if (*overhead == "additive") device.overhead = cost::OverheadKind::kAdditive;
  else if (*overhead == "launch_bound") device.overhead = cost::OverheadKind::kLaunchBound;
  else return at.BadKey("overhead", fmt::format("must be \"additive\" or \"launch_bound\" (got \"{}\")", *overhead));
  return device;
}

Result<cost::Profile> ReadProfile(const Json& doc, const std::string& source) {
  const JsonPath at(source);
  KIWI_RETURN_IF_ERROR(CheckObject(doc, at));
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(doc, at, {kVersionKey, "unit", "ops", "device", "collectives"}));
  KIWI_RETURN_IF_ERROR(CheckVersion(doc, at, kVersionKey, kProfileVersion));
  Result<double> scale = ReadUnit(doc, at);
  if (!scale) return scale.error();
  if (!FindField(doc, "ops") && !FindField(doc, "device") && !FindField(doc, "collectives"))
    return at.BadKey("ops", "missing (a profile has ops, device or collectives)");
  cost::Profile profile;
  Result<std::map<std::string, double>> ops = ReadNumbersByName(doc, at, "ops", *scale, false);
  if (!ops) return ops.error();
  profile.op_seconds = std::move(*ops);
  Result<cost::DeviceProfile> device = ReadDevice(doc, at, *scale);
  if (!device) return device.error();
  profile.device = std::move(*device);
  Result<std::vector<cost::CollectiveSample>> collectives = ReadCollectives(doc, at, *scale);
  if (!collectives) return collectives.error();
  profile.device.collectives = std::move(*collectives);
  return profile;
}

}  // namespace

Result<cost::Profile> ParseProfileJson(std::string_view text, const std::string& source) {
  return GuardJson(source, [&]() -> Result<cost::Profile> {
    Result<Json> doc = ParseJson(text, source);
    if (!doc) return doc.error();
    return ReadProfile(*doc, source);
  });
}

Result<cost::Profile> ReadProfileFile(const std::string& path) {
  Result<std::string> text = ReadFileText(path);
  if (!text) return text.error();
  return ParseProfileJson(*text, path);
}

}  // namespace kiwi::io
