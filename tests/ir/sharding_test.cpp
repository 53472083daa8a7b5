#include "kiwi/ir/sharding.h"

#include <gtest/gtest.h>

namespace kiwi::ir {
namespace {

DeviceMesh Mesh(std::vector<int> sizes) {
  DeviceMesh m;
  for (int s : sizes) m.axes.push_back(MeshAxis{s, 1e9, 1e-6, "link"});
  return m;
}

TEST(ParseShardingSpec, AlpaNotation) {
  Result<ShardingSpec> s = ParseShardingSpec("S0R", 2, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dim_axes, (std::vector<AxisMask>{1, 0}));
  s = ParseShardingSpec("RS01", 2, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dim_axes, (std::vector<AxisMask>{0, 3}));
  EXPECT_EQ(s->UsedAxes(), AxisMask{3});
  s = ParseShardingSpec("S1S0R", 3, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dim_axes, (std::vector<AxisMask>{2, 1, 0}));
  s = ParseShardingSpec("R", 0, 2);  // replicated scalar
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->dim_axes.empty());
  EXPECT_TRUE(s->IsReplicated());
}

TEST(ParseShardingSpec, ToStringRoundTrips) {
  for (const char* text : {"S0R", "RS01", "S1S0R", "RR", "S01"}) {
    const int rank = text == std::string("S01") ? 1 : (text == std::string("S1S0R") ? 3 : 2);
    Result<ShardingSpec> s = ParseShardingSpec(text, rank, 2);
    ASSERT_TRUE(s.ok()) << text;
    EXPECT_EQ(s->ToString(), text);
  }
  EXPECT_EQ(ShardingSpec{}.ToString(), "R");
  EXPECT_EQ(ShardingSpec::Replicated(3).ToString(), "RRR");
  EXPECT_EQ(ShardingSpec::SplitDim(3, 2, AxisBit(1)).ToString(), "RRS1");
}

TEST(ParseShardingSpec, ErrorsNameTheSpecAndProblem) {
  struct Case {
    const char* text;
    int rank;
    const char* fragment;
  };
  for (const Case& c : {Case{"S2R", 2, "mesh axis 2 does not exist"}, Case{"S0S0", 2, "mesh axis 0 used twice"},
                        Case{"S01S1", 2, "used twice"}, Case{"SR", 2, "'S' must be followed"},
                        Case{"S0X", 2, "unexpected character 'X'"}, Case{"S0", 2, "has 1 dims, the tensor has 2"},
                        Case{"RRR", 2, "has 3 dims"}}) {
    Result<ShardingSpec> s = ParseShardingSpec(c.text, c.rank, 2);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.error().code, ErrorCode::kBadInput);
    EXPECT_NE(s.error().message.find(c.fragment), std::string::npos) << s.error().message;
    EXPECT_NE(s.error().message.find(std::string("'") + c.text + "'"), std::string::npos) << s.error().message;
  }
}

TEST(ShardingSpec, EqualityIgnoresTrailingReplicatedDims) {
  EXPECT_EQ((ShardingSpec{{1}}), (ShardingSpec{{1, 0}}));
  EXPECT_FALSE((ShardingSpec{{1}}) == (ShardingSpec{{2}}));
  EXPECT_EQ(ShardingSpec{}, ShardingSpec::Replicated(2));
  EXPECT_EQ((ShardingSpec{{1, 2}}).AxesOf(1), AxisMask{2});
  EXPECT_EQ((ShardingSpec{{1, 2}}).AxesOf(5), AxisMask{0});
}

TEST(ShardShape, DividesRoundingUp) {
  const DeviceMesh mesh = Mesh({4, 2});
  EXPECT_EQ(ShardShape({10, 6}, ShardingSpec{{1, 0}}, mesh), (Shape{3, 6}));
  EXPECT_EQ(ShardShape({10, 6}, ShardingSpec{{0, 3}}, mesh), (Shape{10, 1}));
  EXPECT_EQ(ShardShape({10, 6}, ShardingSpec{{2, 1}}, mesh), (Shape{5, 2}));
  EXPECT_EQ(ShardShape({10, 6}, ShardingSpec::Replicated(2), mesh), (Shape{10, 6}));
}

TEST(BytesPerDevice, ShardBytes) {
  const DeviceMesh mesh = Mesh({4, 2});
  EXPECT_EQ(BytesPerDevice({DType::kF32, {10, 6}}, ShardingSpec{{1, 0}}, mesh), 3 * 6 * 4);
  EXPECT_EQ(BytesPerDevice({DType::kBF16, {64, 32}}, ShardingSpec{{1, 2}}, mesh), 16 * 16 * 2);
  EXPECT_EQ(BytesPerDevice({DType::kF32, {}}, ShardingSpec{}, mesh), 4);
}

}  // namespace
}  // namespace kiwi::ir
