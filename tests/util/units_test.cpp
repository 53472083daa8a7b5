#include "kiwi/util/units.h"

#include <gtest/gtest.h>

namespace kiwi {
namespace {

TEST(ParseBytes, PlainBytesAndUnits) {
  EXPECT_EQ(*ParseBytes("123", "--budget"), 123);
  EXPECT_EQ(*ParseBytes("16GiB", "--budget"), int64_t{16} << 30);
  EXPECT_EQ(*ParseBytes("16GB", "--budget"), int64_t{16'000'000'000});
  EXPECT_EQ(*ParseBytes("512MiB", "--budget"), int64_t{512} << 20);
  EXPECT_EQ(*ParseBytes("1.5 kib", "--budget"), 1536);
  EXPECT_EQ(*ParseBytes("7B", "--budget"), 7);
}

TEST(ParseBytes, RejectsGarbageNamingTheFlag) {
  for (const char* bad : {"", "GiB", "-5", "12 parsecs", "1.2.3GB", "1e400GB"}) {
    auto r = ParseBytes(bad, "--memory");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
    EXPECT_NE(r.error().message.find("--memory"), std::string::npos) << r.error().message;
  }
}

TEST(FormatBytes, BinaryUnits) {
  EXPECT_EQ(FormatBytes(12), "12 B");
  EXPECT_EQ(FormatBytes(int64_t{16} << 30), "16.0 GiB");
  EXPECT_EQ(FormatBytes(int64_t{512} << 20), "512 MiB");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
}

TEST(FormatSeconds, PicksAReadableUnit) {
  EXPECT_EQ(FormatSeconds(1.5), "1.5 s");
  EXPECT_EQ(FormatSeconds(0.0123), "12.3 ms");
  EXPECT_EQ(FormatSeconds(4.5e-6), "4.5 us");
}

TEST(ExitCodes, FollowTheContract) {
  EXPECT_EQ(ExitCodeFor(ErrorCode::kBadInput), 2);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kInfeasible), 3);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kTimeLimit), 4);
}

}  // namespace
}  // namespace kiwi
