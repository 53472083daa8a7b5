#include "kiwi/io/json_fields.h"

#include <gtest/gtest.h>

#include "io_test_util.h"

namespace kiwi::io {
namespace {

using testing::ErrorOf;
using testing::ExpectBadInput;

TEST(JsonPath, FormatsKeysAndIndices) {
  const JsonPath root("g.json");
  EXPECT_EQ(root.Bad("oops").message, "g.json: oops");
  EXPECT_EQ(root.Key("nodes").Index(3).Key("cost_ram").Bad("must be a positive integer").message,
            "g.json: nodes[3].cost_ram: must be a positive integer");
  EXPECT_EQ(root.Key("order").BadIndex(7, "x").message, "g.json: order[7]: x");
  EXPECT_EQ(root.Bad("oops").code, ErrorCode::kBadInput);
}

TEST(JsonPath, ErrorsStayOnOneLine) {
  const Error e = JsonPath("g.json").BadKey("name\nx", "bad\r\nvalue");
  EXPECT_EQ(e.message, "g.json: name\\x0ax: bad\\x0d\\x0avalue");
}

TEST(AsInt, AcceptsIntegersAndIntegralFloats) {
  EXPECT_EQ(*AsInt(Json(1024), kPositive), 1024);
  EXPECT_EQ(*AsInt(Json::parse("1024.0"), kPositive), 1024);
  EXPECT_EQ(*AsInt(Json::parse("9223372036854775807"), kAnyInt), INT64_MAX);
  EXPECT_EQ(*AsInt(Json::parse("-9223372036854775808"), kAnyInt), INT64_MIN);
  EXPECT_EQ(*AsInt(Json(0), kNonNegative), 0);
}

TEST(AsInt, RejectsFractionsStringsBoolsAndValuesBeyondInt64) {
  EXPECT_EQ(ErrorOf(AsInt(Json::parse("1.5"), kPositive)), "must be a positive integer (got 1.5)");
  EXPECT_EQ(ErrorOf(AsInt(Json("12"), kPositive)), "must be a positive integer (got a string \"12\")");
  EXPECT_EQ(ErrorOf(AsInt(Json(true), kAnyInt)), "must be an integer (got true)");
  EXPECT_EQ(ErrorOf(AsInt(Json(-5), kPositive)), "must be a positive integer (got -5)");
  EXPECT_EQ(ErrorOf(AsInt(Json(0), kPositive)), "must be a positive integer (got 0)");
  EXPECT_FALSE(AsInt(Json::parse("9223372036854775808"), kAnyInt).ok());   // 2^63
  EXPECT_FALSE(AsInt(Json::parse("18446744073709551615"), kAnyInt).ok());  // uint64 max
  EXPECT_FALSE(AsInt(Json::parse("1e19"), kAnyInt).ok());
  EXPECT_FALSE(AsInt(Json::parse("-1e19"), kAnyInt).ok());
  EXPECT_FALSE(AsInt(Json::parse("100000000000000000000000"), kAnyInt).ok());  // parsed as a float
  EXPECT_EQ(ErrorOf(AsInt(Json(5), {-1, 3})), "must be an integer in [-1, 3] (got 5)");
}

TEST(AsNumber, FiniteAndAboveTheMinimum) {
  EXPECT_EQ(*AsNumber(Json(0), 0.0), 0.0);
  EXPECT_EQ(*AsNumber(Json::parse("1e300"), 0.0), 1e300);
  EXPECT_EQ(*AsNumber(Json(7), 0.0), 7.0);
  EXPECT_EQ(ErrorOf(AsNumber(Json(-0.5), 0.0)), "must be a non-negative finite number (got -0.5)");
  EXPECT_EQ(ErrorOf(AsNumber(Json("3"), 0.0)), "must be a non-negative finite number (got a string \"3\")");
  EXPECT_EQ(ErrorOf(AsNumber(Json(nullptr), 0.0)), "must be a non-negative finite number (got null)");
}

TEST(ParseJson, EmptyAndWhitespaceDocuments) {
  ExpectBadInput(ParseJson("", "g.json"), {"g.json: empty file"});
  ExpectBadInput(ParseJson(" \n\t ", "g.json"), {"g.json: empty file"});
}

TEST(ParseJson, SyntaxErrorsGiveTheBytePosition) {
  // 16 bytes; nlohmann counts positions from 1, so the missing value is at byte 17.
  const auto r = ParseJson("{\"nodes\": [1, 2,", "g.json");
  ExpectBadInput(r, {"g.json: invalid JSON at byte 17 (line 1, column 17): syntax error"});
  ExpectBadInput(ParseJson("{\"a\":\n x}", "g.json"), {"g.json: invalid JSON at byte 8 (line 2, column 2): syntax error"});
}

TEST(ParseJson, NonStandardNumbersAreRejected) {
  ExpectBadInput(ParseJson("{\"a\": NaN}", "g.json"), {"g.json: invalid JSON at byte"});
  ExpectBadInput(ParseJson("{\"a\": Infinity}", "g.json"), {"g.json: invalid JSON at byte"});
  ExpectBadInput(ParseJson("{\"a\": 1e400}", "g.json"), {"g.json: invalid JSON", "1e400"});
}

TEST(ParseJson, BinaryGarbageKeepsTheMessagePrintable) {
  const auto r = ParseJson(std::string("\x01\xff\xfe\n\x80", 5), "g.json");
  ExpectBadInput(r, {"g.json: invalid JSON at byte 1"});
  for (char c : r.error().message) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << r.error().message;
}

TEST(Fields, MissingWrongTypeAndDefaults) {
  const Json obj = Json::parse(R"({"a": 3, "s": "x", "n": null, "arr": {}})");
  const JsonPath at = JsonPath("f.json").Key("nodes").Index(2);
  EXPECT_EQ(*IntField(obj, at, "a", kPositive), 3);
  EXPECT_EQ(ErrorOf(IntField(obj, at, "b", kPositive)), "f.json: nodes[2].b: missing");
  EXPECT_EQ(*IntFieldOr(obj, at, "n", 9, kPositive), 9);  // null counts as absent
  EXPECT_EQ(ErrorOf(IntField(obj, at, "s", kPositive)),
            "f.json: nodes[2].s: must be a positive integer (got a string \"x\")");
  EXPECT_EQ(*StringFieldOr(obj, at, "t", "dflt"), "dflt");
  EXPECT_EQ(ErrorOf(ArrayField(obj, at, "arr")), "f.json: nodes[2].arr: must be a JSON array (got an object)");
  EXPECT_EQ(ErrorOf(BoolFieldOr(obj, at, "a", false)), "f.json: nodes[2].a: must be true or false (got 3)");
}

TEST(Fields, UnknownKeysAndVersions) {
  const Json obj = Json::parse(R"({"v": 2, "nmae": "x"})");
  const JsonPath at("c.json");
  EXPECT_EQ(ErrorOf(CheckKnownKeys(obj, at, {"v", "name"})), "c.json: nmae: unknown field (expected v, name)");
  EXPECT_EQ(ErrorOf(CheckVersion(obj, at, "v", 1)), "c.json: v: unsupported version 2 (this kiwi reads version 1)");
  EXPECT_EQ(ErrorOf(CheckVersion(obj, at, "w", 1)), "c.json: w: missing");
}

TEST(DumpReadable, ExpandsShallowContainersOnly) {
  OrderedJson doc;
  doc["v"] = 1;
  doc["list"] = OrderedJson::array({OrderedJson{{"a", 1}, {"b", {1, 2}}}, OrderedJson{{"a", 2}}});
  doc["ints"] = {1, 2, 3};
  doc["empty"] = OrderedJson::array();
  EXPECT_EQ(DumpReadable(doc, 2),
            "{\n"
            "  \"v\": 1,\n"
            "  \"list\": [\n"
            "    {\"a\":1,\"b\":[1,2]},\n"
            "    {\"a\":2}\n"
            "  ],\n"
            "  \"ints\": [1,2,3],\n"
            "  \"empty\": []\n"
            "}\n");
}

}  // namespace
}  // namespace kiwi::io

namespace kiwi::io {
namespace {

// Issue 18: a document nested 100,000 levels deep crashed the readers that walk it recursively.
TEST(ParseJson, RefusesDeepNestingInOneLine) {
  const std::string deep = "{\"order\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  Result<Json> r = ParseJson(deep, "g.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  EXPECT_NE(r.error().message.find("g.json: JSON nested deeper than 512 levels"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace kiwi::io
