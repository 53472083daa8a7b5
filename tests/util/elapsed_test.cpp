#include "kiwi/util/elapsed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kiwi {
namespace {

using Clock = std::chrono::steady_clock;

// Issue 18, item 6: a 1e10 s limit overflowed steady_clock's nanoseconds into a deadline in the past.
TEST(DeadlineAfter, HugeLimitsAndInfinityMeanNoLimitNotAnOverflow) {
  const Clock::time_point now = Clock::now();
  for (double seconds : {1e10, 1e300, std::numeric_limits<double>::infinity()}) {
    const Clock::time_point d = DeadlineAfter(now, seconds);
    EXPECT_GT(d, now + std::chrono::hours(24 * 365)) << seconds;
    EXPECT_NEAR(std::chrono::duration<double>(d - now).count(), kMaxTimeLimitSeconds, 1.0) << seconds;
  }
}

TEST(DeadlineAfter, OrdinaryNegativeAndNanLimits) {
  const Clock::time_point now = Clock::now();
  EXPECT_NEAR(std::chrono::duration<double>(DeadlineAfter(now, 2.5) - now).count(), 2.5, 1e-9);
  EXPECT_EQ(DeadlineAfter(now, -1.0), now);
  EXPECT_EQ(DeadlineAfter(now, std::nan("")), now);
}

}  // namespace
}  // namespace kiwi
