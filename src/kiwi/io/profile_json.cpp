// Measured per-op times (cost/profile.h): {"kiwi_profile_version": 1, "unit": "ms", "ops": {...}}.
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "kiwi/io/cluster_json.h"
#include "kiwi/io/graph_json.h"
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

Result<cost::Profile> ReadProfile(const Json& doc, const std::string& source) {
  const JsonPath at(source);
  KIWI_RETURN_IF_ERROR(CheckObject(doc, at));
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(doc, at, {kVersionKey, "unit", "ops"}));
  KIWI_RETURN_IF_ERROR(CheckVersion(doc, at, kVersionKey, kProfileVersion));
  Result<double> scale = ReadUnit(doc, at);
  if (!scale) return scale.error();
  Result<const Json*> ops = ObjectField(doc, at, "ops");
  if (!ops) return ops.error();
  cost::Profile profile;
  const JsonPath ops_at = at.Key("ops");
  for (const auto& item : (*ops)->items()) {
    Result<double> t = ReadNumber(item.value(), ops_at.Key(item.key()), 0.0);
    if (!t) return t.error();
    profile.op_seconds[item.key()] = *t * *scale;
  }
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
