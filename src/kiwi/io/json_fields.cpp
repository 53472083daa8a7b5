#include "kiwi/io/json_fields.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiwi/util/json_depth.h"

namespace kiwi::io {
namespace {

constexpr double kTwoPow63 = 9223372036854775808.0;  // int64 range is [-2^63, 2^63)

// A short description of a value for "(got ...)" in messages.
std::string Describe(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return value.get<bool>() ? "true" : "false";
    case Json::value_t::number_integer: return std::to_string(value.get<int64_t>());
    case Json::value_t::number_unsigned: return std::to_string(value.get<uint64_t>());
    case Json::value_t::number_float: return fmt::format("{}", value.get<double>());
    case Json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      return fmt::format("a string \"{}{}\"", s.substr(0, 32), s.size() > 32 ? "..." : "");
    }
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "a non-JSON value";
  }
}

std::string RangeText(IntRange r) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  if (r.min == 1 && r.max == kMax) return "a positive integer";
  if (r.min == 0 && r.max == kMax) return "a non-negative integer";
  if (r.min == kMin && r.max == kMax) return "an integer";
  if (r.max == kMax) return fmt::format("an integer >= {}", r.min);
  return fmt::format("an integer in [{}, {}]", r.min, r.max);
}

// Splits nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 5: why".
std::string ParseErrorText(const std::string& what, size_t byte) {
  std::string rest = what;
  if (const size_t close = rest.find("] "); close != std::string::npos) rest = rest.substr(close + 2);
  std::string where;
  if (rest.rfind("parse error at ", 0) == 0) {
    const size_t colon = rest.find(": ");
    if (colon != std::string::npos) {
      where = fmt::format(" ({})", rest.substr(15, colon - 15));
      rest = rest.substr(colon + 2);
    }
  }
  return fmt::format("invalid JSON at byte {}{}: {}", byte, where, rest);
}

}  // namespace

JsonPath JsonPath::Key(std::string_view key) const {
  JsonPath child(*this);
  if (!child.path_.empty()) child.path_ += '.';
  child.path_ += key;
  return child;
}

JsonPath JsonPath::Index(size_t index) const {
  JsonPath child(*this);
  child.path_ += fmt::format("[{}]", index);
  return child;
}

Error JsonPath::Bad(std::string_view what) const {
  if (path_.empty()) return BadInput(OneLine(fmt::format("{}: {}", source_, what)));
  return BadInput(OneLine(fmt::format("{}: {}: {}", source_, path_, what)));
}

Result<Json> ParseJson(std::string_view text, const std::string& source) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return BadInput(OneLine(source + ": empty file (expected a JSON document)"));
  if (JsonDeeperThan(text))
    return BadInput(OneLine(fmt::format("{}: JSON nested deeper than {} levels (no kiwi format needs that)", source,
                                        kMaxJsonDepth)));
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    // Raw bytes of a binary file may appear in "last read: ..."; keep the message printable ASCII.
    std::string msg = ParseErrorText(e.what(), e.byte);
    for (char& c : msg)
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    return BadInput(OneLine(source + ": " + msg));
  } catch (const std::bad_alloc&) {
    return BadInput(OneLine(source + ": JSON document too large to hold in memory"));
  } catch (const std::exception& e) {  // e.g. out_of_range.406 "number overflow parsing '1e400'"
    std::string what = e.what();
    if (const size_t close = what.find("] "); close != std::string::npos) what = what.substr(close + 2);
    return BadInput(OneLine(source + ": invalid JSON: " + what));
  }
}

Result<int64_t> AsInt(const Json& value, IntRange range) {
  const auto bad = [&] { return BadInput(fmt::format("must be {} (got {})", RangeText(range), Describe(value))); };
  int64_t v = 0;
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return bad();
    v = static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    v = value.get<int64_t>();
  } else if (value.is_number_float()) {  // accept 1024.0 from tools that write every number as a float
    const double d = value.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || d < -kTwoPow63 || d >= kTwoPow63) return bad();
    v = static_cast<int64_t>(d);
  } else {
    return bad();
  }
  if (v < range.min || v > range.max) return bad();
  return v;
}

Result<double> AsNumber(const Json& value, double min) {
  const std::string want =
      min == 0.0 ? "a non-negative finite number" : fmt::format("a finite number >= {}", min);
  if (!value.is_number()) return BadInput(fmt::format("must be {} (got {})", want, Describe(value)));
  const double d = value.get<double>();
  if (!std::isfinite(d) || d < min) return BadInput(fmt::format("must be {} (got {})", want, Describe(value)));
  return d;
}

Result<std::string> AsString(const Json& value) {
  if (!value.is_string()) return BadInput(fmt::format("must be a string (got {})", Describe(value)));
  return value.get<std::string>();
}

Result<bool> AsBool(const Json& value) {
  if (!value.is_boolean()) return BadInput(fmt::format("must be true or false (got {})", Describe(value)));
  return value.get<bool>();
}

namespace {

// Re-homes a reason-only error at `at`.
template <typename T>
Result<T> Locate(Result<T> r, const JsonPath& at) {
  if (!r) return at.Bad(r.error().message);
  return r;
}

}  // namespace

