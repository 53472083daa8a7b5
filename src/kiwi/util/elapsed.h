#pragma once
// Wall-clock seconds since a steady-clock instant, and deadlines from a time limit in seconds: how
// solvers split, keep and report their time limits.
#include <chrono>
#include <cmath>

namespace kiwi {

// The longest time limit honoured (about 3 years): larger ones, and infinity, mean "no limit" without
// overflowing steady_clock's 64-bit nanoseconds (which end after 292 years, ~9.2e9 s).
inline constexpr double kMaxTimeLimitSeconds = 1e8;

inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `start` + `seconds`, the seconds clamped to [0, kMaxTimeLimitSeconds] (NaN: 0, no time at all).
inline std::chrono::steady_clock::time_point DeadlineAfter(std::chrono::steady_clock::time_point start,
                                                          double seconds) {
  const double s = std::isnan(seconds) ? 0.0 : std::fmin(std::fmax(seconds, 0.0), kMaxTimeLimitSeconds);
  return start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace kiwi
