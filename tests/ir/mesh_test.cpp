#include "kiwi/ir/mesh.h"

#include <gtest/gtest.h>

namespace kiwi::ir {
namespace {

TEST(ParseMeshShape, AcceptsCommonSpellings) {
  EXPECT_EQ(*ParseMeshShape("2x4", "--mesh"), (std::vector<int>{2, 4}));
  EXPECT_EQ(*ParseMeshShape("(2,4)", "--mesh"), (std::vector<int>{2, 4}));
  EXPECT_EQ(*ParseMeshShape("[2, 4]", "--mesh"), (std::vector<int>{2, 4}));
  EXPECT_EQ(*ParseMeshShape("8", "--mesh"), std::vector<int>{8});
  EXPECT_EQ(*ParseMeshShape("2X2x2", "--mesh"), (std::vector<int>{2, 2, 2}));
}

TEST(ParseMeshShape, RejectsGarbageNamingTheFlag) {
  for (const char* bad : {"", "x", "2x", "x2", "0x4", "2x-4", "2*4", "a", "1234567", "2x2x2x2x2x2x2x2x2"}) {
    Result<std::vector<int>> r = ParseMeshShape(bad, "--mesh");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
    EXPECT_NE(r.error().message.find("--mesh"), std::string::npos) << r.error().message;
  }
}

DeviceMesh Mesh(std::vector<int> sizes) {
  DeviceMesh m;
  for (int s : sizes) m.axes.push_back(MeshAxis{s, 1e9, 1e-6, "link"});
  return m;
}

TEST(DeviceMesh, SizesAndGroups) {
  const DeviceMesh m = Mesh({2, 4, 3});
  EXPECT_EQ(m.Rank(), 3);
  EXPECT_EQ(m.NumDevices(), 24);
  EXPECT_EQ(m.GroupSize(0), 1);
  EXPECT_EQ(m.GroupSize(AxisBit(1)), 4);
  EXPECT_EQ(m.GroupSize(AxisBit(0) | AxisBit(2)), 6);
  EXPECT_EQ(m.GroupSize(m.AllAxes()), 24);
  EXPECT_EQ(m.AllAxes(), AxisMask{7});
  EXPECT_EQ(m.Shape(), (std::vector<int>{2, 4, 3}));
  EXPECT_EQ(m.ShapeString(), "2x4x3");
  EXPECT_EQ(DeviceMesh{}.NumDevices(), 1);
}

}  // namespace
}  // namespace kiwi::ir
