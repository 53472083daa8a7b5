#pragma once
// Typed access to parsed JSON for the readers in io/, with one-line errors that name the file and
// the JSON path of the value at fault:
//
//   Result<Json> doc = ParseJson(text, "g.json");          // "g.json: invalid JSON at byte 12 ..."
//   JsonPath at("g.json");
//   JsonPath node = at.Key("nodes").Index(3);
//   Result<int64_t> bytes = IntField(node_json, node, "cost_ram", kPositive);
//   // error: "g.json: nodes[3].cost_ram: must be a positive integer (got -5)"
//
// Readers never throw: nlohmann exceptions are caught here (ParseJson) and in GuardJson.
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "kiwi/util/one_line.h"
#include "kiwi/util/result.h"

namespace kiwi::io {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;  // writers keep fields in a readable order

// Inclusive bounds of an integer field.
struct IntRange {
  int64_t min = std::numeric_limits<int64_t>::min();
  int64_t max = std::numeric_limits<int64_t>::max();
};
inline constexpr IntRange kAnyInt{};
inline constexpr IntRange kPositive{1, std::numeric_limits<int64_t>::max()};
inline constexpr IntRange kNonNegative{0, std::numeric_limits<int64_t>::max()};
inline constexpr IntRange kInt32{std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};

// A file (or other source) plus a JSON path inside it: "nodes[3].cost_ram".
class JsonPath {
 public:
  explicit JsonPath(std::string source) : source_(std::move(source)) {}

  JsonPath Key(std::string_view key) const;
  JsonPath Index(size_t index) const;
  const std::string& source() const { return source_; }
  const std::string& path() const { return path_; }

  // "source: path: what" (or "source: what" at the root), made one line.
  Error Bad(std::string_view what) const;
  Error BadKey(std::string_view key, std::string_view what) const { return Key(key).Bad(what); }
  Error BadIndex(size_t index, std::string_view what) const { return Index(index).Bad(what); }

 private:
  std::string source_;
  std::string path_;
};

// Parses a JSON document; errors: "src: empty file", "src: invalid JSON at byte N (line L, column C): ...".
Result<Json> ParseJson(std::string_view text, const std::string& source);

// Runs `body` (returning Result<T> or Status), turning any escaped exception into a kBadInput error
// naming `source`: readers check types before every access, so this is a last line of defence.
template <typename Body>
auto GuardJson(const std::string& source, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return BadInput(source + ": input too large to hold in memory");
  } catch (const std::exception& e) {
    return BadInput(OneLine(source + ": malformed input: " + e.what()));
  }
}

// Value checks; errors carry only the reason ("must be a positive integer (got -5)").
Result<int64_t> AsInt(const Json& value, IntRange range);
Result<double> AsNumber(const Json& value, double min);  // finite and >= min
Result<std::string> AsString(const Json& value);
Result<bool> AsBool(const Json& value);

// The same, with the error naming `at`.
Result<int64_t> ReadInt(const Json& value, const JsonPath& at, IntRange range);
Result<double> ReadNumber(const Json& value, const JsonPath& at, double min);
Result<std::string> ReadString(const Json& value, const JsonPath& at);
Result<bool> ReadBool(const Json& value, const JsonPath& at);

// Object fields. `at` is the object's path. A field set to null counts as absent.
const Json* FindField(const Json& object, std::string_view key);
Status CheckObject(const Json& value, const JsonPath& at);  // "must be a JSON object (got ...)"
// Rejects keys outside `known` ("unknown field (expected a, b, c)"): catches typos in hand-written files.
Status CheckKnownKeys(const Json& object, const JsonPath& at, std::initializer_list<std::string_view> known);

Result<const Json*> RequireField(const Json& object, const JsonPath& at, std::string_view key);
Result<const Json*> ArrayField(const Json& object, const JsonPath& at, std::string_view key);
Result<const Json*> ObjectField(const Json& object, const JsonPath& at, std::string_view key);

Result<int64_t> IntField(const Json& object, const JsonPath& at, std::string_view key, IntRange range);
Result<int64_t> IntFieldOr(const Json& object, const JsonPath& at, std::string_view key, int64_t fallback,
                           IntRange range);
Result<double> NumberField(const Json& object, const JsonPath& at, std::string_view key, double min);
Result<double> NumberFieldOr(const Json& object, const JsonPath& at, std::string_view key, double fallback,
                             double min);
Result<std::string> StringField(const Json& object, const JsonPath& at, std::string_view key);
Result<std::string> StringFieldOr(const Json& object, const JsonPath& at, std::string_view key,
                                  std::string fallback);
Result<bool> BoolFieldOr(const Json& object, const JsonPath& at, std::string_view key, bool fallback);

// Checks a format's version key: present, an integer, equal to `supported`.
Status CheckVersion(const Json& object, const JsonPath& at, std::string_view key, int64_t supported);

// Human-readable dump: containers shallower than `expand_depth` get one child per line (two-space
// indent), deeper ones and arrays of scalars are written compactly on one line. Ends with a newline.
std::string DumpReadable(const OrderedJson& value, int expand_depth);

}  // namespace kiwi::io