Result<int64_t> ReadInt(const Json& value, const JsonPath& at, IntRange range) {
  return Locate(AsInt(value, range), at);
}
Result<double> ReadNumber(const Json& value, const JsonPath& at, double min) {
  return Locate(AsNumber(value, min), at);
}
Result<std::string> ReadString(const Json& value, const JsonPath& at) { return Locate(AsString(value), at); }
Result<bool> ReadBool(const Json& value, const JsonPath& at) { return Locate(AsBool(value), at); }

const Json* FindField(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

Status CheckObject(const Json& value, const JsonPath& at) {
  if (!value.is_object()) return at.Bad(fmt::format("must be a JSON object (got {})", Describe(value)));
  return Status::Ok();
}

Status CheckKnownKeys(const Json& object, const JsonPath& at, std::initializer_list<std::string_view> known) {
  for (const auto& item : object.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || item.key() == k;
    if (!found) return at.BadKey(item.key(), fmt::format("unknown field (expected {})", fmt::join(known, ", ")));
  }
  return Status::Ok();
}

Result<const Json*> RequireField(const Json& object, const JsonPath& at, std::string_view key) {
  const Json* v = FindField(object, key);
  if (v == nullptr) return at.BadKey(key, "missing");
  return v;
}

Result<const Json*> ArrayField(const Json& object, const JsonPath& at, std::string_view key) {
  Result<const Json*> v = RequireField(object, at, key);
  if (v && !(*v)->is_array()) return at.BadKey(key, fmt::format("must be a JSON array (got {})", Describe(**v)));
  return v;
}

Result<const Json*> ObjectField(const Json& object, const JsonPath& at, std::string_view key) {
  Result<const Json*> v = RequireField(object, at, key);
  if (v && !(*v)->is_object()) return at.BadKey(key, fmt::format("must be a JSON object (got {})", Describe(**v)));
  return v;
}

Result<int64_t> IntField(const Json& object, const JsonPath& at, std::string_view key, IntRange range) {
  Result<const Json*> v = RequireField(object, at, key);
  if (!v) return v.error();
  return ReadInt(**v, at.Key(key), range);
}

Result<int64_t> IntFieldOr(const Json& object, const JsonPath& at, std::string_view key, int64_t fallback,
                           IntRange range) {
  const Json* v = FindField(object, key);
  if (v == nullptr) return fallback;
  return ReadInt(*v, at.Key(key), range);
}

Result<double> NumberField(const Json& object, const JsonPath& at, std::string_view key, double min) {
  Result<const Json*> v = RequireField(object, at, key);
  if (!v) return v.error();
  return ReadNumber(**v, at.Key(key), min);
}

Result<double> NumberFieldOr(const Json& object, const JsonPath& at, std::string_view key, double fallback,
                             double min) {
  const Json* v = FindField(object, key);
  if (v == nullptr) return fallback;
  return ReadNumber(*v, at.Key(key), min);
}

Result<std::string> StringField(const Json& object, const JsonPath& at, std::string_view key) {
  Result<const Json*> v = RequireField(object, at, key);
  if (!v) return v.error();
  return ReadString(**v, at.Key(key));
}

Result<std::string> StringFieldOr(const Json& object, const JsonPath& at, std::string_view key,
                                  std::string fallback) {
  const Json* v = FindField(object, key);
  if (v == nullptr) return fallback;
  return ReadString(*v, at.Key(key));
}

Result<bool> BoolFieldOr(const Json& object, const JsonPath& at, std::string_view key, bool fallback) {
  const Json* v = FindField(object, key);
  if (v == nullptr) return fallback;
  return ReadBool(*v, at.Key(key));
}

Status CheckVersion(const Json& object, const JsonPath& at, std::string_view key, int64_t supported) {
  Result<int64_t> version = IntField(object, at, key, kAnyInt);
  if (!version) return version.error();
  if (*version != supported)
    return at.BadKey(key, fmt::format("unsupported version {} (this kiwi reads version {})", *version, supported));
  return Status::Ok();
}

namespace {

bool IsScalarArray(const OrderedJson& value) {
  if (!value.is_array()) return false;
  for (const auto& e : value)
    if (e.is_structured()) return false;
  return true;
}

std::string Compact(const OrderedJson& value) {
  return value.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

void DumpInto(const OrderedJson& value, int depth, int expand_depth, std::string& out) {
  if (!value.is_structured() || value.empty() || depth >= expand_depth || IsScalarArray(value)) {
    out += Compact(value);
    return;
  }
  const std::string indent(static_cast<size_t>(2 * (depth + 1)), ' ');
  out += value.is_object() ? "{\n" : "[\n";
  size_t i = 0;
  for (auto it = value.begin(); it != value.end(); ++it, ++i) {
    out += indent;
    if (value.is_object()) out += Compact(OrderedJson(it.key())) + ": ";
    DumpInto(*it, depth + 1, expand_depth, out);
    out += i + 1 < value.size() ? ",\n" : "\n";
  }
  out += std::string(static_cast<size_t>(2 * depth), ' ');
  out += value.is_object() ? "}" : "]";
}

}  // namespace

std::string DumpReadable(const OrderedJson& value, int expand_depth) {
  std::string out;
  DumpInto(value, 0, expand_depth, out);
  out += '\n';
  return out;
}

}  // namespace kiwi::io
