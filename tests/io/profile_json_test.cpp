#include <gtest/gtest.h>

#include "io_test_util.h"
#include "kiwi/io/cluster_json.h"

namespace kiwi::io {
namespace {

using testing::ExpectBadInput;

TEST(ProfileJson, ReadsTheFixtureInSeconds) {
  Result<cost::Profile> p = ReadProfileFile(testing::FixturePath("profile_example.json"));
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->op_seconds.size(), 3u);
  EXPECT_DOUBLE_EQ(*p->Find("layer0.attn.qkv"), 1.5e-3);
  EXPECT_DOUBLE_EQ(*p->Find("layer0.mlp.fc1"), 2e-3);
  EXPECT_EQ(*p->Find("loss"), 0.0);
  EXPECT_FALSE(p->Find("missing").has_value());
}

TEST(ProfileJson, UnitsConvertToSeconds) {
  for (const auto& [unit, seconds] : {std::pair{"s", 3.0}, std::pair{"ms", 3e-3}, std::pair{"us", 3e-6}}) {
    const std::string text =
        std::string(R"({"kiwi_profile_version": 1, "unit": ")") + unit + R"(", "ops": {"op": 3}})";
    Result<cost::Profile> p = ParseProfileJson(text, "p.json");
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_DOUBLE_EQ(*p->Find("op"), seconds) << unit;
  }
}

TEST(ProfileJson, UnitIsRequiredAndChecked) {
  ExpectBadInput(ParseProfileJson(R"({"kiwi_profile_version": 1, "ops": {}})", "p.json"), {"p.json: unit: missing"});
  ExpectBadInput(ParseProfileJson(R"({"kiwi_profile_version": 1, "unit": "ns", "ops": {}})", "p.json"),
                 {"p.json: unit: must be \"s\", \"ms\" or \"us\" (got \"ns\")"});
}

TEST(ProfileJson, TimesMustBeNonNegativeNumbers) {
  ExpectBadInput(ParseProfileJson(R"({"kiwi_profile_version": 1, "unit": "s", "ops": {"a": -1}})", "p.json"),
                 {"p.json: ops.a: must be a non-negative finite number (got -1)"});
  ExpectBadInput(ParseProfileJson(R"({"kiwi_profile_version": 1, "unit": "s", "ops": {"a": "fast"}})", "p.json"),
                 {"p.json: ops.a: must be a non-negative finite number (got a string \"fast\")"});
  ExpectBadInput(ParseProfileJson(R"({"kiwi_profile_version": 1, "unit": "s", "ops": [1]})", "p.json"),
                 {"p.json: ops: must be a JSON object (got an array)"});
}

TEST(ProfileJson, VersionAndUnknownFields) {
  ExpectBadInput(ParseProfileJson(R"({"unit": "s", "ops": {}})", "p.json"), {"p.json: kiwi_profile_version: missing"});
  ExpectBadInput(ParseProfileJson(R"({"kiwi_profile_version": 1, "unit": "s", "ops": {}, "op": {}})", "p.json"),
                 {"p.json: op: unknown field (expected kiwi_profile_version, unit, ops)"});
}

}  // namespace
}  // namespace kiwi::io
