#pragma once
// Wall-clock seconds since a steady-clock instant: how solvers split and report their time limits.
#include <chrono>

namespace kiwi {

inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace kiwi
