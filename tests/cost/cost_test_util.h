#pragma once
// Shared by the cost model's tests: a device with round figures and a relative time check.
#include <gtest/gtest.h>

#include "kiwi/cost/cluster.h"

namespace kiwi::cost::testing {

inline void ExpectSeconds(double got, double want) { EXPECT_NEAR(got, want, 1e-9 * want) << "want " << want; }

// 1 TFLOP/s in f32, no f16/bf16 units, 100 GB/s of memory (80 GB/s at the default efficiency 0.8).
inline DeviceSpec TestDevice() {
  DeviceSpec d;
  d.name = "test";
  d.SetPeakFlops(ir::DType::kF32, 1e12);
  d.memory_bytes = int64_t{1} << 30;
  d.memory_bandwidth = 1e11;
  return d;
}

}  // namespace kiwi::cost::testing
